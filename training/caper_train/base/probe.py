"""The probe family of the base Clause-PRM: a head trained on frozen base features.

Inputs are feature caches (caper_train.base.features). Per candidate, positions are its units' last
tokens then the terminal. Targets:
  - unit k: 1 when the clause is not the record's root cause, 0 at the root cause (annotate marks
    it with reward -1); a right candidate's units are all 1. The served output at a unit is then
    a clause verdict, and the "min" readout (the lowest clause first) is the model's blame.
  - terminal: 1 for a right candidate, 0 for a wrong one.
Loss: BCE over units and terminals, plus the margin-weighted preference loss of the CAPER recipe
between a question's right and wrong candidates at the terminal, (1 + delta) * -log sigmoid(r+ - r-)
(delta = 1, every wrong candidate against every right one of the question, averaged).

The head is linear over the standardized hidden state of one layer (the truncated model's output,
so the served graph is the first N layers plus this head folded into one Linear). Fitting is
full-batch L-BFGS: seconds for a hundred thousand positions.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch

from ..model.paths import shown_command, shown_path


@dataclass
class Table:
    """Flattened positions of a set of candidates at one layer."""
    x: torch.Tensor          # [positions, hidden] float32
    y: torch.Tensor          # [positions] target in {0, 1}
    w: torch.Tensor          # [positions] weight (0 = unsupervised)
    cand: torch.Tensor       # [positions] candidate index
    is_terminal: torch.Tensor  # [positions] bool
    terminal_at: torch.Tensor  # [candidates] row of each candidate's terminal
    qgroup: torch.Tensor     # [candidates] question index
    correct: torch.Tensor    # [candidates] bool
    cands: list[dict]


def load_cache(dirs: list[str | Path], dbs: set[str] | None = None, exclude: set[str] | None = None) -> tuple[list[dict], dict]:
    import json
    out: list[dict] = []
    meta = None
    for d in dirs:
        d = Path(d)
        m = json.loads((d / "meta.json").read_text())
        if meta is not None and m["layers"] != meta["layers"]:
            raise ValueError(f"{d}: layers {m['layers']} differ from {meta['layers']}")
        meta = m
        for p in sorted(d.glob("part-*.pt")):
            for c in torch.load(p, weights_only=False):
                if dbs and c["db_id"] not in dbs:
                    continue
                if exclude and c["db_id"] in exclude:
                    continue
                out.append(c)
    return out, meta or {}


def root_index(c: dict) -> int:
    for k, r in enumerate(c["rewards"]):
        if r < 0:
            return k
    return -1


def targets(c: dict, after_root_weight: float = 1.0) -> tuple[list[float], list[float]]:
    """(target, weight) at each unit, then at the terminal: the rule of the module docstring. A wrong
    candidate with no blamed clause supervises only its terminal."""
    n = len(c["kinds"])
    r = root_index(c)
    y, w = [1.0] * n, [1.0] * n
    if r >= 0:
        y[r] = 0.0
        for k in range(r + 1, n):
            w[k] = after_root_weight
    elif not c["correct"]:
        w = [0.0] * n
    return y + [1.0 if c["correct"] else 0.0], w + [1.0]


def table(cands: list[dict], layer_slot: int, after_root_weight: float = 1.0) -> Table:
    xs, ys, ws, ci, term = [], [], [], [], []
    terminal_at, qg, corr = [], [], []
    qids: dict[str, int] = {}
    row = 0
    for i, c in enumerate(cands):
        f = c["feats"][:, layer_slot].float()
        y, w = targets(c, after_root_weight)
        n = len(c["kinds"])
        xs.append(f)
        ys += y
        ws += w
        ci += [i] * (n + 1)
        term += [False] * n + [True]
        terminal_at.append(row + n)
        row += n + 1
        qg.append(qids.setdefault(c["qid"], len(qids)))
        corr.append(bool(c["correct"]))
    return Table(torch.cat(xs), torch.tensor(ys), torch.tensor(ws), torch.tensor(ci), torch.tensor(term),
                 torch.tensor(terminal_at), torch.tensor(qg), torch.tensor(corr), cands)


def terminal_pairs(t: Table) -> tuple[torch.Tensor, torch.Tensor]:
    """(right, wrong) terminal rows of every pair of candidates of one question."""
    by: dict[int, tuple[list[int], list[int]]] = {}
    for i in range(len(t.cands)):
        r, w = by.setdefault(int(t.qgroup[i]), ([], []))
        (r if t.correct[i] else w).append(int(t.terminal_at[i]))
    pos, neg = [], []
    for r, w in by.values():
        for a in r:
            for b in w:
                pos.append(a)
                neg.append(b)
    return torch.tensor(pos, dtype=torch.long), torch.tensor(neg, dtype=torch.long)


@dataclass
class Head:
    weight: torch.Tensor  # [hidden] on raw (unstandardized) features
    bias: float

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight + self.bias


def fit(t: Table, l2: float, pref_weight: float = 1.0, delta: float = 1.0, iters: int = 200) -> Head:
    mu = t.x.mean(0)
    sd = t.x.std(0) + 1e-4
    z = (t.x - mu) / sd
    d = z.shape[1]
    w = torch.zeros(d, requires_grad=True)
    b = torch.zeros(1, requires_grad=True)
    pos, neg = terminal_pairs(t)
    wsum = t.w.sum()
    opt = torch.optim.LBFGS([w, b], lr=1, max_iter=iters, history_size=20, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        s = z @ w + b
        bce = torch.nn.functional.binary_cross_entropy_with_logits(s, t.y, weight=t.w, reduction="sum") / wsum
        loss = bce + l2 * (w * w).sum()
        if pref_weight > 0 and len(pos):
            loss = loss + pref_weight * (1 + delta) * torch.nn.functional.softplus(-(s[pos] - s[neg])).mean()
        loss.backward()
        return loss

    opt.step(closure)
    with torch.no_grad():
        wr = w.detach() / sd
        br = float(b.detach()) - float((wr * mu).sum())
    return Head(wr, br)


def sigmoid(v: float) -> float:
    return 1 / (1 + math.exp(-max(-60.0, min(60.0, v))))


def candidate_outputs(head: Head, cands: list[dict], layer_slot: int) -> list[dict]:
    """Per candidate: raw outputs at its units and at its terminal."""
    out = []
    with torch.no_grad():
        for c in cands:
            s = head(c["feats"][:, layer_slot].float()).tolist()
            out.append({"units": s[:-1], "terminal": s[-1]})
    return out


def save_head(head: Head, layer: int, path: str | Path, info: dict) -> None:
    torch.save({"weight": head.weight, "bias": head.bias, "layer": layer, **info}, path)


def load_head(path: str | Path) -> tuple[Head, int, dict]:
    """A head file of save_head: the head, the layer it reads, and what else the file records."""
    h = torch.load(path, weights_only=False)
    info = {k: v for k, v in h.items() if k not in ("weight", "bias", "layer")}
    return Head(h["weight"].float(), float(h["bias"])), int(h["layer"]), info


def reward_model(base: str | Path, head_file: str | Path):
    """The served model: the base's first `layer` layers and the probe folded into one Linear."""
    from .features import load_truncated
    from ..model.reward_model import RewardModel

    h = torch.load(head_file, weights_only=False)
    backbone = load_truncated(base, h["layer"], torch.float32)
    if "top_layers" in h:
        # top-k family: the trained layers replace the base's (keys "layers.<i>..." count from from_layer)
        sd = {}
        for k, v in h["top_layers"].items():
            _, i, rest = k.split(".", 2)
            sd[f"layers.{int(i) + h['from_layer']}.{rest}"] = v
        missing, unexpected = backbone.load_state_dict(sd, strict=False)
        if unexpected:
            raise ValueError(f"top layers do not fit the base: {unexpected[:3]}")
    m = RewardModel(backbone, backbone.config.hidden_size)
    with torch.no_grad():
        m.head.weight.copy_(h["weight"][None].float())
        m.head.bias.fill_(float(h["bias"]))
    return m.eval(), h


def export_model(base: str | Path, head_file: str | Path, out: str | Path, name: str, max_length: int,
                 origin: dict, metrics: dict | None = None) -> dict:
    """ONNX (prefix-tree-v1) + caper.json (template caper-chat-v1) + the base's tokenizer.json."""
    import shutil

    from ..data import chat_prompt
    from ..model.export import OUTPUT_NAME, export, manifest_inputs
    from ..model.manifest import write_step
    from ..data.tok import CaperTokenizer

    out = Path(out)
    model, h = reward_model(base, head_file)
    tok = CaperTokenizer.load(Path(base) / "tokenizer.json")
    specials = {t: tok.special_id(t) for t in chat_prompt.CONTROL}
    samples = [chat_prompt.build(tok.encode, specials, s, q, u, max_length).ids for s, q, u in [
        ("singer: singer_id*, name, country", "How many singers are from France?",
         ["SELECT count(*)", "FROM singer", "WHERE country = 'France'"]),
        ("singer: singer_id*, name, country", "How many singers are from France?", ["SELECT count(*)", "FROM singer"]),
        ("pets: petid*, pettype, pet_age", "Average age of dogs?", ["SELECT avg(pet_age)", "FROM pets", "WHERE pettype = 'dog'"]),
    ]]
    info = export(model, out, samples, fp16=False)
    shutil.copyfile(Path(base) / "tokenizer.json", out / "tokenizer.json")
    end = chat_prompt.CONTROL[1]
    m = {"name": name, "template": chat_prompt.TEMPLATE, "marker": end, "marker_id": specials[end],
         "special_ids": specials, "pad_id": tok.special_id("<|endoftext|>"), "max_length": max_length,
         "output_name": OUTPUT_NAME, **manifest_inputs(info), "parameters": sum(p.numel() for p in model.parameters()),
         "vocab_size": tok.vocab_size, "data_hash": h.get("data_hash", "none"),
         "metrics": {**h.get("metrics", {}), **(metrics or {})},
         "files": {"model": "model.onnx", "model_int8": "model.int8.onnx", "tokenizer": "tokenizer.json"},
         "terminal_verdict": True, "training": origin, "export": info}
    write_step(out, "train", m, fresh=True)
    return info


def embedding_rows(g) -> int:
    """Rows of the graph's token embedding, whole (fp32) or as ship's 4-bit lookup."""
    for t in g.initializer:
        if t.name.endswith(("embed_tokens.weight", "embed_tokens.weight.q4.codes")):
            return int(t.dims[0])
    raise ValueError("the graph holds no embed_tokens table")


def rebuild(model_dir: Path, base: Path, layers: int | None = None) -> RewardModel:
    """The graph's weights in the module its export traced (reward_model's: the truncated base and
    the head), from a model directory alone: how a served model is read back to be trained further
    (topk --init-model) or measured (parity). `layers`: the manifest's training.layers unless given."""
    import onnx

    from ..model.export import place_weights
    from .features import load_truncated
    from ..model.manifest import read_manifest
    from ..model.reward_model import RewardModel

    man = read_manifest(model_dir)
    layers = layers or (man.get("training") or {}).get("layers")
    if not layers:
        raise ValueError(f"{model_dir}/caper.json names no training.layers")
    g = onnx.load(str(model_dir / man["files"]["model"])).graph
    backbone = load_truncated(base, int(layers), torch.float32)
    rows = embedding_rows(g)
    if rows != backbone.config.vocab_size:
        backbone.resize_token_embeddings(rows, mean_resizing=False)
    return place_weights(RewardModel(backbone, backbone.config.hidden_size), g, model_dir)


def main(argv=None) -> int:
    import argparse
    import json
    import sys

    ap = argparse.ArgumentParser(prog="python -m caper_train.base.probe")
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fit", help="fit the head on feature caches")
    f.add_argument("--cache", nargs="+", required=True)
    f.add_argument("--layer", type=int, required=True)
    f.add_argument("--l2", type=float, default=1e-3)
    f.add_argument("--after-root", type=float, default=1.0)
    f.add_argument("--pref", type=float, default=1.0)
    f.add_argument("--exclude-dbs", default="")
    f.add_argument("--out", required=True)
    e = sub.add_parser("export", help="truncated base + head -> model directory")
    e.add_argument("--base", required=True)
    e.add_argument("--head", required=True)
    e.add_argument("--out", required=True)
    e.add_argument("--name", default="prm-base")
    e.add_argument("--max-length", type=int, default=768)
    a = ap.parse_args(argv)
    if a.cmd == "fit":
        cands, meta = load_cache(a.cache, exclude={x for x in a.exclude_dbs.split(",") if x})
        slot = meta["layers"].index(a.layer)
        t = table(cands, slot, a.after_root)
        head = fit(t, a.l2, pref_weight=a.pref)
        save_head(head, a.layer, a.out, {"l2": a.l2, "after_root": a.after_root, "pref": a.pref,
                                         "candidates": len(cands), "databases": sorted({c["db_id"] for c in cands}),
                                         "base": meta.get("base"), "template": meta.get("template")})
        print(json.dumps({"candidates": len(cands), "positions": int(t.x.shape[0])}), file=sys.stderr)
        return 0
    info = export_model(a.base, a.head, a.out, a.name, a.max_length,
                        {"family": "probe", "base": shown_path(a.base),
                         "command": shown_command("caper_train.base.probe", sys.argv[1:] if argv is None else argv)})
    print(json.dumps(info, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
