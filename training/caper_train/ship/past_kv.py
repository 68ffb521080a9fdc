"""Past keys and values for a served Clause-PRM graph, so the service computes a prompt's head once.

Every request on one database starts with the same tokens (the chat header and the schema), and a
causal model's keys and values at those positions depend on nothing after them. The graph is
rewritten (no retraining, the weights untouched: a shipped graph keeps referencing its data files)
to take the keys and values of such a head as inputs and to hand them back for the next request:

  inputs   input_ids, position_ids, subtree_end  the packed row of the tokens after the head, as
                                                 before (prefix-tree-v1); positions count from the
                                                 head's end
           past_key.{i}, past_value.{i}          float32 [batch, kv_heads, past, head_dim] per layer,
                                                 after the rotary embedding (the head's keys as the
                                                 layer computed them at its positions)
           past_length                           int64 [batch]: how many of the `past` columns row b
                                                 reads (rows of a batch may carry heads of different
                                                 lengths, padded to the longest)
           keep_length                           int64 [1]: how many leading positions present_* keep
  outputs  rewards                               as before, for the row's tokens
           present_key.{i}, present_value.{i}    [batch, kv_heads, keep_length, head_dim]: the first
                                                 keep_length positions of past followed by the row

Every token of a row reads every past column it is given (the head is an ancestor of every token in
the tree), and a row's own tokens among themselves as before. With past 0 and keep_length 0 the
graph computes what the original computes; parity() measures both that and a head read from
present_* against the whole prompt computed at once.

The rewrite finds each layer's attention by its structure (softmax over scores plus the tree mask;
keys and values repeated for the query heads by Unsqueeze, Expand, Reshape), which is how the
TorchScript export of transformers' Qwen2 (caper_train.model.export) lays it out; a graph where it
does not find that raises instead of guessing.

    python -m caper_train.ship.past_kv --model models/default [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np

INTERFACE = "past-kv-v1"
PREFIX = "/past_kv/"


def _producers(g) -> dict:
    return {o: n for n in g.node for o in n.output}


def _consumers(g) -> dict:
    out: dict[str, list] = {}
    for n in g.node:
        for x in n.input:
            out.setdefault(x, []).append(n)
    return out


def _repeated_source(prod: dict, name: str, allow_transpose: bool) -> str:
    """The keys or values before the grouped-query repeat: walks back through an optional
    Transpose (keys enter the product transposed), then Reshape <- Expand <- Unsqueeze."""
    n = prod.get(name)
    if allow_transpose and n is not None and n.op_type == "Transpose":
        n = prod.get(n.input[0])
    for op in ("Reshape", "Expand", "Unsqueeze"):
        if n is None or n.op_type != op:
            raise ValueError(f"attention input {name}: expected {op} in the key/value repeat, found "
                             f"{n.op_type if n is not None else 'a graph input'}")
        if op == "Unsqueeze":
            return n.input[0]
        n = prod.get(n.input[0])
    raise AssertionError("unreachable")


def attention_sites(g) -> tuple[list[tuple[str, str]], str]:
    """Per layer (graph order) the keys and values tensors [batch, kv_heads, length, head_dim], and
    the additive mask [batch, 1, length, length] every layer's scores receive."""
    prod, cons = _producers(g), _consumers(g)
    sites, masks = [], set()
    for s in (n for n in g.node if n.op_type == "Softmax"):
        add = prod.get(s.input[0])
        if add is None or add.op_type != "Add":
            raise ValueError(f"{s.name}: softmax input is not scores plus a mask")
        scaled = prod.get(add.input[0])
        qk = prod.get(scaled.input[0]) if scaled is not None and scaled.op_type == "Mul" else scaled
        if qk is None or qk.op_type != "MatMul":
            raise ValueError(f"{s.name}: no query-key product before the softmax")
        masks.add(add.input[1])
        key = _repeated_source(prod, qk.input[1], allow_transpose=True)
        # The product with the values reads the softmax output, possibly through casts.
        t, seen = s.output[0], 0
        while True:
            nxt = [c for c in cons.get(t, []) if c.op_type in ("Cast", "MatMul")]
            if len(nxt) != 1 or seen > 4:
                raise ValueError(f"{s.name}: no single product of the attention weights with the values")
            if nxt[0].op_type == "MatMul":
                value = _repeated_source(prod, nxt[0].input[1], allow_transpose=False)
                break
            t, seen = nxt[0].output[0], seen + 1
        sites.append((key, value))
    if not sites:
        raise ValueError("no attention (Softmax) in the graph")
    if len(masks) != 1:
        raise ValueError(f"the layers add {len(masks)} different masks to their scores, expected one")
    return sites, masks.pop()


def add_past(model, kv_heads: int, head_dim: int) -> int:
    """In place: the graph takes and returns past keys and values (module docstring), of
    kv_heads x head_dim per position (kv_dims). Returns the number of layers."""
    from onnx import TensorProto, helper, numpy_helper

    g = model.graph
    if any(i.name == "past_length" for i in g.input):
        raise ValueError("the graph already takes past keys and values")
    names = {i.name for i in g.input}
    if not {"input_ids", "position_ids", "subtree_end"} <= names:
        raise ValueError(f"the graph has no prefix-tree-v1 inputs (inputs: {sorted(names)})")
    sites, mask = attention_sites(g)
    prod = _producers(g)
    p = lambda s: PREFIX + s  # noqa: E731

    # The value a masked score gets: the export's own, so a padded past column is masked exactly as
    # a token outside the tree.
    where = prod[prod[mask].input[0]] if prod[mask].op_type == "Unsqueeze" else prod[mask]
    if where.op_type != "Where":
        raise ValueError(f"mask {mask} is not built by Where(allowed, 0, min)")
    neg_name = where.input[2]

    inits = [
        numpy_helper.from_array(np.array([0], np.int64), p("i0")),
        numpy_helper.from_array(np.array([1], np.int64), p("i1")),
        numpy_helper.from_array(np.array([2], np.int64), p("i2")),
        numpy_helper.from_array(np.array(0, np.int64), p("zero")),
        numpy_helper.from_array(np.array(1, np.int64), p("one")),
        numpy_helper.from_array(np.array(0.0, np.float32), p("fzero")),
        numpy_helper.from_array(np.array([-1, 1, 1, 1], np.int64), p("col_shape")),
        numpy_helper.from_array(np.array([1, 1, 1, -1], np.int64), p("row_shape")),
    ]
    g.initializer.extend(inits)
    nodes = []
    mk = lambda op, ins, outs, **kw: nodes.append(helper.make_node(op, ins, outs, name=p(outs[0]), **kw))  # noqa: E731

    # [batch, 1, length, past]: 0 where column j < past_length[b], the export's minimum elsewhere.
    mk("Shape", ["input_ids"], [p("ids_shape")])
    mk("Shape", ["past_key.0"], [p("past_shape")])
    mk("Gather", [p("ids_shape"), p("i0")], [p("batch")], axis=0)
    mk("Gather", [p("ids_shape"), p("i1")], [p("length")], axis=0)
    mk("Gather", [p("past_shape"), p("i2")], [p("past")], axis=0)
    mk("Squeeze", [p("past"), p("i0")], [p("past_scalar")])
    mk("Range", [p("zero"), p("past_scalar"), p("one")], [p("cols")])
    mk("Reshape", [p("cols"), p("row_shape")], [p("cols4")])
    mk("Reshape", ["past_length", p("col_shape")], [p("limit4")])
    mk("Less", [p("cols4"), p("limit4")], [p("readable")])
    mk("Where", [p("readable"), p("fzero"), neg_name], [p("past_mask1")])
    mk("Concat", [p("batch"), p("i1"), p("length"), p("past")], [p("past_mask_shape")], axis=0)
    mk("Expand", [p("past_mask1"), p("past_mask_shape")], [p("past_mask")])
    mk("Concat", [p("past_mask"), mask], [p("mask")], axis=-1)
    mk("Reshape", ["keep_length", p("i1")], [p("keep")])

    new_inputs = [
        helper.make_tensor_value_info("past_length", TensorProto.INT64, ["batch"]),
        helper.make_tensor_value_info("keep_length", TensorProto.INT64, [1]),
    ]
    new_outputs = []
    renames: dict[str, str] = {mask: p("mask")}
    for i, (k, v) in enumerate(sites):
        for kind, src in (("key", k), ("value", v)):
            past, full, present = f"past_{kind}.{i}", p(f"{kind}.{i}"), f"present_{kind}.{i}"
            new_inputs.append(helper.make_tensor_value_info(past, TensorProto.FLOAT, ["batch", kv_heads, "past", head_dim]))
            mk("Concat", [past, src], [full], axis=2)
            mk("Slice", [full, p("i0"), p("keep"), p("i2")], [present])
            new_outputs.append(helper.make_tensor_value_info(present, TensorProto.FLOAT, ["batch", kv_heads, "keep", head_dim]))
            renames[src] = full
    # Every reader of a layer's keys, values or mask reads the extended tensor instead (the shape
    # reads of the grouped-query repeat included, so they see past + length); the new nodes read
    # the originals.
    for n in g.node:
        for j, x in enumerate(n.input):
            if x in renames:
                n.input[j] = renames[x]
    g.node.extend(nodes)
    toposort(g, {i.name for i in new_inputs})
    g.input.extend(new_inputs)
    g.output.extend(new_outputs)
    return len(sites)


def toposort(g, extra_inputs: set[str]) -> None:
    """In place: the graph's nodes in an order where each comes after what it reads (repeated
    passes over the present order: the rewrite leaves few nodes out of place)."""
    known = {i.name for i in g.input} | {t.name for t in g.initializer} | extra_inputs | {""}
    pending = list(g.node)
    done: list = []
    while pending:
        rest = []
        for n in pending:
            if all(x in known for x in n.input):
                done.append(n)
                known.update(n.output)
            else:
                rest.append(n)
        if len(rest) == len(pending):
            raise ValueError(f"the rewritten graph has a cycle or an unknown input at {rest[0].name}")
        pending = rest
    del g.node[:]
    g.node.extend(done)


def feeds_for(rows: list[tuple[list[int], list[int], list[int]]], past: list[np.ndarray] | None, past_len: list[int],
              layers: int, kv_heads: int, head_dim: int, keep: int) -> dict[str, np.ndarray]:
    """Feeds of the rewritten graph: rows (ids, positions, subtree ends) padded as the service
    pads them, past keys/values (2 * layers arrays [batch, kv_heads, P, head_dim], or none)."""
    L = max(len(r[0]) for r in rows)
    B = len(rows)
    ids = np.zeros((B, L), np.int64)
    pos = np.zeros((B, L), np.int64)
    end = np.tile(np.arange(1, L + 1, dtype=np.int64), (B, 1))
    for b, (t, ps, e) in enumerate(rows):
        ids[b, : len(t)], pos[b, : len(t)], end[b, : len(t)] = t, ps, e
    f = {"input_ids": ids, "position_ids": pos, "subtree_end": end,
         "past_length": np.array(past_len, np.int64), "keep_length": np.array([keep], np.int64)}
    for i in range(layers):
        for j, kind in enumerate(("key", "value")):
            f[f"past_{kind}.{i}"] = past[2 * i + j] if past is not None else np.zeros((B, kv_heads, 0, head_dim), np.float32)
    return f


def dims(session) -> tuple[int, int, int]:
    """(layers, kv_heads, head_dim) of a rewritten graph, from its declared inputs."""
    layers = sum(1 for o in session.get_outputs() if o.name.startswith("present_key."))
    shape = next(i.shape for i in session.get_inputs() if i.name == "past_key.0")
    return layers, int(shape[1]), int(shape[3])


def parity(original: Path, rewritten: Path, seqs: list[list[int]], head: int, threads: int = 2) -> dict:
    """How far the rewritten graph is from the original: with no past, on each sequence and on the
    sequences packed as one tree (the service's row); and with the first `head` tokens' keys and
    values read from present_* and fed back, against the whole sequences at once."""
    import onnxruntime as ort

    from ..model.export import ort_packed_rewards, ort_rewards, pack_tree

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.intra_op_num_threads = threads
    s0 = ort.InferenceSession(str(original), opts, providers=["CPUExecutionProvider"])
    s1 = ort.InferenceSession(str(rewritten), opts, providers=["CPUExecutionProvider"])
    layers, kv_heads, head_dim = dims(s1)
    fetch = ["rewards"]

    def plain(seq):
        n = len(seq)
        return (seq, list(range(n)), [n] * n)

    ref = ort_rewards(s0, seqs)
    no_past = max(float(np.abs(s1.run(fetch, feeds_for([plain(s)], None, [0], layers, kv_heads, head_dim, 0))[0][0, : len(s)] - r).max())
                  for s, r in zip(seqs, ref))
    ids, pos, end, where = pack_tree(seqs)
    packed = s1.run(fetch, feeds_for([(ids, pos, end)], None, [0], layers, kv_heads, head_dim, 0))[0][0]
    ref_packed = ort_packed_rewards(s0, [seqs])[0]
    tree = max(float(np.abs(packed[w] - r).max()) for w, r in zip(where, ref_packed))

    # The head once (its own run, present_* kept), then the rest of every sequence as one tree row
    # reading it, at positions after it; compared with the original's whole sequences.
    if any(s[:head] != seqs[0][:head] for s in seqs) or any(len(s) <= head for s in seqs):
        raise ValueError("parity sequences must share their first `head` tokens and go on after them")
    names = [f"present_{k}.{i}" for i in range(layers) for k in ("key", "value")]
    got = s1.run(["rewards"] + names, feeds_for([plain(seqs[0][:head])], None, [0], layers, kv_heads, head_dim, head))
    past = got[1:]
    tails = [s[head:] for s in seqs]
    tids, tpos, tend, twhere = pack_tree(tails)
    out = s1.run(fetch, feeds_for([(tids, [x + head for x in tpos], tend)], past, [head], layers, kv_heads, head_dim, 0))[0][0]
    cached = max(float(np.abs(np.concatenate([got[0][0][:head], out[w]]) - r).max()) for w, r in zip(twhere, ref))
    # The same head padded to a longer past in a batch of two rows of which only one reads it.
    padded = [np.concatenate([x, np.zeros((1, kv_heads, 3, head_dim), np.float32)], axis=2) for x in past]
    both = [np.concatenate([x, np.zeros_like(x)], axis=0) for x in padded]
    row0 = (tids, [x + head for x in tpos], tend)
    out2 = s1.run(fetch, feeds_for([row0, plain(seqs[0])], both, [head, 0], layers, kv_heads, head_dim, 0))[0]
    batch = max(max(float(np.abs(np.concatenate([got[0][0][:head], out2[0][w]]) - r).max()) for w, r in zip(twhere, ref)),
                float(np.abs(out2[1][: len(seqs[0])] - ref[0]).max()))
    return {"layers": layers, "kv_heads": kv_heads, "head_dim": head_dim, "sequences": len(seqs), "head_tokens": head,
            "no_past_max_abs_diff": no_past, "packed_max_abs_diff": tree, "cached_head_max_abs_diff": cached,
            "padded_batch_max_abs_diff": batch}


def sample_sequences(model_dir: Path, template: str, max_length: int) -> tuple[list[list[int]], int]:
    """Token ids of prompts in the model's template sharing one schema, with different questions
    and queries, and the length of the head they all share (the service keeps the template's
    opening and the schema; any shared head serves to measure)."""
    from ..data import chat_prompt, prompt
    from ..data.tok import CaperTokenizer

    tok = CaperTokenizer.load(str(model_dir / "tokenizer.json"))
    schema = ("singer: singer_id*, name, country, song_name, song_release_year, age, is_male\n"
              "concert: concert_id*, concert_name, theme, stadium_id, year\n"
              "stadium: stadium_id*, location, name, capacity, highest, lowest, average")
    items = [("How many singers are there?", ["SELECT count(*)", "FROM singer"]),
             ("What are the names of singers from France?", ["SELECT name", "FROM singer", "WHERE country = 'France'"]),
             ("Which stadium has the largest capacity?", ["SELECT name", "FROM stadium", "ORDER BY capacity DESC", "LIMIT 1"]),
             ("How many concerts were held in 2014?", ["SELECT count(*)", "FROM concert", "WHERE year = 2014"])]
    if template == chat_prompt.TEMPLATE:
        specials = {t: tok.special_id(t) for t in chat_prompt.CONTROL}
        seqs = [chat_prompt.build(tok.encode, specials, schema, q, units, max_length).ids for q, units in items]
    else:
        seqs = [prompt.build_prompt(tok, schema, q, units, max_length).ids for q, units in items]
    head = 0
    while all(len(x) > head + 1 and x[head] == seqs[0][head] for x in seqs):
        head += 1
    return seqs, head


def card_with_past_kv(old: str, new: str, section: str = "## Input and output") -> str:
    """The card as it was, its `section` replaced by the one the regenerated card has: the sections
    other steps appended (evaluation figures) stay as they were."""
    def part(text: str) -> tuple[int, int]:
        at = text.find(section + "\n")
        if at < 0:
            return -1, -1
        nxt = text.find("\n## ", at + len(section))
        return at, (nxt + 1 if nxt >= 0 else len(text))
    a, b = part(old)
    c, d = part(new)
    if a < 0 or c < 0:
        return new
    return old[:a] + new[c:d] + old[b:]


def kv_dims(graph_file: Path) -> tuple[int, int]:
    """(kv_heads, head_dim) of a graph's attention: its first layer's keys for one token, read by
    running it with that tensor as an extra output (a copy beside it, so its data files resolve)."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    m = onnx.load(str(graph_file), load_external_data=False)
    (key, _), *_ = attention_sites(m.graph)[0]
    m.graph.output.append(helper.make_tensor_value_info(key, TensorProto.FLOAT, None))
    probe = graph_file.with_name(".past_kv_probe.onnx")
    try:
        onnx.save_model(m, str(probe))
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        s = ort.InferenceSession(str(probe), opts, providers=["CPUExecutionProvider"])
        one = {"input_ids": np.array([[1]], np.int64), "position_ids": np.array([[0]], np.int64),
               "subtree_end": np.array([[1]], np.int64)}
        shape = s.run([key], one)[0].shape
    finally:
        probe.unlink(missing_ok=True)
    if len(shape) != 4:
        raise ValueError(f"keys of shape {shape}, expected [batch, kv_heads, length, head_dim]")
    return int(shape[1]), int(shape[3])


def write(model_dir: Path, out: Path, threads: int = 2) -> dict:
    """`out` (a copy of model_dir unless it is model_dir) serves the rewritten graph; its train
    step records the interface and the parity measured."""
    import onnx

    from ..model.manifest import read_manifest, read_step, write_step
    from .ship import card

    man = read_manifest(model_dir)
    if man.get("packing") != "prefix-tree-v1":
        raise ValueError(f"{model_dir}: not a prefix-tree-v1 export")
    if man.get("past_kv"):
        raise ValueError(f"{model_dir}: the graph already takes past keys and values")
    train = read_step(model_dir, "train")
    if not train:
        raise ValueError(f"{model_dir}: no recorded train step (steps/train.json)")
    if out.resolve() != model_dir.resolve():
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(model_dir, out)
    graph_file = out / man["files"]["model"]
    original = out / ".past_kv_original.onnx"
    shutil.copyfile(graph_file, original)
    try:
        kv_heads, head_dim = kv_dims(graph_file)
        m = onnx.load(str(graph_file), load_external_data=False)
        add_past(m, kv_heads, head_dim)
        onnx.save_model(m, str(graph_file))
        seqs, head = sample_sequences(out, man["template"], int(man["max_length"]))
        record = parity(original, graph_file, seqs, head, threads)
        # The export's own bound between two ways of computing the same outputs (packed rows
        # against one sequence a row); with no past nothing may change at all beyond rounding.
        worst = max(record["cached_head_max_abs_diff"], record["padded_batch_max_abs_diff"], record["packed_max_abs_diff"])
        if record["no_past_max_abs_diff"] > 1e-5 or worst > 1e-4:
            raise RuntimeError(f"past keys and values change the outputs: {json.dumps(record)}")
    except Exception:
        shutil.copyfile(original, graph_file)
        raise
    finally:
        original.unlink(missing_ok=True)
    record = {"interface": INTERFACE, **record}
    train["past_kv"] = record
    write_step(out, "train", train)
    cf = out / "MODEL_CARD.md"
    if cf.exists() and (train.get("export") or {}).get("shipped"):
        # A shipped model's card (caper_train.ship.ship.card) says what the graph takes.
        cf.write_text(card_with_past_kv(cf.read_text(), card(read_manifest(out))))
    return record


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m caper_train.ship.past_kv", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a model directory whose graph has the prefix-tree-v1 inputs")
    ap.add_argument("--out", help="where to write the model directory (default: rewrite --model in place)")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)
    model = Path(a.model)
    record = write(model, Path(a.out) if a.out else model, a.threads)
    print(json.dumps(record), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
