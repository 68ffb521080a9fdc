"""A side probe for a shipped top-k Clause-PRM: a linear head on the frozen base's layer-L states,
averaged into the served output inside the graph.

A top-k model runs the base's frozen bottom layers and then its trained top layers and head. The
trained top fits the training databases closely; a linear probe on the frozen states below it has
few parameters, sees the same positions through the base's own representation, and errs
differently on databases neither saw. The served graph already computes layer L's output on its
way to the top, so the probe costs one dot product per position: its logit, on layer L's output
passed through the base's final RMS norm (as caper_train.base.features caches it), is averaged with the
top's logit at every position (equal weights: both are fitted to the same per-position targets, so
their logits share a scale, and no weight is chosen on evaluation data).

The probe is fitted (caper_train.base.probe.fit: BCE over clause and terminal positions plus the
margin-weighted preference term) on feature caches of training records at layer L
(caper_train.base.features --layers L), which the top-k run's own caches hold when L is its rows layer.

    python -m caper_train.ship.side_probe --model models/default --base runs/base/qwen2.5-coder-0.5b-g128 \\
        --cache RUN/feats [...] --layer 9 --exclude-dbs HELD_OUT --out runs/models/NAME
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import torch

from ..model.export import SIDE_PROBE_PREFIX

# Where a torch.onnx (TorchScript) export of RewardModel leaves decoder layer i's output (the
# residual stream after its MLP), and the tensor the head's output becomes before the final cast.
LAYER_OUT = "/model/backbone/layers.{i}/Add_1_output_0"
HEAD_OUT = "/model/Squeeze_output_0"
PREFIX = SIDE_PROBE_PREFIX


def base_norm(base: Path) -> tuple[np.ndarray, float]:
    """The base's final RMS norm: its weight and epsilon."""
    from safetensors import safe_open

    cfg = json.loads((base / "config.json").read_text())
    with safe_open(str(base / "model.safetensors"), "pt") as f:
        key = next(k for k in f.keys() if k.endswith("norm.weight") and ".layers." not in k)
        w = f.get_tensor(key).float().numpy()
    return w, float(cfg.get("rms_norm_eps", 1e-6))


def served(graph_model, norm_w: np.ndarray) -> tuple[np.ndarray, float, float]:
    """The side probe a graph carries, as (weight on the normed features, bias, its share): what
    caper_train.base.probe's heads are, so the served probe is measured on caches like any other."""
    from onnx import numpy_helper

    inits = {t.name: t for t in graph_model.graph.initializer}
    if PREFIX + "weight" not in inits:
        raise ValueError("the graph carries no side probe")
    folded = numpy_helper.to_array(inits[PREFIX + "weight"]).reshape(-1)
    norm_w = np.asarray(norm_w, np.float32)
    if np.abs(norm_w).min() < 1e-8:
        raise ValueError("the base's final norm has a zero weight: the probe cannot be read back from the graph")
    return (folded / norm_w, float(numpy_helper.to_array(inits[PREFIX + "bias"])),
            float(numpy_helper.to_array(inits[PREFIX + "probe_share"])))


def attach(graph_model, layer: int, weight: np.ndarray, bias: float, norm_w: np.ndarray, eps: float,
           mix: float = 0.5, replace: bool = False) -> None:
    """In place: rewards = (1 - mix) * head + mix * (weight . rmsnorm(layer L output) + bias).
    `weight` is on the normed features; the norm's own weight is folded into it. With `replace`, a
    graph that carries a probe already gets the new weight and bias in its place."""
    from onnx import helper, numpy_helper

    g = graph_model.graph
    src = LAYER_OUT.format(i=layer - 1)
    produced = {o for n in g.node for o in n.output}
    if src not in produced or HEAD_OUT not in produced:
        raise ValueError(f"the graph has no {src if src not in produced else HEAD_OUT}: not a top-k export of "
                         f"{layer} or more layers")
    folded = (np.asarray(weight, np.float32) * np.asarray(norm_w, np.float32)).reshape(-1, 1)
    if any(n.name.startswith(PREFIX) for n in g.node):
        if not replace:
            raise ValueError("the graph already carries a side probe")
        # A refit: the probe's place in the graph and its share stay; only what it learned changes.
        if served(graph_model, norm_w)[2] != mix:
            raise ValueError("the graph's side probe has another share than the one asked for")
        inits = {t.name: t for t in g.initializer}
        inits[PREFIX + "weight"].CopyFrom(numpy_helper.from_array(folded, PREFIX + "weight"))
        inits[PREFIX + "bias"].CopyFrom(numpy_helper.from_array(np.array(bias, np.float32), PREFIX + "bias"))
        return
    p = lambda s: PREFIX + s  # noqa: E731
    g.initializer.extend([
        numpy_helper.from_array(folded, p("weight")),
        numpy_helper.from_array(np.array(bias, np.float32), p("bias")),
        numpy_helper.from_array(np.array(eps, np.float32), p("eps")),
        numpy_helper.from_array(np.array([-1], np.int64), p("last_axis")),
        numpy_helper.from_array(np.array(1.0 - mix, np.float32), p("head_share")),
        numpy_helper.from_array(np.array(mix, np.float32), p("probe_share")),
    ])
    nodes = [
        helper.make_node("Mul", [src, src], [p("sq")], name=p("Square")),
        helper.make_node("ReduceMean", [p("sq")], [p("ms")], name=p("MeanSquare"), axes=[-1], keepdims=1),
        helper.make_node("Add", [p("ms"), p("eps")], [p("ms_eps")], name=p("AddEps")),
        helper.make_node("Sqrt", [p("ms_eps")], [p("rms")], name=p("Rms")),
        helper.make_node("Div", [src, p("rms")], [p("normed")], name=p("Norm")),
        helper.make_node("MatMul", [p("normed"), p("weight")], [p("dot")], name=p("Dot")),
        helper.make_node("Add", [p("dot"), p("bias")], [p("logit3")], name=p("Bias")),
        helper.make_node("Squeeze", [p("logit3"), p("last_axis")], [p("logit")], name=p("Squeeze")),
        helper.make_node("Mul", [HEAD_OUT, p("head_share")], [p("head_part")], name=p("HeadShare")),
        helper.make_node("Mul", [p("logit"), p("probe_share")], [p("probe_part")], name=p("ProbeShare")),
        helper.make_node("Add", [p("head_part"), p("probe_part")], [p("mixed")], name=p("Mix")),
    ]
    # Every reader of the head's output reads the mix instead (the final cast to `rewards`).
    for n in g.node:
        for k, name in enumerate(n.input):
            if name == HEAD_OUT:
                n.input[k] = p("mixed")
    # Topological order: the new nodes right after the head's output is produced.
    at = next(k for k, n in enumerate(g.node) if HEAD_OUT in n.output)
    for k, n in enumerate(nodes):
        g.node.insert(at + 1 + k, n)


def fit(caches: list[str], layer: int, l2: float, exclude: set[str]):
    from ..base import probe

    cands, meta = probe.load_cache(caches, exclude=exclude)
    if layer not in meta.get("layers", []):
        raise ValueError(f"the caches hold layers {meta.get('layers')}, not {layer}")
    head = probe.fit(probe.table(cands, meta["layers"].index(layer)), l2)
    return head, {"candidates": len(cands), "databases": len({c["db_id"] for c in cands})}


def write(model_dir: Path, out: Path, layer: int, head, norm: tuple[np.ndarray, float], info: dict,
          mix: float = 0.5, replace: bool = False) -> dict:
    """A copy of `model_dir` whose graph carries the side probe; its train step records it."""
    import onnx

    from ..model.manifest import read_manifest, read_step, write_step

    man = read_manifest(model_dir)
    layers = (man.get("training") or {}).get("layers")
    if not layers or layer >= int(layers):
        raise ValueError(f"{model_dir}: layer {layer} is not below the model's {layers} layers")
    train = read_step(model_dir, "train")
    if not train:
        raise ValueError(f"{model_dir}: no recorded train step (steps/train.json)")
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(model_dir, out)
    graph_file = out / man["files"]["model"]
    m = onnx.load(str(graph_file), load_external_data=False)
    was = train.get("export", {}).get("side_probe")
    if replace and was and was.get("layer") != layer:
        raise ValueError(f"{model_dir}: its side probe reads layer {was.get('layer')}, not {layer}")
    attach(m, layer, head.weight.numpy(), float(head.bias), norm[0], norm[1], mix, replace)
    onnx.save_model(m, str(graph_file))
    record = {"layer": layer, "mix": mix, "norm": "the base's final RMS norm", **info,
              **({"replaced": was} if replace and was else {})}
    train["name"] = out.name
    train.setdefault("export", {})["side_probe"] = record
    write_step(out, "train", train)
    from .ship import card

    # The card describes the served graph, which now holds the probe.
    (out / "MODEL_CARD.md").write_text(card(read_manifest(out)))
    return record


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m caper_train.ship.side_probe", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a shipped top-k model directory")
    ap.add_argument("--base", required=True, help="the base its frozen layers come from (for the final norm)")
    ap.add_argument("--cache", nargs="+", help="caper_train.base.features caches of training records")
    ap.add_argument("--layer", type=int, required=True)
    ap.add_argument("--l2", type=float, default=1e-2)
    ap.add_argument("--exclude-dbs", default="")
    ap.add_argument("--out", help="the new model directory (required unless --dump-head)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--replace", action="store_true",
                    help="the model carries a side probe already: refit it on --cache (same layer and share)")
    ap.add_argument("--head", help="write this probe head file (caper_train.base.probe's format) instead of fitting one on --cache")
    ap.add_argument("--dump-head", help="instead: write the model's served probe as a caper_train.base.probe head file")
    a = ap.parse_args(argv)
    from ..base import probe

    if a.dump_head:
        import onnx

        from ..model.manifest import read_manifest

        m = onnx.load(str(Path(a.model) / read_manifest(Path(a.model))["files"]["model"]), load_external_data=False)
        w, b, mix = served(m, base_norm(Path(a.base))[0])
        probe.save_head(probe.Head(torch.from_numpy(w), b), a.layer, a.dump_head, {"mix": mix, "model": str(a.model)})
        return 0
    if not a.out or not (a.cache or a.head) or (a.cache and a.head):
        ap.error("--out and one of --cache or --head are required (unless --dump-head)")
    torch.set_num_threads(a.threads)
    exclude = {x for x in a.exclude_dbs.split(",") if x}
    if a.head:
        head, layer, made = probe.load_head(a.head)
        if layer != a.layer:
            raise SystemExit(f"{a.head} is a probe of layer {layer}, not {a.layer}")
        info = {"head": Path(a.head).name, **made}
    else:
        head, info = fit(a.cache, a.layer, a.l2, exclude)
    record = write(Path(a.model), Path(a.out), a.layer, head, base_norm(Path(a.base)),
                   {**info, **({} if a.head else {"l2": a.l2, "exclude_dbs": sorted(exclude),
                                                    "caches": [Path(c).name for c in a.cache]})},
                   replace=a.replace)
    print(json.dumps(record), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
