"""The top-k family of the base Clause-PRM: the first N-k layers frozen, the top k layers and the head trained.

The frozen layers' output is the same every epoch, so it is computed once (caper_train.base.features
--rows-layer N-k keeps every packed row's hidden states after layer N-k) and training runs only
the k layers above it: per token about 3k layer-passes (forward and backward) instead of 3N.
Targets and loss are the probe's (caper_train.base.probe: clause verdicts at each unit's last token, the
whole-query verdict at the terminal, the margin-weighted preference between a question's right and
wrong candidates at the terminal). The head starts from a probe fitted on layer N, so training
begins from the probe's solution.

A progress line every --log-every steps (step time, tokens/s, loss, ETA); a checkpoint every
--checkpoint-minutes into --run (layers, head, optimizer, schedule, data order and position), and
`--resume` continues from it exactly. The exported model is the base's first N layers with the
trained top layers and head (caper_train.base.probe.export_model writes it).

    python -m caper_train.base.topk --cache runs/prm-base/feats-train --base runs/base/qwen2.5-coder-0.5b \\
        --layers 8 --init-head HEAD.pt --run runs/prm-base/topk --epochs 1 [--max-minutes M] [--resume]
"""
from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

import torch

from ..model.grid import GridLinear, on_matrix_grid, read_grid
from . import probe
from .features import load_truncated, packed_mask
from .throughput import autocast


def load_rows(caches: list[str | Path], exclude: set[str]) -> tuple[list[dict], list[dict], int]:
    """Rows with their candidates' targets: (row, [(candidate, positions)]) and the rows' layer."""
    rows: list[dict] = []
    cands: list[dict] = []
    layer = 0
    for cache in caches:
        cache = Path(cache)
        meta = json.loads((cache / "meta.json").read_text())
        if layer and meta.get("rows_layer", 0) != layer:
            raise ValueError(f"{cache}: rows after layer {meta.get('rows_layer')}, not {layer}")
        layer = meta.get("rows_layer", 0)
        _load_rows_of(cache, exclude, rows, cands)
    return rows, cands, layer


def _load_rows_of(cache: Path, exclude: set[str], rows: list[dict], cands: list[dict]) -> None:
    for part in sorted(cache.glob("part-*.pt")):
        rp = cache / part.name.replace("part-", "rows-")
        if not rp.exists():
            continue
        cs = torch.load(part, weights_only=False)
        base = len(cands)
        for c in cs:
            c.pop("feats", None)
            cands.append(c)
        for r in torch.load(rp, weights_only=False):
            if cs and r["cands"] and cs[r["cands"][0][0]]["db_id"] in exclude:
                continue
            r["cands"] = [(base + j, at) for j, at in r["cands"]]
            rows.append(r)


class Top(torch.nn.Module):
    """Layers from..N of the truncated base, its final norm and a scalar head."""

    def __init__(self, base, layers: int, from_layer: int, head_file: str | None, init_model: str | None = None):
        super().__init__()
        m = load_truncated(base, layers, torch.float32)
        self.layers = torch.nn.ModuleList(m.layers[from_layer:layers])
        self.norm = m.norm
        self.rotary = m.rotary_emb
        self.head = torch.nn.Linear(m.config.hidden_size, 1)
        if head_file:
            h = torch.load(head_file, weights_only=False)
            with torch.no_grad():
                self.head.weight.copy_(h["weight"][None].float())
                self.head.bias.fill_(float(h["bias"]))
        if init_model:
            self.start_from(base, layers, from_layer, init_model)

    @torch.no_grad()
    def start_from(self, base, layers: int, from_layer: int, model_dir: str) -> None:
        """The top layers, final norm and head of a served model directory (an export or a shipped
        4-bit one, whose weights are the trained grid values), so a run continues a model that was
        trained before instead of starting from the base and a probe. Its bottom layers must be the
        frozen base's, which the cached rows were computed with: probe.rebuild reads the graph into
        the module the export traced, and only the layers this run trains are taken from it."""
        rm = probe.rebuild(Path(model_dir), Path(base))  # at the depth its caper.json records
        if len(rm.backbone.layers) != layers:
            raise ValueError(f"{model_dir} keeps {len(rm.backbone.layers)} layers, this run {layers}")
        for mine, theirs in zip(self.layers, rm.backbone.layers[from_layer:layers]):
            mine.load_state_dict(theirs.state_dict())
        self.norm.load_state_dict(rm.backbone.norm.state_dict())
        self.head.load_state_dict(rm.head.state_dict())
        for p in self.norm.parameters():
            p.requires_grad_(False)

    def forward(self, h: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        pe = self.rotary(h, pos)
        for layer in self.layers:
            h = layer(h, attention_mask=mask, position_ids=pos, position_embeddings=pe)
        return self.head(self.norm(h)).squeeze(-1)


def blame_loss(out: torch.Tensor, row: dict, cands: list[dict]) -> torch.Tensor | None:
    """Listwise blame: over a wrong candidate's units, the root cause should hold the lowest
    output. The per-unit BCE asks each unit alone whether it is wrong; the service blames by
    ranking a candidate's units against each other ("min"), so this term trains that ranking
    directly: cross-entropy of a softmax over the units' negated outputs at the root's index."""
    terms = []
    for ci, at in row["cands"]:
        r = probe.root_index(cands[ci])
        units = at[:-1]
        if r < 0 or len(units) < 2:
            continue
        terms.append(torch.nn.functional.cross_entropy(-out[torch.tensor(units)][None], torch.tensor([r])))
    return torch.stack(terms).mean() if terms else None


def candidate_loss(out: torch.Tensor, row: dict, cands: list[dict], tau: float = 1.0,
                   delta: float = 1.0) -> torch.Tensor | None:
    """The candidate score as the service computes it: the lowest of a candidate's unit and
    terminal outputs ("min", src/scoring/candidate-score.ts), trained directly. The other terms
    supervise each position alone, while ranking and the confidence of a pick read only that
    minimum; here a soft minimum (-tau * logsumexp(-x / tau), which tends to min as tau falls)
    gets the margin-weighted preference between the question's right and wrong candidates and a
    right/wrong BCE, so the number the service ranks by is the one that is separated."""
    mins, ys = [], []
    for ci, at in row["cands"]:
        mins.append(-tau * torch.logsumexp(-out[torch.tensor(at)] / tau, 0))
        ys.append(1.0 if cands[ci]["correct"] else 0.0)
    if not mins:
        return None
    m, y = torch.stack(mins), torch.tensor(ys)
    loss = torch.nn.functional.binary_cross_entropy_with_logits(m, y)
    r, w = m[y > 0.5], m[y < 0.5]
    if len(r) and len(w):
        loss = loss + (1 + delta) * torch.nn.functional.softplus(-(r[:, None] - w[None, :])).mean()
    return loss


def row_loss(model: Top, row: dict, cands: list[dict], pref_weight: float, delta: float = 1.0,
             dtype: torch.dtype = torch.float32, blame_weight: float = 0.0, cand_weight: float = 0.0,
             cand_tau: float = 1.0):
    h = row["h"].float()[None]
    pos = torch.tensor([row["pos"]])
    # bf16 autocast where the machine has bf16 instructions (the run's measured dtype); the
    # weights, the optimizer and the loss stay fp32.
    with autocast(dtype):
        out = model(h, pos, packed_mask(row["bid"]))[0]
    out = out.float()
    ys, ws, at_all = [], [], []
    right, wrong = [], []
    for ci, at in row["cands"]:
        y, w = probe.targets(cands[ci])
        ys += y
        ws += w
        at_all += at
        (right if cands[ci]["correct"] else wrong).append(at[-1])
    s = out[torch.tensor(at_all)]
    yt, wt = torch.tensor(ys), torch.tensor(ws)
    bce = torch.nn.functional.binary_cross_entropy_with_logits(s, yt, weight=wt, reduction="sum") / wt.sum().clamp(min=1)
    loss = bce
    if pref_weight > 0 and right and wrong:
        r = out[torch.tensor(right)][:, None]
        w = out[torch.tensor(wrong)][None, :]
        loss = loss + pref_weight * (1 + delta) * torch.nn.functional.softplus(-(r - w)).mean()
    if blame_weight > 0:
        b = blame_loss(out, row, cands)
        if b is not None:
            loss = loss + blame_weight * b
    if cand_weight > 0:
        c = candidate_loss(out, row, cands, cand_tau, delta)
        if c is not None:
            loss = loss + cand_weight * c
    return loss, len(row["ids"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m caper_train.base.topk")
    ap.add_argument("--cache", nargs="+", required=True, help="feature caches written with --rows-layer")
    ap.add_argument("--base", required=True)
    ap.add_argument("--layers", type=int, required=True, help="N: the served model keeps the first N layers")
    ap.add_argument("--from-layer", type=int, help="the cache's --rows-layer (default: read from the cache)")
    ap.add_argument("--init-head", help="probe head fitted on layer N (caper_train.base.probe fit)")
    ap.add_argument("--init-model", help="a served model directory of the same base and N whose top layers and head "
                                         "start the run (continued training); the cache must come from the same base")
    ap.add_argument("--run", required=True, help="checkpoint directory")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--epochs", type=float, default=1.0)
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--head-lr", type=float, default=1e-3)
    ap.add_argument("--pref", type=float, default=1.0)
    ap.add_argument("--blame", type=float, default=0.0,
                    help="weight of the listwise blame term (root cause lowest among a wrong candidate's units)")
    ap.add_argument("--cand", type=float, default=0.0,
                    help="weight of the candidate-score term (preference and BCE at the soft minimum of a candidate's outputs)")
    ap.add_argument("--cand-tau", type=float, default=1.0, help="temperature of that soft minimum")
    ap.add_argument("--rows-per-step", type=int, default=4)
    ap.add_argument("--max-minutes", type=float)
    ap.add_argument("--stop-after", type=int, help="stop (with a checkpoint) after this many steps of this process")
    ap.add_argument("--checkpoint-minutes", type=float, default=5.0)
    ap.add_argument("--exclude-dbs", default="")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                    help="compute dtype of the trained layers (bfloat16: autocast; the run measures which is faster)")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    run = Path(a.run)
    run.mkdir(parents=True, exist_ok=True)
    rows, cands, rows_layer = load_rows(a.cache, {x for x in a.exclude_dbs.split(",") if x})
    from_layer = a.from_layer or rows_layer
    if not from_layer:
        raise SystemExit("the cache does not say its rows layer: pass --from-layer")
    model = Top(a.base, a.layers, from_layer, None if a.init_model else a.init_head, a.init_model)
    # A base on the ship grid: the trained layers train on their own grid values too, so the
    # shipped 4-bit file holds exactly the model that was trained.
    grid = read_grid(a.base)
    on_grid = GridLinear(model.layers, grid["block"]) if grid else None
    body = [p for p in model.layers.parameters()]
    opt = torch.optim.AdamW([{"params": body, "lr": a.lr}, {"params": model.head.parameters(), "lr": a.head_lr}],
                            weight_decay=0.0)
    order = list(range(len(rows)))
    random.Random(a.seed).shuffle(order)
    steps_per_epoch = math.ceil(len(order) / a.rows_per_step)
    total = max(1, int(steps_per_epoch * a.epochs))
    warm = max(1, total // 20)
    lr0 = [g["lr"] for g in opt.param_groups]
    step = 0
    if a.resume and (run / "checkpoint.pt").exists():
        ck = torch.load(run / "checkpoint.pt", weights_only=False)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        step, order = ck["step"], ck["order"]
        if on_grid:
            on_grid.refresh()
        print(f"topk: resumed at step {step}/{total}", file=sys.stderr)

    def save():
        tmp = run / "checkpoint.pt.tmp"
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "order": order,
                    "args": vars(a), "layers": a.layers, "from_layer": from_layer,
                    "grid": grid}, tmp)
        tmp.replace(run / "checkpoint.pt")

    start_step = step
    t0 = last_ck = time.time()
    tok = 0
    run_loss = 0.0
    model.train()
    while step < total:
        if a.max_minutes and time.time() - t0 > 60 * a.max_minutes:
            break
        if a.stop_after is not None and step - start_step >= a.stop_after:
            break
        i0 = (step % steps_per_epoch) * a.rows_per_step
        batch = [rows[k] for k in order[i0:i0 + a.rows_per_step]]
        f = min(1.0, (step + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(1.0, step / total)))
        for g, l0 in zip(opt.param_groups, lr0):
            g["lr"] = l0 * f
        opt.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for r in batch:
            loss, n = row_loss(model, r, cands, a.pref, dtype=getattr(torch, a.dtype), blame_weight=a.blame,
                               cand_weight=a.cand, cand_tau=a.cand_tau)
            (loss / len(batch)).backward()
            loss_sum += loss.item() / len(batch)
            tok += n
        torch.nn.utils.clip_grad_norm_(body, 1.0)
        opt.step()
        if on_grid:
            on_grid.refresh()
        step += 1
        run_loss = loss_sum if step == 1 else 0.95 * run_loss + 0.05 * loss_sum
        el = time.time() - t0
        if step % a.log_every == 0 or step == total:
            done = step - start_step
            print(f"topk: step {step}/{total} loss {run_loss:.4f} {el / done:.2f} s/step {tok / el:.0f} tok/s "
                  f"eta {(total - step) * el / done / 60:.1f} min", file=sys.stderr, flush=True)
        if time.time() - last_ck > 60 * a.checkpoint_minutes:
            save()
            last_ck = time.time()
    save()
    print(json.dumps({"step": step, "total": total, "rows": len(rows), "loss": run_loss}), file=sys.stderr)
    return 0


def head_file_from(run: str | Path, out: str | Path) -> None:
    """The trained head as a probe head file (for export) and the trained layers beside it."""
    ck = torch.load(Path(run) / "checkpoint.pt", weights_only=False)
    sd = ck["model"]
    if ck.get("grid"):
        # the weights the forward pass used: their grid values
        sd = {k: on_matrix_grid(v, ck["grid"]["block"]) if k.startswith("layers.") and k.endswith("proj.weight") else v
              for k, v in sd.items()}
    torch.save({"weight": sd["head.weight"][0], "bias": float(sd["head.bias"][0]), "layer": ck["layers"],
                "top_layers": {k: v for k, v in sd.items() if k.startswith("layers.")}, "from_layer": ck["from_layer"]},
               out)


if __name__ == "__main__":
    raise SystemExit(main())
