"""What this machine gives a pretrained base: the faster dtype and the cost of each training family.

Machines differ: where the CPU has bf16 instructions bf16 autocast is the faster, where it has
only AVX2 bf16 is emulated and fp32 is. `faster_dtype` times one forward pass of each on the model
a run is about to use, so every run takes the faster one for the machine it is on.

`python -m caper_train.base.throughput --base DIR --layers 6,12,24 --out bench/results/train-throughput.md`
writes the table the training configuration is chosen from: per layer count N and family,
tokens/s, s/step and peak RSS, on one packed row of --tokens tokens:
  probe     forward only, no gradients (the cost of caching features: once per record);
  top-k     the first N-k layers without gradients, the top k trained (fwd + bwd);
  lora      the adapters `--lora` trains (lora.LoraSpec) on all N layers (fwd + bwd through all of them).
"""
from __future__ import annotations

import argparse
import resource
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import torch

from ..model.lora import LoraSpec, with_lora
from ..model.paths import shown_path


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _time(fn, reps: int) -> float:
    fn()  # warm-up: allocator, kernels
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps


def autocast(dtype: torch.dtype):
    return torch.autocast("cpu", dtype=torch.bfloat16) if dtype == torch.bfloat16 else nullcontext()


def faster_dtype(model, tokens: int = 256, reps: int = 1) -> tuple[torch.dtype, dict[str, float]]:
    """Times a forward pass in fp32 and under bf16 autocast; returns the faster and both timings."""
    ids = torch.randint(0, model.config.vocab_size, (1, tokens))
    times = {}
    with torch.inference_mode():
        for name, dt in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
            with autocast(dt):
                times[name] = _time(lambda: model(input_ids=ids, use_cache=False), reps)
    best = min(times, key=times.get)
    return getattr(torch, best), times


def _forward(model, ids, dt):
    with autocast(dt):
        return model(input_ids=ids, use_cache=False).last_hidden_state


def family_step(family: str, model, ids, dt, k: int = 2):
    layers = model.layers
    n = len(layers)
    if family == "probe":
        with torch.inference_mode():
            _forward(model, ids, dt)
        return
    if family == "top-k":
        for i, layer in enumerate(layers):
            for p in layer.parameters():
                p.requires_grad_(i >= n - k)
    h = _forward(model, ids, dt)
    h.float().pow(2).mean().backward()
    model.zero_grad(set_to_none=True)


def main(argv=None) -> int:
    from .features import load_truncated

    ap = argparse.ArgumentParser(prog="python -m caper_train.base.throughput")
    ap.add_argument("--base", required=True)
    ap.add_argument("--layers", default="6,12,24")
    ap.add_argument("--families", default="probe,top-k,lora")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", help="markdown table to write")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    rows = []
    for n in [int(x) for x in a.layers.split(",")]:
        for fam in a.families.split(","):
            for dname in a.dtypes.split(","):
                dt = getattr(torch, dname)
                model = load_truncated(a.base, n, torch.float32)
                ids = torch.randint(0, model.config.vocab_size, (1, a.tokens))
                model.embed_tokens.weight.requires_grad_(False)
                if fam == "lora":
                    model = with_lora(model, LoraSpec()).base_model.model
                s = _time(lambda: family_step(fam, model, ids, dt), a.reps)
                rows.append((n, fam, dname, a.tokens / s, s, _peak_rss_mb()))
                print(f"N={n:2d} {fam:6s} {dname:8s} {a.tokens / s:7.0f} tok/s {s:7.2f} s/step "
                      f"peak RSS {_peak_rss_mb():6.0f} MB", file=sys.stderr, flush=True)
                del model
    if a.out:
        lines = ["# Training throughput of the pretrained base on this machine", "",
                 f"`python -m caper_train.base.throughput --base {shown_path(a.base)} --layers {a.layers} --tokens {a.tokens}` "
                 f"({a.threads} threads; one packed row of {a.tokens} tokens a step; peak RSS is the process's "
                 "high-water mark so far).", "",
                 "| layers N | family | dtype | tokens/s | s/step | peak RSS MB |", "|---|---|---|---|---|---|"]
        lines += [f"| {n} | {f} | {d} | {tps:.0f} | {s:.2f} | {rss:.0f} |" for n, f, d, tps, s, rss in rows]
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
