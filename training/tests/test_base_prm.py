"""The base Clause-PRM path (caper_train.base.base_prm) end to end on a tiny random Qwen2 base with the
chat tokenizer fixture: features equal an unpacked forward pass, the probe learns a separable
target, top-k training resumes exactly, the export serves the caper-chat-v1 prompt and matches torch."""
import json
import random
import shutil
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
CHAT_TOK = ROOT / "test" / "fixtures" / "chat" / "tokenizer.json"


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory) -> Path:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    d = tmp_path_factory.mktemp("base")
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=800, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                      tie_word_embeddings=False)
    Qwen2ForCausalLM(cfg).save_pretrained(d)
    shutil.copyfile(CHAT_TOK, d / "tokenizer.json")
    return d


def chat_prompts(n: int = 3):
    from caper_train.data import chat_prompt
    from caper_train.data.tok import CaperTokenizer

    tok = CaperTokenizer.load(CHAT_TOK)
    sp = {t: tok.special_id(t) for t in chat_prompt.CONTROL}
    units = [["SELECT count(*)", "FROM singer", "WHERE country = 'France'"], ["SELECT name", "FROM singer"],
             ["SELECT avg(age)", "FROM singer", "GROUP BY country"]]
    return [chat_prompt.build(tok.encode, sp, "singer: singer_id*, name, country, age", "How many singers?", u, 256)
            for u in units[:n]]


def test_packed_features_equal_unpacked(tiny_base):
    from caper_train.base.features import LayerTap, extract_question, load_truncated

    model = load_truncated(tiny_base, 3, torch.float32)
    tap = LayerTap(model, [2, 3])
    ps = chat_prompts()
    with torch.inference_mode():
        packed, n_tok, rows = extract_question(model, tap, ps, 4096, rows_layer=2)
        assert n_tok < sum(len(p.ids) for p in ps)  # the head is computed once
        assert len(rows) == 1 and rows[0]["h"].shape[0] == n_tok
        for p, f in zip(ps, packed):
            model(input_ids=torch.tensor([p.ids]), use_cache=False)
            want = tap.states()[[*p.markers, p.terminal]]
            assert f.shape == want.shape
            assert (f.float() - want).abs().max() < 1e-2  # fp16 cache


def write_records(path: Path, n_q: int = 12, seed: int = 0) -> None:
    """Questions with a right candidate and wrong ones whose root cause is the WHERE clause; the
    wrong WHERE compares with a literal the right one never uses, so a probe can tell them apart."""
    rng = random.Random(seed)
    rows = []
    for q in range(n_q):
        db = f"db{q % 3}"
        base = {"type": "trajectory", "db_id": db, "question": f"How many singers are from country {q}?",
                "schema": "singer: singer_id*, name, country, age"}
        rows.append({**base, "units": [{"kind": "SELECT", "text": "SELECT count(*)"}, {"kind": "FROM", "text": "FROM singer"},
                                       {"kind": "WHERE", "text": f"WHERE country = 'c{q}'"}],
                     "rewards": [0, 0, 0], "correct": True, "source": "gold"})
        for k in range(3):
            rows.append({**base, "units": [{"kind": "SELECT", "text": "SELECT count(*)"}, {"kind": "FROM", "text": "FROM singer"},
                                           {"kind": "WHERE", "text": f"WHERE age > {rng.randint(1, 99)} OR 1 = 1 -- {k}"}],
                         "rewards": [0, 0, -1], "correct": False, "source": "counterfactual"})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_probe_learns_and_blames_the_root_cause(tiny_base, tmp_path):
    from caper_train.base import features, probe

    rec = tmp_path / "r.jsonl"
    write_records(rec)
    features.main(["--records", str(rec), "--base", str(tiny_base), "--layers", "2,3", "--out", str(tmp_path / "f"),
                   "--threads", "1"])
    cands, meta = probe.load_cache([tmp_path / "f"])
    assert len(cands) == 48 and meta["layers"] == [2, 3]
    head = probe.fit(probe.table(cands, 1), l2=1e-4)
    outs = probe.candidate_outputs(head, cands, 1)
    right = [o["terminal"] for c, o in zip(cands, outs) if c["correct"]]
    wrong = [o["terminal"] for c, o in zip(cands, outs) if not c["correct"]]
    assert min(right) > max(wrong)
    for c, o in zip(cands, outs):
        if not c["correct"]:
            assert min(range(3), key=lambda k: o["units"][k]) == 2  # the WHERE clause is the lowest


def test_resume_is_resumable_and_export_serves_chat(tiny_base, tmp_path):
    from caper_train.base import base_prm, topk
    from caper_train.model.manifest import read_manifest

    rec = tmp_path / "r.jsonl"
    write_records(rec)
    common = ["--records", str(rec), "--base", str(tiny_base), "--family", "topk", "--layers", "3", "--top-k", "1",
              "--threads", "1", "--epochs", "2", "--max-length", "256", "--cand-weight", "0.5"]
    # one run straight through, one stopped after its first step and resumed
    assert base_prm.main([*common, "--out", str(tmp_path / "m1"), "--run", str(tmp_path / "r1")]) == 0
    run2 = tmp_path / "r2"
    (run2).mkdir()
    shutil.copytree(tmp_path / "r1" / "feats", run2 / "feats")
    shutil.copyfile(tmp_path / "r1" / "head.pt", run2 / "head.pt")
    shutil.copyfile(tmp_path / "r1" / "dtype.json", run2 / "dtype.json")
    # the dtype the run measured (base_prm passes it on; the stopped part must train in it too)
    dtype = json.loads((run2 / "dtype.json").read_text())["dtype"]
    targs = ["--cache", str(run2 / "feats"), "--base", str(tiny_base), "--layers", "3", "--init-head", str(run2 / "head.pt"),
             "--run", str(run2 / "topk"), "--epochs", "2", "--threads", "1", "--dtype", dtype, "--cand", "0.5"]
    topk.main([*targs, "--stop-after", "2"])  # stopped mid-run, checkpoint written
    assert torch.load(run2 / "topk" / "checkpoint.pt", weights_only=False)["step"] == 2
    assert base_prm.main([*common, "--out", str(tmp_path / "m2"), "--run", str(run2), "--resume"]) == 0
    a = torch.load(tmp_path / "r1" / "topk" / "checkpoint.pt", weights_only=False)
    b = torch.load(run2 / "topk" / "checkpoint.pt", weights_only=False)
    assert a["step"] == b["step"] > 0
    for k in a["model"]:
        assert torch.allclose(a["model"][k], b["model"][k], atol=1e-6), k
    m = read_manifest(tmp_path / "m1")
    assert m["template"] == "caper-chat-v1" and m["marker"] == "<|im_end|>"
    assert m["training"]["family"] == "topk" and m["training"]["layers"] == 3
    assert m["training"]["cand_weight"] == 0.5
    assert m["export"]["fp32_max_abs_diff"] < 1e-4
    # the exported layers are the trained ones, not the base's
    base_sd = torch.load(tmp_path / "r1" / "topk-head.pt", weights_only=False)["top_layers"]
    assert base_sd, "top-k layers recorded for export"


def test_a_run_continues_a_served_model(tmp_path):
    """--init-model: the top layers and head start from the model directory's graph (not the base and
    a probe), base_prm passes it on and records it, and a model of another depth is refused."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from caper_train.base import base_prm
    from caper_train.model.manifest import read_manifest
    from caper_train.base.topk import Top

    # Every parameter distinct, as in a pretrained base: the exporter shares one initializer among
    # parameters of equal values (a fresh Qwen2's zero biases, unit norms), which a graph cannot be
    # read back from.
    tiny_base = tmp_path / "base"
    torch.manual_seed(1)
    m = Qwen2ForCausalLM(Qwen2Config(vocab_size=800, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                                     tie_word_embeddings=False))
    with torch.no_grad():
        for prm in m.parameters():
            prm.add_(0.02 * torch.randn_like(prm))
    m.save_pretrained(tiny_base)
    shutil.copyfile(CHAT_TOK, tiny_base / "tokenizer.json")

    rec = tmp_path / "r.jsonl"
    write_records(rec)
    common = ["--records", str(rec), "--base", str(tiny_base), "--family", "topk", "--layers", "3", "--top-k", "1",
              "--threads", "1", "--max-length", "256"]
    assert base_prm.main([*common, "--epochs", "2", "--out", str(tmp_path / "m1"), "--run", str(tmp_path / "r1")]) == 0
    trained = torch.load(tmp_path / "r1" / "topk-head.pt", weights_only=False)
    cont, fresh = Top(tiny_base, 3, 2, None, str(tmp_path / "m1")), Top(tiny_base, 3, 2, None)
    for k, v in trained["top_layers"].items():
        assert torch.allclose(cont.state_dict()[k], v, atol=1e-5), k
    assert any(not torch.allclose(fresh.state_dict()[k], v, atol=1e-5) for k, v in trained["top_layers"].items())
    assert torch.allclose(cont.head.weight[0], trained["weight"].float(), atol=1e-5)
    assert abs(cont.head.bias.item() - trained["bias"]) < 1e-5
    with pytest.raises(ValueError, match="keeps 3 layers"):
        Top(tiny_base, 4, 3, None, str(tmp_path / "m1"))

    assert base_prm.main([*common, "--epochs", "0.5", "--init-model", str(tmp_path / "m1"),
                          "--out", str(tmp_path / "m2"), "--run", str(tmp_path / "r2")]) == 0
    assert not (tmp_path / "r2" / "head.pt").exists()  # no probe: the head is m1's
    assert read_manifest(tmp_path / "m2")["training"]["init_model"] == str(tmp_path / "m1")
    ck = torch.load(tmp_path / "r2" / "topk" / "checkpoint.pt", weights_only=False)
    assert ck["args"]["init_model"] == str(tmp_path / "m1")


def test_clause_prior_counts_the_training_databases_pairs(tmp_path):
    from caper_train.base.base_prm import clause_prior

    rec = tmp_path / "p.jsonl"
    rows = [{"type": "pair", "db_id": "a", "clause": "WHERE"}, {"type": "pair", "db_id": "a", "clause": "WHERE"},
            {"type": "pair", "db_id": "b", "clause": "FROM"}, {"type": "pair", "db_id": "held", "clause": "SELECT"},
            {"type": "trajectory", "db_id": "a", "units": []}]
    rec.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert clause_prior([str(rec)], None, ["held"]) == {"WHERE": 2, "FROM": 1}
    assert clause_prior([str(rec)], "b", []) == {"FROM": 1}


def test_blame_term_ranks_the_root_cause_lowest_among_a_wrong_candidates_units():
    from caper_train.base.topk import blame_loss

    # candidate 0: wrong, root cause at its second unit (reward -1); candidate 1: right
    cands = [{"rewards": [0.0, -1.0, 0.0], "correct": False}, {"rewards": [0.0, 0.0], "correct": True}]
    row = {"cands": [(0, [0, 1, 2, 3]), (1, [4, 5, 6])]}
    root_low = torch.tensor([2.0, -2.0, 2.0, 0.0, 1.0, 1.0, 1.0])
    root_high = torch.tensor([-2.0, 2.0, -2.0, 0.0, 1.0, 1.0, 1.0])
    assert blame_loss(root_low, row, cands) < 0.1 < blame_loss(root_high, row, cands)
    out = torch.zeros(7, requires_grad=True)
    blame_loss(out, row, cands).backward()
    g = out.grad
    # descending the loss lowers the root's output, raises its siblings', and leaves the terminal
    # and the right candidate alone
    assert g[1] > 0 and g[0] < 0 and g[2] < 0
    assert g[3] == 0 and torch.all(g[4:] == 0)
    # nothing to rank: only right candidates, or a wrong one with a single unit
    assert blame_loss(out, {"cands": [(1, [4, 5, 6])]}, cands) is None
    assert blame_loss(out, {"cands": [(0, [0, 1])]}, [{"rewards": [-1.0], "correct": False}]) is None


def test_candidate_term_separates_the_candidates_lowest_outputs():
    from caper_train.base.topk import candidate_loss

    # candidate 0 wrong (positions 0-2), candidate 1 right (positions 3-5); the last of each is the terminal
    cands = [{"rewards": [0.0, -1.0], "correct": False}, {"rewards": [0.0, 0.0], "correct": True}]
    row = {"cands": [(0, [0, 1, 2]), (1, [3, 4, 5])]}
    ordered = torch.tensor([3.0, -3.0, 3.0, 3.0, 3.0, 3.0])
    reversed_ = torch.tensor([3.0, 3.0, 3.0, 3.0, -3.0, 3.0])
    assert candidate_loss(ordered, row, cands) < 0.2 < candidate_loss(reversed_, row, cands)
    out = torch.tensor([3.0, -1.0, 3.0, 3.0, 0.5, 3.0], requires_grad=True)
    candidate_loss(out, row, cands, tau=0.5).backward()
    g = out.grad
    # the gradient goes to each candidate's lowest output: the wrong one's is pushed down, the
    # right one's up, and outputs far above a candidate's minimum are nearly untouched
    assert g[1] > 0 and g[4] < 0
    assert abs(g[0]) < 0.05 * abs(g[1]) and abs(g[3]) < 0.05 * abs(g[4])
    # the soft minimum tends to the minimum: a sharper temperature ranks by the lowest output alone
    one = {"cands": [(1, [3, 4, 5])]}
    lo = torch.tensor([0.0, 0.0, 0.0, 2.0, -1.0, 2.0])
    assert abs(candidate_loss(lo, one, cands, tau=0.01).item()
               - torch.nn.functional.binary_cross_entropy_with_logits(torch.tensor(-1.0), torch.tensor(1.0)).item()) < 1e-3
    assert candidate_loss(out, {"cands": []}, cands) is None
