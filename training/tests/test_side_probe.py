"""caper_train.ship.side_probe on the tiny shipped top-k model of test_parity: the graph it writes serves
the average of the shipped head's logit and the probe on the base-normed layer-L states (checked
against a PyTorch forward pass of the weights rebuilt from the graph), records itself in caper.json,
and refuses a second probe or a layer the model does not run below its top."""
import json

import numpy as np
import pytest
import torch

from test_base_prm import tiny_base, write_records  # noqa: F401  (fixture)
from test_parity import shipped  # noqa: F401  (fixture)


def test_the_graph_serves_the_average_of_the_head_and_the_probe(shipped, tmp_path):
    import onnx

    from caper_train.ship import ship, side_probe
    from caper_train.base import features, probe
    from caper_train.model.export import ort_rewards

    model_dir, base, rec, _ = shipped
    features.main(["--records", str(rec), "--base", str(base), "--layers", "1", "--out", str(tmp_path / "f"),
                   "--threads", "1"])
    out = tmp_path / "side"
    assert side_probe.main(["--model", str(model_dir), "--base", str(base), "--cache", str(tmp_path / "f"),
                            "--layer", "1", "--l2", "1e-3", "--out", str(out), "--threads", "1"]) == 0

    man = json.loads((out / "caper.json").read_text())
    assert man["name"] == "side" and man["export"]["side_probe"]["layer"] == 1
    assert man["export"]["side_probe"]["mix"] == 0.5 and man["export"]["side_probe"]["candidates"] == 48

    head = side_probe.fit([str(tmp_path / "f")], 1, 1e-3, set())[0]
    norm_w, eps = side_probe.base_norm(base)
    rebuilt = probe.rebuild(model_dir, base).eval()
    groups = ship.question_prompts([str(rec)], [out / "tokenizer.json"], 256, 3)
    ids = [p.ids for g in groups for p in g[0]]
    old = ort_rewards(ship.session(model_dir / "model.onnx", 1), ids)
    new = ort_rewards(ship.session(out / "model.onnx", 1), ids)
    moved = 0.0
    for x, a, b in zip(ids, old, new):
        kept = {}
        hook = rebuilt.backbone.layers[0].register_forward_hook(
            lambda _m, _i, o: kept.__setitem__("h", o[0] if isinstance(o, tuple) else o))
        with torch.no_grad():
            rebuilt.backbone(input_ids=torch.tensor([x]))
        hook.remove()
        h = kept["h"][0].float()
        normed = h / torch.sqrt((h * h).mean(-1, keepdim=True) + eps) * torch.from_numpy(norm_w)
        probe = (normed @ head.weight + head.bias).numpy()
        assert np.abs(b - (0.5 * a + 0.5 * probe)).max() < 1e-4
        moved = max(moved, float(np.abs(b - a).max()))
    assert moved > 1e-2  # the probe changes what is served

    g = onnx.load(str(out / "model.onnx"), load_external_data=False)
    with pytest.raises(ValueError, match="already carries"):
        side_probe.attach(g, 1, head.weight.numpy(), float(head.bias), norm_w, eps)
    with pytest.raises(ValueError, match="not below"):
        side_probe.write(model_dir, tmp_path / "x", 3, head, (norm_w, eps), {})

    # A graph that carries a probe reads back into the module it was traced from as the graph
    # without it (how a served model is continued: topk --init-model).
    from caper_train.base.probe import rebuild  # (the loop above rebinds `probe`)

    with_probe = rebuild(out, base).state_dict()
    for k, v in rebuilt.state_dict().items():
        assert torch.equal(with_probe[k], v), k

    # The served probe reads back as the head that was fitted.
    w, b, mix = side_probe.served(g, norm_w)
    np.testing.assert_allclose(w, head.weight.numpy(), rtol=1e-5, atol=1e-6)
    assert abs(b - float(head.bias)) < 1e-6 and mix == 0.5
    # ... and so does the command line's --dump-head, as a probe head file.
    assert side_probe.main(["--model", str(out), "--base", str(base), "--layer", "1", "--dump-head", str(tmp_path / "h.pt")]) == 0
    dumped = torch.load(tmp_path / "h.pt", weights_only=False)
    np.testing.assert_allclose(dumped["weight"].numpy(), head.weight.numpy(), rtol=1e-5, atol=1e-6)
    assert dumped["layer"] == 1 and dumped["mix"] == 0.5
    # A refit in place: the same graph with another probe serves the average with the new one, and
    # says what it replaced.
    other = type(head)(-2 * head.weight, float(head.bias) + 0.5)
    again = tmp_path / "again"
    side_probe.write(out, again, 1, other, (norm_w, eps), {"candidates": 1}, replace=True)
    man2 = json.loads((again / "caper.json").read_text())
    assert man2["export"]["side_probe"]["replaced"]["candidates"] == 48
    g2 = onnx.load(str(again / "model.onnx"), load_external_data=False)
    assert sum(n.name.startswith(side_probe.PREFIX) for n in g2.graph.node) == sum(n.name.startswith(side_probe.PREFIX) for n in g.graph.node)
    w2, b2, _ = side_probe.served(g2, norm_w)
    np.testing.assert_allclose(w2, other.weight.numpy(), rtol=1e-5, atol=1e-6)
    replaced = ort_rewards(ship.session(again / "model.onnx", 1), ids)
    served_new = ort_rewards(ship.session(out / "model.onnx", 1), ids)
    for x, a, s_old, s_new in zip(ids, old, served_new, replaced):
        # head share is the same; the probe share moved from the first probe to the second
        first = 2 * s_old - a
        assert np.abs(s_new - (0.5 * a + 0.5 * (-2 * (first - float(head.bias)) + float(head.bias) + 0.5))).max() < 1e-3
    # The command line writes a given head file in place of the served probe.
    torch.save({"weight": other.weight, "bias": other.bias, "layer": 1}, tmp_path / "other.pt")
    assert side_probe.main(["--model", str(out), "--base", str(base), "--layer", "1", "--head", str(tmp_path / "other.pt"),
                            "--replace", "--out", str(tmp_path / "cli")]) == 0
    w3, b3, _ = side_probe.served(onnx.load(str(tmp_path / "cli" / "model.onnx"), load_external_data=False), norm_w)
    np.testing.assert_allclose(w3, other.weight.numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="reads layer 1"):
        side_probe.write(out, tmp_path / "y", 2, other, (norm_w, eps), {}, replace=True)
