"""Train the CAPER Clause-PRM and export it.

    python -m caper_train.scratch.train --data FILE.jsonl --out models/NAME --preset tiny|default
        [--base PATH] [--steps N | --epochs E] [--seed S] [--max-length L] [--loss pref|pref+reg]
    python -m torch.distributed.run --standalone --nproc-per-node N -m caper_train.scratch.train ...   (DDP, see
        "data parallelism" below: gloo on CPU, nccl on CUDA; --batch-size stays the global batch)

Loss (per batch):
  pairs (u+, u-) sharing a prefix, compared at their last <clause> marker, r± = raw model output:
    --pref-form weighted (default):  L_pref = mean_i (1 + delta_i) * -log sigmoid(r+_i - r-_i)
    --pref-form margin:              L_pref = mean_i -log sigmoid(r+_i - r-_i - delta_i)
  delta_i = the pair's annotated margin (clipped at 0), so pairs whose repair changes more weigh more.
  --loss pref+reg adds, over every marker k of every trajectory record,
    L_reg = mean_k BCEWithLogits(r_k, y_k),  y_k = clamp(1 + reward_k, 0, 1)
  (propagated clause reward 0 -> label 1 'fine', blamed clauses lower), and L = L_pref + lambda*L_reg
  with lambda = --reg-weight (default 0.5).
Terminal verdict (default; --no-terminal turns it off): every trajectory ends in `</s>`, whose output
judges the whole query. Its L_reg label is the record's `correct` (1 right, 0 wrong), and each wrong
trajectory of a question forms a pair with the right one (gold's) compared at the two `</s>`
positions in L_pref, with delta = 1: a mutant that deleted a WHERE / GROUP BY / set-operation arm
has no clause to carry its low reward, only the terminal can.
"""
from __future__ import annotations

import argparse
import sys
import time

import torch

from ..model.lora import merge_lora
from ..model.reward_model import PRESETS, use_attention
from .context import setup
from .distributed import log
from .loop import make_schedule, save_checkpoint, train_loop
from .model_spec import SpecError, build_model, model_spec
from .packing import ROW_TOKENS
from .train_data import load_data
from .train_export import export_model, final_metrics, write_manifest


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="training JSON Lines (docs/FORMATS.md)")
    ap.add_argument("--out", required=True, help="model directory to write (models/NAME)")
    ap.add_argument("--preset", default="default", choices=sorted(PRESETS))
    ap.add_argument("--base", help="local Hugging Face checkpoint directory to fine-tune instead of a preset")
    ap.add_argument("--init", help="continue training a CAPER model: a checkpoint directory (RewardModel.save) or a "
                    "shipped model directory (model.onnx, weights recovered by from_onnx.py); its tokenizer is kept")
    ap.add_argument("--steps", type=int, help="optimizer steps (overrides --epochs)")
    ap.add_argument("--epochs", type=float, default=1.0)
    ap.add_argument("--max-minutes", type=float, help="stop training after this wall time")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-length", type=int, help="prompt length limit (default: the preset's)")
    ap.add_argument("--loss", default="pref+reg", choices=["pref", "pref+reg"])
    ap.add_argument("--pref-form", default="weighted", choices=["weighted", "margin"])
    ap.add_argument("--reg-weight", type=float, default=0.5)
    ap.add_argument("--no-terminal", dest="terminal", action="store_false",
                    help="no terminal verdict: prompts end at the last marker (models before it)")
    ap.add_argument("--batch-size", type=int, help="records per step (default: the preset's, 16 with --base)")
    ap.add_argument("--lr", type=float, help="peak learning rate (default: the preset's, 2e-5 with --base)")
    ap.add_argument("--warmup", type=float, default=0.05, help="warm-up fraction of the steps")
    ap.add_argument("--val-frac", type=float, default=0.05, help="questions held out for metrics")
    ap.add_argument("--vocab-size", type=int, help="BPE vocabulary size (default: the preset's)")
    ap.add_argument("--tokenizer", help="reuse this tokenizer.json instead of training one")
    ap.add_argument("--threads", type=int, help="torch CPU threads")
    ap.add_argument("--lora", action="store_true", help="with --base: LoRA adapters (needs peft)")
    ap.add_argument("--checkpoint", help="where to keep the torch checkpoint (default: runs/<out name>)")
    ap.add_argument("--no-export", action="store_true")
    ap.add_argument("--dump-rewards", help="write Python rewards at the markers of a few prompts here (JSON)")
    ap.add_argument("--dump-count", type=int, default=8)
    ap.add_argument("--log-every", type=int, default=20)
    ap.add_argument("--curve", help="write the global loss of every step here (JSON Lines; rank 0 under torchrun)")
    ap.add_argument("--no-pack", dest="pack", action="store_false",
                    help="one row per sequence instead of prefix-tree rows (same rewards, ~3x the tokens)")
    ap.add_argument("--row-tokens", type=int, default=ROW_TOKENS, help="token cap of a packed row")
    ap.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"], help="attention kernel for training")
    return ap.parse_args(argv)



def main(argv=None) -> int:
    a = parse_args(argv)
    try:
        spec = model_spec(a, torch.cuda.is_available())
    except SpecError as e:
        print(f"caper_train.scratch.train: {e}", file=sys.stderr)
        return 2
    s = setup(a, spec)
    try:
        data = load_data(s)
        if data is None:
            return 2
        model, lr = build_model(spec, a, s.preset, data.tok, s.device, s.dist)
        sch = make_schedule(a, len(data.items), lr)
        run = train_loop(s, model, data.items, sch)
        if not s.dist.main:  # rank 0 evaluates, saves and exports; the others are done
            return 0
        model.eval()
        use_attention(model, "eager")
        metrics = final_metrics(s, model, data, run)
        merge_lora(model)
        save_checkpoint(s, model, data.tok)
        export_info = export_model(s, model, data)
        write_manifest(s, model, data, sch, run, metrics, export_info, argv)
        log(f"wrote {s.out} in {time.time() - s.t_start:.0f}s")
        return 0
    finally:
        if s.dist.world > 1:
            import torch.distributed as dist
            dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
