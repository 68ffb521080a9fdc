"""A served graph's 4-bit matrix products computed with int8 activations, beside the graph as it is.

A shipped graph stores its decoder's weights as com.microsoft MatMulNBits, whose `accuracy_level`
attribute tells onnxruntime's CPU kernels what to compute in: 0 (what ship writes) leaves the
activations in fp32; 4 quantizes each block of activations to int8 and multiplies in integers,
which CPUs with int8 dot-product instructions (AVX-512 VNNI, AVX-VNNI, Arm's dot product) run much
faster. The weights are the same either way, so this writes a second graph file identical to the
served one but for that attribute: same inputs and outputs (the past keys and values included),
reading the same external data files (the graph is loaded and saved without its weights, so
nothing is copied). Which of the two the service runs is its choice at load (`caper serve
--matmul`, src/core/matmul.ts); the graph as it was stays the one every evaluation scores with.

int8 activations round, so the outputs move a little; how much is measured here on prompts in the
model's own template, with the keys and values of a head read back as the service reads them, and
recorded with the file in the train step (caper.json `matmul_accuracy`).

    python -m caper_train.ship.int8 --model models/default [--level 4] [--threads 2]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

DOMAIN = "com.microsoft"
OP = "MatMulNBits"
# onnxruntime's MatMulNBits accuracy_level: the type activations are computed in (0: as given).
LEVELS = {1: "fp32", 2: "fp16", 3: "bf16", 4: "int8"}


def file_name(level: int) -> str:
    return "model.int8.onnx" if level == 4 else f"model.level{level}.onnx"


def set_accuracy_level(model, level: int) -> int:
    """In place: every MatMulNBits node computes at `level`. Returns how many nodes there are."""
    from onnx import helper

    if level not in LEVELS:
        raise ValueError(f"accuracy_level {level} is none of onnxruntime's {sorted(LEVELS)}")
    n = 0
    for node in model.graph.node:
        if node.op_type != OP or node.domain != DOMAIN:
            continue
        for a in list(node.attribute):
            if a.name == "accuracy_level":
                node.attribute.remove(a)
        node.attribute.append(helper.make_attribute("accuracy_level", level))
        n += 1
    return n


def _session(path: Path, threads: int):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.intra_op_num_threads = threads
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def agreement(original: Path, rewritten: Path, seqs: list[list[int]], head: int, threads: int = 2) -> dict:
    """How far the rewritten graph's rewards are from the original's: the sequences packed as one
    tree row (the service's row) with no past; and, for a graph that takes past keys and values,
    the first `head` tokens computed by each graph on its own, kept and read back for the rest, as
    the service's prefix cache does."""
    from ..model.export import ort_packed_rewards
    from .past_kv import dims, feeds_for

    s0, s1 = _session(original, threads), _session(rewritten, threads)
    ref, got = ort_packed_rewards(s0, [seqs])[0], ort_packed_rewards(s1, [seqs])[0]
    record = {"sequences": len(seqs), "packed_max_abs_diff": float(max(np.abs(a - b).max() for a, b in zip(ref, got)))}
    if any(i.name == "past_length" for i in s0.get_inputs()):
        layers, kv_heads, head_dim = dims(s0)
        names = [f"present_{k}.{i}" for i in range(layers) for k in ("key", "value")]

        def cached(s):
            first = seqs[0][:head]
            kept = s.run(["rewards"] + names, feeds_for([(first, list(range(head)), [head] * head)], None, [0], layers, kv_heads, head_dim, head))
            from ..model.export import pack_tree

            ids, pos, end, where = pack_tree([x[head:] for x in seqs])
            out = s.run(["rewards"], feeds_for([(ids, [p + head for p in pos], end)], kept[1:], [head], layers, kv_heads, head_dim, 0))[0][0]
            return [np.concatenate([kept[0][0], out[w]]) for w in where]

        a, b = cached(s0), cached(s1)
        record.update(head_tokens=head, cached_head_max_abs_diff=float(max(np.abs(x - y).max() for x, y in zip(a, b))))
    return record


def write(model_dir: Path, level: int = 4, threads: int = 2) -> dict:
    """Writes the graph at `level` beside model_dir's served graph and records it in the train step."""
    import onnx

    from ..model.manifest import read_manifest, read_step, write_step
    from .past_kv import sample_sequences

    man = read_manifest(model_dir)
    files = man.get("files") or {}
    if not isinstance(files.get("model"), str):
        raise ValueError(f"{model_dir}: caper.json names no graph (files.model)")
    name = file_name(level)
    taken = [k for k, v in files.items() if v == name or (isinstance(v, list) and name in v)]
    if taken:
        raise ValueError(f"{model_dir}: {name} is already files.{taken[0]} of caper.json; it would be overwritten")
    train = read_step(model_dir, "train")
    if not train:
        raise ValueError(f"{model_dir}: no recorded train step (steps/train.json)")
    graph_file = model_dir / files["model"]
    # Without its weights: they stay in the data files both graphs name.
    m = onnx.load(str(graph_file), load_external_data=False)
    nodes = set_accuracy_level(m, level)
    if nodes == 0:
        raise ValueError(f"{graph_file}: no {OP} nodes (only a weight-only quantized graph has an accuracy_level to set)")
    out = model_dir / name
    onnx.save_model(m, str(out))
    try:
        seqs, head = sample_sequences(model_dir, man["template"], int(man["max_length"]))
        record = agreement(graph_file, out, seqs, head, threads)
        worst = max(v for k, v in record.items() if k.endswith("_max_abs_diff"))
        if not np.isfinite(worst):
            raise RuntimeError(f"accuracy_level {level} gives non-finite outputs: {json.dumps(record)}")
    except Exception:
        out.unlink(missing_ok=True)
        raise
    record = {"file": name, "accuracy_level": level, "arithmetic": LEVELS[level], "nodes": nodes, **record}
    train["matmul_accuracy"] = record
    write_step(model_dir, "train", train)
    return record


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m caper_train.ship.int8", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a model directory whose graph has MatMulNBits nodes (caper_train.ship.ship)")
    ap.add_argument("--level", type=int, default=4, choices=sorted(LEVELS),
                    help="onnxruntime's accuracy_level: 4 = int8 activations (the file is model.int8.onnx)")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)
    record = write(Path(a.model), a.level, a.threads)
    print(json.dumps(record), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
