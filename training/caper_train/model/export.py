"""ONNX export of a RewardModel: output `rewards` float32 [batch, length]; fp32 model.onnx plus an
int8 dynamic-quantized model.int8.onnx, with a torch vs onnxruntime parity check.

Inputs (int64 [batch, length], both axes dynamic), interface "prefix-tree-v1" (caper.json `packing`):
  input_ids     token ids of a packed row: several sequences that share leading tokens are stored as
                a prefix tree laid out in depth-first order, so every shared token appears once;
  position_ids  each token's position in its own sequence (its depth in the tree);
  subtree_end   one past the row index of the last token that descends from this one.
Token i may attend to token j iff j <= i < subtree_end[j], i.e. iff j is i itself or one of its
ancestors; the graph builds the [batch, 1, L, L] additive mask from that. A plain right-padded batch
is the special case position_ids = 0..n-1, subtree_end = n (and j + 1 on pads). The tree is sent as
O(L) integers instead of an O(L^2) mask so a 2,000-token row costs 16 KB to feed, not 16 MB.
Models exported before this (inputs input_ids, attention_mask) keep working on the unpacked path.

The TorchScript exporter (dynamo=False) is used: it exports transformers' Qwen2 with dynamic batch
and length in well under a second, and its opset-17 graph runs on onnxruntime-node 1.30 CPU.
"""
from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import numpy as np
import torch

from ..data.prompt import PAD_ID
from .reward_model import RewardModel
from .paths import shown_command

OPSET = 17
INPUT_NAMES = ["input_ids", "position_ids", "subtree_end"]
LEGACY_INPUT_NAMES = ["input_ids", "attention_mask"]
PACKING = "prefix-tree-v1"
OUTPUT_NAME = "rewards"


class PackedRewardModel(torch.nn.Module):
    """The exported graph: builds the tree mask from subtree_end, then runs the RewardModel."""

    def __init__(self, model: RewardModel):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor, subtree_end: torch.Tensor) -> torch.Tensor:
        idx = torch.arange(input_ids.shape[1], device=input_ids.device)
        q = idx.view(1, -1, 1)
        k = idx.view(1, 1, -1)
        allow = (k <= q) & (q < subtree_end.unsqueeze(1))  # [B, query, key]
        dtype = self.model.backbone.get_input_embeddings().weight.dtype
        # finfo.min rather than -inf: a fully masked row (never produced here) would give NaN with -inf.
        neg = torch.tensor(torch.finfo(dtype).min, dtype=dtype)
        mask = torch.where(allow, torch.zeros((), dtype=dtype), neg).unsqueeze(1)
        return self.model(input_ids, mask, position_ids)


def tree_feeds(seqs: list[list[int]]) -> dict[str, np.ndarray]:
    """Unpacked sequences as packed-interface feeds: one row each, positions 0..n-1, causal ends."""
    L = max(len(s) for s in seqs)
    ids = np.full((len(seqs), L), PAD_ID, dtype=np.int64)
    pos = np.zeros((len(seqs), L), dtype=np.int64)
    end = np.tile(np.arange(1, L + 1, dtype=np.int64), (len(seqs), 1))  # pads: only themselves
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = s
        pos[i, : len(s)] = np.arange(len(s))
        end[i, : len(s)] = len(s)
    return {"input_ids": ids, "position_ids": pos, "subtree_end": end}


def pad_batch(seqs: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Right padding with <pad>: under causal attention real tokens never see the pads after them."""
    L = max(len(s) for s in seqs)
    ids = np.full((len(seqs), L), PAD_ID, dtype=np.int64)
    mask = np.zeros((len(seqs), L), dtype=np.int64)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = s
        mask[i, : len(s)] = 1
    return ids, mask


@torch.no_grad()
def torch_rewards(model: RewardModel, seqs: list[list[int]]) -> list[np.ndarray]:
    ids, mask = pad_batch(seqs)
    out = model(torch.from_numpy(ids), torch.from_numpy(mask)).cpu().numpy()
    return [out[i, : len(s)] for i, s in enumerate(seqs)]


@torch.no_grad()
def torch_tree_rewards(model: RewardModel, seqs: list[list[int]]) -> list[np.ndarray]:
    """torch_rewards through the module export traces (PackedRewardModel) on the feeds
    onnxruntime gets (tree_feeds), so the graph's mask is compared too."""
    feeds = tree_feeds(seqs)
    out = PackedRewardModel(model).eval()(*(torch.from_numpy(feeds[n]) for n in INPUT_NAMES)).cpu().numpy()
    return [out[i, : len(s)] for i, s in enumerate(seqs)]


def no_past(session, batch: int) -> dict[str, np.ndarray]:
    """Feeds that give a graph taking past keys and values (caper_train.ship.past_kv) none, so it
    computes what it computed before; nothing for a graph without them."""
    out: dict[str, np.ndarray] = {}
    for i in session.get_inputs():
        if i.name.startswith(("past_key.", "past_value.")):
            out[i.name] = np.zeros((batch, int(i.shape[1]), 0, int(i.shape[3])), np.float32)
        elif i.name == "past_length":
            out[i.name] = np.zeros(batch, np.int64)
        elif i.name == "keep_length":
            out[i.name] = np.zeros(1, np.int64)
    return out


def ort_rewards(session, seqs: list[list[int]]) -> list[np.ndarray]:
    """Per-sequence rewards from either interface (packed-capable or legacy attention_mask)."""
    names = {i.name for i in session.get_inputs()}
    if "subtree_end" in names:
        feeds = tree_feeds(seqs) | no_past(session, len(seqs))
    else:
        ids, mask = pad_batch(seqs)
        feeds = {"input_ids": ids, "attention_mask": mask}
    out = session.run([OUTPUT_NAME], feeds)[0].astype(np.float32)
    return [out[i, : len(s)] for i, s in enumerate(seqs)]


def max_diff(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    return float(max(np.abs(x - y).max() for x, y in zip(a, b)))


def pack_tree(seqs: list[list[int]]) -> tuple[list[int], list[int], list[int], list[list[int]]]:
    """Sequences -> one prefix-tree row (the Python mirror of src/scoring/packing.ts): token ids,
    position ids, subtree ends, and for each sequence the row index of each of its tokens."""
    children: list[dict[int, int]] = [{}]
    token, depth = [-1], [-1]
    paths: list[list[int]] = []
    for s in seqs:
        node, path = 0, []
        for t in s:
            nxt = children[node].get(t)
            if nxt is None:
                nxt = len(token)
                children.append({})
                token.append(t)
                depth.append(depth[node] + 1)
                children[node][t] = nxt
            node = nxt
            path.append(node)
        paths.append(path)
    row_of = [0] * len(token)
    ids, pos, end = [], [], []
    stack: list[tuple[int, bool]] = [(c, False) for c in reversed(list(children[0].values()))]
    while stack:
        node, done = stack.pop()
        if done:
            end[row_of[node]] = len(ids)
            continue
        row_of[node] = len(ids)
        ids.append(token[node])
        pos.append(depth[node])
        end.append(0)
        stack.append((node, True))
        stack.extend((c, False) for c in reversed(list(children[node].values())))
    return ids, pos, end, [[row_of[n] for n in p] for p in paths]


def ort_packed_rewards(session, groups: list[list[list[int]]]) -> list[list[np.ndarray]]:
    """Each group of sequences packed into one row; rewards read back per sequence."""
    rows = [pack_tree(g) for g in groups]
    L = max(len(r[0]) for r in rows)
    ids = np.full((len(rows), L), PAD_ID, dtype=np.int64)
    pos = np.zeros((len(rows), L), dtype=np.int64)
    end = np.tile(np.arange(1, L + 1, dtype=np.int64), (len(rows), 1))
    for i, (t, p, e, _) in enumerate(rows):
        ids[i, : len(t)], pos[i, : len(t)], end[i, : len(t)] = t, p, e
    feeds = {"input_ids": ids, "position_ids": pos, "subtree_end": end} | no_past(session, len(rows))
    out = session.run([OUTPUT_NAME], feeds)[0].astype(np.float32)
    return [[out[i, idx] for idx in r[3]] for i, r in enumerate(rows)]


def parity_batches(samples: list[list[int]]) -> list[list[list[int]]]:
    """Batches of several shapes (single, padded, different lengths) so a shape frozen at trace
    time would show up as a mismatch."""
    s = [x for x in samples if x] or [[1, 7, 8, 9, 4]]
    return [s[:1], s[: min(len(s), 4)], s[: min(len(s), 8)][::-1], [x[: max(1, len(x) // 2)] for x in s[:3]]]


def packed_parity_groups(samples: list[list[int]]) -> list[list[list[int]]]:
    """Groups with shared heads: each sample with copies whose tails are cut or changed, so the
    row holds a real tree (shared prefix, branches of different lengths, a duplicate)."""
    s = [x for x in samples if x] or [[1, 7, 8, 9, 4]]
    groups = []
    for x in s[:3]:
        h = max(1, len(x) * 2 // 3)
        groups.append([x, x[:h] + [t + 1 for t in x[h:]], x[: max(1, len(x) - 2)], x])
    return groups


WEIGHTS_LIMIT = 2 * 1024**3  # protobuf's 2 GB cap on one .onnx file


def export(model: RewardModel, out_dir: str | Path, samples: list[list[int]], tol: float = 1e-4, *,
           fp16: bool | None = None, external_data: bool | None = None, int4: bool = False) -> dict:
    """fp16=None: fp16 weights when the checkpoint is bf16/fp16 or its fp32 weights would pass
    2 GB (bf16 becomes fp16: onnxruntime's CPU and CUDA kernels cover fp16, not bf16).
    external_data=None: weights in model.onnx.data beside the graph when they pass 2 GB.
    The int8 file is weight-only quantized (MatMulNBits, 8 bits) for fp16 models and dynamic
    (weights and activations) for fp32 ones; int4=True adds model.int4.onnx (MatMulNBits, 4 bits)."""
    import onnx
    import onnxruntime as ort

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    src_dtype = next(model.parameters()).dtype
    n_bytes32 = sum(p.numel() for p in model.parameters()) * 4
    if fp16 is None:
        fp16 = src_dtype in (torch.bfloat16, torch.float16) or n_bytes32 > WEIGHTS_LIMIT
    if external_data is None:
        external_data = n_bytes32 // (2 if fp16 else 1) > WEIGHTS_LIMIT
    # In place (no second copy of a multi-GB model): with fp16 the torch reference below holds the
    # same fp16-rounded weights, so parity checks the graph; bf16 -> fp16 is exact in fp16's range.
    ref_model = model.float().eval()
    fp32, int8, int4f = out / "model.onnx", out / "model.int8.onnx", out / "model.int4.onnx"
    for f in (fp32, int8, int4f, out / "model.onnx.data", out / "model.int8.onnx.data", out / "model.int4.onnx.data"):
        f.unlink(missing_ok=True)
    ex = tree_feeds(parity_batches(samples)[1])
    if fp16:
        # The head stays fp32 (RewardModel.forward casts into it): reward differences are small
        # and the output then leaves the graph as float32 without an fp16 rounding.
        model.half()
        model.head.float()
        bad = [n for n, p in model.named_parameters() if not torch.isfinite(p).all()]
        if bad:
            raise ValueError(f"weights out of fp16 range (|w| > 65504) in {bad[:3]}: export with --no-fp16")
    graph_model = PackedRewardModel(model).eval()
    tmp = out / ".export"
    tmp.mkdir(exist_ok=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # Large models: the exporter spills tensors as separate files into the target's folder;
            # they are gathered into one model.onnx.data below.
            torch.onnx.export(
                graph_model, tuple(torch.from_numpy(ex[n]) for n in INPUT_NAMES), str(tmp / "model.onnx"),
                input_names=INPUT_NAMES, output_names=[OUTPUT_NAME], opset_version=OPSET, dynamo=False,
                dynamic_axes={n: {0: "batch", 1: "length"} for n in INPUT_NAMES + [OUTPUT_NAME]},
            )
        m = onnx.load(str(tmp / "model.onnx"), load_external_data=True)
        if external_data:
            onnx.save_model(m, str(fp32), save_as_external_data=True, all_tensors_to_one_file=True,
                            location="model.onnx.data", size_threshold=1024)
        else:
            onnx.save_model(m, str(fp32))
    finally:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
        if fp16:
            model.float()
    del m
    onnx.checker.check_model(str(fp32))  # by path: works past 2 GB
    import logging
    logging.getLogger().setLevel(logging.ERROR)  # silences the "consider pre-processing" hint
    logging.getLogger("onnxruntime.quantization").setLevel(logging.ERROR)
    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.ERROR)
    quant = quantize(fp32, int8, 8 if fp16 else "dynamic", external_data)
    if int4:
        quant4 = quantize(fp32, int4f, 4, external_data)

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    s32 = ort.InferenceSession(str(fp32), opts, providers=["CPUExecutionProvider"])
    s8 = ort.InferenceSession(str(int8), opts, providers=["CPUExecutionProvider"])
    d32 = d8 = dpack = 0.0
    for batch in parity_batches(samples):
        ref = torch_rewards(ref_model, batch)
        d32 = max(d32, max_diff(ref, ort_rewards(s32, batch)))
        d8 = max(d8, max_diff(ref, ort_rewards(s8, batch)))
    groups = packed_parity_groups(samples)
    for g, got in zip(groups, ort_packed_rewards(s32, groups)):
        dpack = max(dpack, max_diff(ort_rewards(s32, g), got))
    # fp16 weights round every product: the tolerance against fp32 torch scales with the output.
    tol32 = tol if not fp16 else max(tol, 2e-2)
    if d32 > tol32:
        raise RuntimeError(f"ONNX parity failed: max |torch - onnxruntime| = {d32:.3g} > {tol32}")
    if dpack > tol:
        raise RuntimeError(f"packed-row parity failed: max |packed - unpacked| = {dpack:.3g} > {tol}")
    info = {"opset": OPSET, "ir_version": s32_ir(fp32), "weights": "fp16" if fp16 else "fp32",
            "source_dtype": str(src_dtype).replace("torch.", ""), "external_data": bool(external_data),
            "fp32_max_abs_diff": d32, "packed_max_abs_diff": dpack, "int8_max_abs_diff": d8, "int8_method": quant,
            "fp32_bytes": file_bytes(fp32), "int8_bytes": file_bytes(int8),
            "input_names": INPUT_NAMES, "packing": PACKING}
    if int4:
        s4 = ort.InferenceSession(str(int4f), opts, providers=["CPUExecutionProvider"])
        info.update({"int4_method": quant4, "int4_bytes": file_bytes(int4f),
                     "int4_max_abs_diff": max(max_diff(torch_rewards(ref_model, b), ort_rewards(s4, b))
                                              for b in parity_batches(samples))})
    return info


def s32_ir(path: Path) -> int:
    import onnx
    return onnx.load(str(path), load_external_data=False).ir_version


def file_bytes(path: Path) -> int:
    """Graph plus its external data file, if any."""
    data = path.with_name(path.name + ".data")
    return path.stat().st_size + (data.stat().st_size if data.exists() else 0)


def quantize(src: Path, dst: Path, bits, external_data: bool) -> str:
    """bits="dynamic": int8 weights and activations (MatMulInteger), the fp32 default. 8 or 4:
    weight-only MatMulNBits (activations stay fp16/fp32), which onnxruntime runs on CPU for fp16
    graphs too."""
    import onnx
    if bits == "dynamic":
        from onnxruntime.quantization import QuantType, quantize_dynamic
        quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, use_external_data_format=external_data)
        return "dynamic int8 (MatMulInteger)"
    from onnxruntime.quantization.onnx_model import ONNXModel
    m = matmul_nbits(onnx.load(str(src), load_external_data=True), bits, 32, symmetric=True)
    if external_data:
        ONNXModel(m).save_model_to_file(str(dst), use_external_data_format=True)
    else:
        onnx.save_model(m, str(dst))
    return f"weight-only int{bits} (MatMulNBits, block 32)"


def matmul_nbits(model, bits: int, block: int, symmetric: bool):
    """Every MatMul with a constant weight as MatMulNBits (weights in `bits` bits, a scale per block
    of `block` values; activations keep their dtype). Returns the rewritten ModelProto."""
    import logging

    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer
    logging.getLogger("onnxruntime.quantization").setLevel(logging.ERROR)
    cfg = DefaultWeightOnlyQuantConfig(block_size=block, is_symmetric=symmetric, bits=bits, op_types_to_quantize=("MatMul",))
    q = MatMulNBitsQuantizer(model, algo_config=cfg)
    q.process()
    return q.model.model


def manifest_inputs(info: dict | None) -> dict:
    """caper.json fields that tell the server which interface the graph has."""
    if not info or "packing" not in info:
        return {"input_names": LEGACY_INPUT_NAMES}
    return {"input_names": info["input_names"], "packing": info["packing"]}


def update_manifest(out: Path, info: dict) -> None:
    """A re-export into a model directory keeps caper.json in step with the new graph (the same
    weights, so the other steps' outputs stay)."""
    from .manifest import read_manifest, read_step, section_writers, write_step
    if not (out / "caper.json").exists():
        return
    m = read_step(out, "train") or {k: v for k, v in read_manifest(out).items() if section_writers().get(k) == "train"}
    m.update(manifest_inputs(info))
    m["export"] = info
    files = m.setdefault("files", {})
    files["model"], files["model_int8"] = "model.onnx", "model.int8.onnx"
    if "int4_bytes" in info:
        files["model_int4"] = "model.int4.onnx"
    else:
        files.pop("model_int4", None)
    write_step(out, "train", m)


def load_from_onnx(model_dir: str | Path) -> RewardModel:
    """Rebuilds the torch RewardModel of a preset model directory from its exported fp32 graph, so
    models whose checkpoint is gone can be re-exported with the packed interface (place_weights).
    The result is checked against the original graph by the caller (main)."""
    import onnx
    from .reward_model import build_from_preset
    from .manifest import read_manifest
    d = Path(model_dir)
    man = read_manifest(d)
    preset = (man.get("training") or {}).get("preset")
    if not preset:
        raise ValueError(f"{d}/caper.json names no preset: only preset models can be rebuilt from ONNX")
    g = onnx.load(str(d / man["files"]["model"])).graph
    return place_weights(build_from_preset(preset, int(man["vocab_size"]), seed=0), g, d)


# Nodes that caper_train.ship.side_probe adds to a served graph: a probe beside the traced module,
# whose matrix product is no linear layer of it, so reading a graph back into the module skips them.
SIDE_PROBE_PREFIX = "/side_probe/"

LINEAR_ORDER = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]


def graph_weights(g) -> tuple[dict[str, np.ndarray], list[tuple[str, np.ndarray]]]:
    """The weights a graph computes with: every initializer by name, a shipped embedding lookup's
    table dequantized under the table's name (caper_train.model.grid), and the constant right operands
    of its matrix products (MatMul, or MatMulNBits dequantized) as [K, N] in node order, a side
    probe's left out."""
    from onnx import numpy_helper

    from .grid import embedding_values, nbits_weight

    arrays = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    named = dict(arrays)
    for name in [n[: -len(".q4.codes")] for n in arrays if n.endswith(".q4.codes")]:
        named[name] = embedding_values(arrays, name)
    mats = [(n.input[1], arrays[n.input[1]] if n.op_type == "MatMul" else nbits_weight(n, arrays)) for n in g.node
            if n.op_type in ("MatMul", "MatMulNBits") and n.input[1] in arrays and not n.name.startswith(SIDE_PROBE_PREFIX)]
    return named, mats


def place_weights(model: RewardModel, g, where) -> RewardModel:
    """Fills `model` with the weights of its exported graph `g` (fp32 or shipped). Named
    initializers (embeddings, norms, biases; under a 'model.' prefix in prefix-tree exports) map
    by name; the exporter stores each Linear weight transposed under a generated name, in forward
    order (q, k, v, o, gate, up, down per layer, then the head). A count or shape that does not fit
    raises. The exporter also shares one initializer among parameters of equal values (Qwen2's
    initial zero biases and unit norms), which then have none of their own: those raise too."""
    named, mats = graph_weights(g)
    strip = lambda n: n[len("model."):] if n.startswith("model.") else n  # noqa: E731
    sd = model.state_dict()
    loaded = set()
    for name, arr in named.items():
        k = strip(name)
        if k not in sd:
            continue
        if tuple(arr.shape) != tuple(sd[k].shape):
            raise ValueError(f"{where}: {name} has shape {tuple(arr.shape)}, {k} needs {tuple(sd[k].shape)}")
        sd[k] = torch.from_numpy(arr.copy()).to(sd[k].dtype)
        loaded.add(k)
    layers = model.backbone.config.num_hidden_layers
    targets = [f"backbone.layers.{i}.{o}.weight" for i in range(layers) for o in LINEAR_ORDER] + ["head.weight"]
    mats = [(n, w) for n, w in mats if strip(n) not in sd]
    if len(mats) != len(targets):
        raise ValueError(f"{where}: {len(mats)} weight matrix products in the graph, the model has {len(targets)} "
                         "linear layers")
    for t, (name, w) in zip(targets, mats):
        if tuple(w.shape[::-1]) != tuple(sd[t].shape):
            raise ValueError(f"{where}: {name} has shape {tuple(w.shape[::-1])} as a Linear weight, "
                             f"{t} needs {tuple(sd[t].shape)}")
        sd[t] = torch.from_numpy(w.T.copy()).to(sd[t].dtype)
        loaded.add(t)
    missing = [k for k in sd if k not in loaded and not k.endswith("rotary_emb.inv_freq")]
    if missing:
        raise ValueError(f"{where}: no weights in the graph for {missing[:5]} (parameters of equal values share "
                         "one initializer, named after one of them)")
    model.load_state_dict(sd)
    return model.eval()


def random_model(spec: str, vocab_size: int, seed: int, dtype: torch.dtype) -> tuple[RewardModel, str]:
    """A random-initialized RewardModel from a preset name or a JSON object of Qwen2 sizes
    (hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, num_key_value_heads, and
    optionally vocab_size >= the tokenizer's, to match a real checkpoint's embedding table): for tests
    and benchmarks of export and serving at sizes nothing has been trained at."""
    from transformers import Qwen2Model
    from .reward_model import PRESETS, qwen2_config
    if spec in PRESETS:
        sizes, name = PRESETS[spec], spec
    else:
        sizes = {"max_length": 512, **json.loads(spec)}
        name = f"random-h{sizes['hidden_size']}-l{sizes['num_hidden_layers']}"
        if int(sizes.get("vocab_size", 0)) > vocab_size:
            vocab_size = int(sizes["vocab_size"])
    cfg = qwen2_config(sizes, vocab_size)
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    # Built directly in the target dtype: a 0.5B model in fp32 first would need twice the memory.
    prev = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        backbone = Qwen2Model(cfg)
        model = RewardModel(backbone, cfg.hidden_size)
    finally:
        torch.set_default_dtype(prev)
    return model.eval(), name


def write_manifest(out: Path, name: str, model: RewardModel, tokenizer_path: str, max_length: int, info: dict,
                   origin: dict) -> None:
    import shutil
    from ..data.prompt import MARKER, PAD_ID, SPECIAL_TOKENS, TEMPLATE
    from ..data.tok import CaperTokenizer
    tok = CaperTokenizer.load(tokenizer_path)
    if Path(tokenizer_path).resolve() != (out / "tokenizer.json").resolve():
        shutil.copyfile(tokenizer_path, out / "tokenizer.json")
    files = {"model": "model.onnx", "model_int8": "model.int8.onnx", "tokenizer": "tokenizer.json"}
    if "int4_bytes" in info:
        files["model_int4"] = "model.int4.onnx"
    m = {"name": name, "template": TEMPLATE, "marker": MARKER, "marker_id": tok.special_id(MARKER),
         "special_ids": {t: tok.special_id(t) for t in SPECIAL_TOKENS}, "pad_id": PAD_ID, "max_length": max_length,
         "output_name": OUTPUT_NAME, **manifest_inputs(info), "parameters": model.parameter_count(),
         "vocab_size": tok.vocab_size, "data_hash": "none", "metrics": {}, "files": files,
         "training": origin, "export": info}
    from .manifest import write_step
    write_step(out, "train", m, fresh=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Re-export a saved CAPER checkpoint to ONNX (packed prefix-tree interface)")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", help="directory written by RewardModel.save")
    src.add_argument("--random", metavar="PRESET|JSON",
                     help="random-initialized model (a preset name or JSON of Qwen2 sizes), written with a caper.json; "
                          "for tests and benchmarks of the export and serving path")
    src.add_argument("--from-onnx", help="preset model directory exported before prefix-tree packing: rebuild "
                     "the torch model from its graph (checked against it) and re-export")
    ap.add_argument("--out", required=True, help="model directory (its caper.json, if any, is updated)")
    ap.add_argument("--fp16", action=argparse.BooleanOptionalAction, default=None,
                    help="fp16 weights (default: when the checkpoint is bf16/fp16 or over 2 GB in fp32)")
    ap.add_argument("--external-data", action=argparse.BooleanOptionalAction, default=None,
                    help="weights in model.onnx.data (default: when they pass 2 GB)")
    ap.add_argument("--int4", action="store_true", help="also write model.int4.onnx (weight-only MatMulNBits)")
    ap.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default=None,
                    help="dtype to load the checkpoint in (default: float32)")
    ap.add_argument("--tokenizer", help="tokenizer.json for --random (its vocabulary sizes the embeddings)")
    ap.add_argument("--max-length", type=int, default=512, help="caper.json max_length for --random")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    dtype = getattr(torch, a.dtype) if a.dtype else torch.float32
    samples = [[1, 10, 11, 12, 5, 13, 6, 14, 15, 4, 16, 4], [1, 10, 11, 5, 13, 6, 17, 4]]
    if a.from_onnx:
        import onnxruntime as ort
        model = load_from_onnx(a.from_onnx)
        old = ort.InferenceSession(str(Path(a.from_onnx) / "model.onnx"), providers=["CPUExecutionProvider"])
        seqs = [s + [7 + i % 50 for i in range(60)] for s in samples] + samples
        diff = max_diff(torch_rewards(model, seqs), ort_rewards(old, seqs))
        del old
        if diff > 1e-4:
            print(f"rebuilt model differs from {a.from_onnx}/model.onnx by {diff:.3g}", file=sys.stderr)
            return 1
    elif a.random:
        if not a.tokenizer:
            ap.error("--random needs --tokenizer")
        from ..data.tok import CaperTokenizer
        model, name = random_model(a.random, CaperTokenizer.load(a.tokenizer).vocab_size, a.seed, dtype)
    else:
        model = RewardModel.load(a.checkpoint, dtype=dtype)
    info = export(model, a.out, samples, fp16=a.fp16, external_data=a.external_data, int4=a.int4)
    if a.from_onnx:
        info["rebuilt_from_onnx_max_abs_diff"] = diff
    if a.random:
        write_manifest(Path(a.out), name, model, a.tokenizer, a.max_length, info,
                       {"preset": a.random if a.random in __import__("caper_train.model.reward_model", fromlist=["PRESETS"]).PRESETS else None,
                        "random_init": True, "seed": a.seed, "dtype": a.dtype or "float32",
                        "command": shown_command("caper_train.model.export", sys.argv[1:] if argv is None else argv)})
    else:
        update_manifest(Path(a.out), info)
    print(json.dumps(info, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
