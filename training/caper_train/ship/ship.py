"""Ship a trained base Clause-PRM: a served model directory small enough to commit.

The export of a base Clause-PRM (caper_train.base.probe.export_model) is the fp32 graph: the truncated
base's decoder layers and its whole embedding matrix, which is most of the bytes. Shipping keeps
the graph and stores the weights in 4 bits on caper_train.model.grid's layouts: the decoder's matrix
products as MatMulNBits, the embedding as a lookup of its rows' codes dequantized after the
lookup (standard operators), so the activations stay fp32 and only the rows a request uses are
expanded. A model trained on a base moved onto the same grid is stored exactly (every
`largest_move` 0); any other model is re-rounded, and parity says what that costs.

The vocabulary is kept whole unless --vocab K cuts it (caper_train.ship.vocab): the embedding keeps the
rows of the byte alphabet, the control tokens, the first K merges' results and every token of the
--vocab-records prompts, and the served tokenizer.json is renumbered to those rows. The training
prompts tokenize exactly as before; other text may split into more, smaller tokens, which parity
measures by tokenizing each side with its own tokenizer.

Parity is measured, not assumed: every candidate of the --records questions is scored by both
graphs (the fp32 export matches torch to its recorded fp32_max_abs_diff), and the shipped
caper.json records the largest clause-score difference and the share of a question's candidate
pairs that keep their order under the candidate score the service ranks by. caper_train.ship.parity
compares the shipped graph with the PyTorch model its weights rebuild, on identical token ids.

    python -m caper_train.ship.ship --model runs/models/NAME --out models/default \
        --records runs/prm-base/pool16-heldout.jsonl [--bits 4] [--block B] [--embed-block B] [--max-questions 0] \
        [--vocab K --vocab-records TRAINING_RECORDS...]
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np


def quantize(src: Path, dst: Path, bits: int, block: int, embed_block: int, embed_bits: int | None = None,
             max_file_bytes: int = 0, keep: list[int] | None = None) -> dict:
    """Weight-only quantization: every MatMul with a constant weight (MatMulNBits) and the
    embedding table (quantize_embedding). In 4 bits both use caper_train.model.grid's layouts, so a
    model trained on that grid is stored exactly (`largest_move` 0). `keep`: the embedding rows a
    cut vocabulary keeps (caper_train.ship.vocab), gathered before the table is quantized; the grid's
    blocks lie within a row, so a gathered row keeps its codes."""
    import onnx

    from ..model.export import matmul_nbits

    g = onnx.load(str(src), load_external_data=True)
    cut = {}
    if keep is not None:
        from .vocab import cut_embedding

        cut = cut_embedding(g, keep)
    moved = {}
    if bits == 4:
        moved = grid_matmuls(g, block)
    elif bits:
        g = matmul_nbits(g, bits, block, symmetric=False)
    embed_bits = 4 if embed_bits is None and bits else (embed_bits or 0)
    embedded = quantize_embedding(g, embed_bits, embed_block) if embed_bits else {}
    data = save_split(g, dst, max_file_bytes) if max_file_bytes else onnx.save_model(g, str(dst)) or []
    ops: dict[str, int] = {}
    for n in g.graph.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
    return {"bits": bits, "block": block, "embed_bits": embed_bits, "embed_block": embed_block, "symmetric": False,
            "method": (f"weight-only: matrix products int{bits} (MatMulNBits, blocks of {block})" if bits else "matrix products fp32")
                      + (f", embedding int{embed_bits} looked up and dequantized (blocks of {embed_block}, fp16 scale and offset)"
                         if embed_bits else ", embedding fp32"),
            "matmul_nbits": ops.get("MatMulNBits", 0), "unquantized_matmul": ops.get("MatMul", 0),
            "matrices": moved, "embedding": embedded, "data_files": data, **({"embedding_cut": cut} if cut else {})}


def save_split(model, dst: Path, max_bytes: int) -> list[str]:
    """Saves the graph with its large weights in files beside it (ONNX external data, which
    onnxruntime reads relative to the graph), none over `max_bytes`: git hosts refuse single
    files past about 100 MB. Returns the data files' names in order."""
    import onnx
    from onnx.external_data_helper import set_external_data, write_external_data_tensors

    files: list[str] = []
    used = max_bytes
    for t in model.graph.initializer:
        n = len(t.raw_data)
        if n < 1 << 16:
            continue  # small tensors stay inside the graph file
        if n > max_bytes:
            raise ValueError(f"{t.name}: {n} bytes will not fit a data file of {max_bytes}")
        if used + n > max_bytes:
            files.append(f"{dst.stem}.data-{len(files)}")
            used = 0
        set_external_data(t, location=files[-1])
        used += n
    for f in files:
        (dst.parent / f).unlink(missing_ok=True)
    write_external_data_tensors(model, str(dst.parent))
    onnx.save_model(model, str(dst))
    return files


def grid_matmuls(model, block: int) -> dict:
    """Every MatMul whose weight is a constant [K, N] matrix (K a multiple of `block`, N >= 16) as a
    MatMulNBits on caper_train.model.grid's matrix layout. Returns the count and the largest change
    of a weight (0 when the model was trained on this grid)."""
    import torch
    from onnx import helper, numpy_helper

    from ..model.grid import exact_matrix_codes, matrix_values, pair_codes

    g = model.graph
    inits = {t.name: t for t in g.initializer}
    worst, count = 0.0, 0
    for node in list(g.node):
        if node.op_type != "MatMul" or node.input[1] not in inits:
            continue
        t = inits[node.input[1]]
        # heads (a handful of outputs) stay fp32: they weigh nothing and were trained off the grid
        if len(t.dims) != 2 or t.dims[0] % block or t.dims[1] < 16:
            continue
        w = torch.from_numpy(numpy_helper.to_array(t).astype(np.float32).T.copy())  # [N, K]: a row per output
        n_out, k = w.shape
        q, sc, zp = exact_matrix_codes(w, block)
        worst = max(worst, float((matrix_values(q, sc, zp) - w).abs().max()))
        pre = node.input[1]
        new = [numpy_helper.from_array(pair_codes(q.numpy().reshape(n_out, k // block, block)), pre + ".q4"),
               numpy_helper.from_array(sc.numpy().reshape(-1).astype(np.float32), pre + ".scales"),
               numpy_helper.from_array(pair_codes(zp.numpy()).reshape(-1), pre + ".zp")]
        mm = helper.make_node("MatMulNBits", [node.input[0], pre + ".q4", pre + ".scales", pre + ".zp"], list(node.output),
                              name=(node.name or pre) + "_q4", domain="com.microsoft",
                              K=k, N=n_out, bits=4, block_size=block, accuracy_level=0)
        at = list(g.node).index(node)
        g.node.remove(node)
        g.node.insert(at, mm)
        count += 1
        if not any(i == pre for n in g.node for i in n.input):
            g.initializer.remove(t)
        g.initializer.extend(new)
    if count and not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return {"count": count, "largest_move": worst}


def quantize_embedding(model, bits: int, block: int) -> dict:
    """In 4 bits (caper_train.model.grid's table layout; `bits` must be 4): replaces the Gather of a float embedding table by a lookup of its rows' codes (two 4-bit
    codes a byte) and their blocks' scale and offset, dequantized after the lookup. Only standard
    operators of the graph's opset: onnxruntime builds without the contrib lookup serve it too,
    and only the looked-up rows are expanded."""
    from onnx import TensorProto, helper, numpy_helper

    g = model.graph
    inits = {t.name: t for t in g.initializer}
    inputs = {i.name for i in g.input}
    # the token embedding: the constant table looked up by the graph's input ids
    node = next((n for n in g.node if n.op_type == "Gather" and n.input[0] in inits and n.input[1] in inputs
                 and len(inits[n.input[0]].dims) == 2 and inits[n.input[0]].dims[1] % block == 0), None)
    if node is None:
        return {}
    import torch

    from ..model.grid import pair_codes, table_codes, table_values

    table = inits[node.input[0]]
    w = torch.from_numpy(numpy_helper.to_array(table).astype(np.float32))
    v, h = w.shape
    if bits != 4:
        raise ValueError("the embedding table is stored in 4 bits (caper_train.model.grid's table layout)")
    q, s16, lo16 = table_codes(w, block)
    moved = float((table_values(q, s16, lo16) - w).abs().max())
    codes, scale, offset = pair_codes(q.numpy()), s16.numpy(), lo16.numpy()
    name = node.input[0]
    pre = f"{name}.q{bits}"
    new_inits = [numpy_helper.from_array(codes, pre + ".codes"), numpy_helper.from_array(scale, pre + ".scale"),
                 numpy_helper.from_array(offset, pre + ".offset"),
                 numpy_helper.from_array(np.array(16, dtype=np.int32), pre + ".sixteen"),
                 numpy_helper.from_array(np.array([0, 0, h // block, block], dtype=np.int64), pre + ".blocks"),
                 numpy_helper.from_array(np.array([0, 0, h], dtype=np.int64), pre + ".rows"),
                 numpy_helper.from_array(np.array([-1], dtype=np.int64), pre + ".last")]
    ids, out = node.input[1], node.output[0]
    t = lambda s: f"{pre}.{s}"  # noqa: E731
    nodes = [helper.make_node("Gather", [pre + ".codes", ids], [t("c")], axis=0),
             helper.make_node("Cast", [t("c")], [t("ci")], to=TensorProto.INT32)]
    # two codes a byte: the low nibble is the even value of the pair
    nodes += [helper.make_node("Div", [t("ci"), pre + ".sixteen"], [t("hi")]),
              helper.make_node("Mul", [t("hi"), pre + ".sixteen"], [t("hi16")]),
              helper.make_node("Sub", [t("ci"), t("hi16")], [t("lo")]),
              helper.make_node("Unsqueeze", [t("lo"), pre + ".last"], [t("lo1")]),
              helper.make_node("Unsqueeze", [t("hi"), pre + ".last"], [t("hi1")]),
              helper.make_node("Concat", [t("lo1"), t("hi1")], [t("pair")], axis=-1),
              helper.make_node("Cast", [t("pair")], [t("qf")], to=TensorProto.FLOAT)]
    nodes += [helper.make_node("Reshape", [t("qf"), pre + ".blocks"], [t("qb")]),
              helper.make_node("Gather", [pre + ".scale", ids], [t("s16")], axis=0),
              helper.make_node("Gather", [pre + ".offset", ids], [t("o16")], axis=0),
              helper.make_node("Cast", [t("s16")], [t("s")], to=TensorProto.FLOAT),
              helper.make_node("Cast", [t("o16")], [t("o")], to=TensorProto.FLOAT),
              helper.make_node("Unsqueeze", [t("s"), pre + ".last"], [t("s1")]),
              helper.make_node("Unsqueeze", [t("o"), pre + ".last"], [t("o1")]),
              helper.make_node("Mul", [t("qb"), t("s1")], [t("qs")]),
              helper.make_node("Add", [t("qs"), t("o1")], [t("wb")]),
              helper.make_node("Reshape", [t("wb"), pre + ".rows"], [out])]
    at = list(g.node).index(node)
    g.node.remove(node)
    for k, n in enumerate(nodes):
        g.node.insert(at + k, n)
    g.initializer.remove(table)
    g.initializer.extend(new_inits)
    return {"table": name, "rows": v, "width": h, "bytes": int(codes.nbytes + scale.nbytes + offset.nbytes),
            "largest_move": moved}


def question_prompts(records: list[str], tok_paths: list[Path], max_length: int, max_questions: int):
    """Per question, its caper-chat-v1 prompts under each tokenizer (a list per tokenizer, the same
    candidates in the same order): the candidates that fit max_length under every tokenizer, kept
    when there are at least two."""
    from ..data import chat_prompt
    from ..base.features import candidate_prompts, question_groups
    from ..data.tok import CaperTokenizer

    toks = [CaperTokenizer.load(p) for p in tok_paths]
    specials = [{t: tok.special_id(t) for t in chat_prompt.CONTROL} for tok in toks]
    out = []
    for (_db, question), g in sorted(question_groups(records, None, set()).items()):
        cands = list(g["cands"].values())
        built = []
        for tok, sp in zip(toks, specials):
            ps, kept = candidate_prompts(tok, sp, g["schema"], question, cands, max_length)
            built.append({id(c): p for c, p in zip(kept, ps)})
        common = [id(c) for c in cands if all(id(c) in b for b in built)]
        if len(common) >= 2:
            out.append([[b[k] for k in common] for b in built])
        if max_questions and len(out) >= max_questions:
            break
    return out


def scores(session, prompts) -> list[np.ndarray]:
    """Clause scores then the terminal's, per candidate (logits at the scored positions)."""
    from ..model.export import ort_rewards

    return scored(ort_rewards(session, [p.ids for p in prompts]), prompts)


def scored(rewards: list[np.ndarray], prompts) -> list[np.ndarray]:
    return [r[[*p.markers, p.terminal]] for r, p in zip(rewards, prompts)]


def agreement(questions) -> dict:
    """Per question (a reference's scores and a new one's, per candidate: clause scores then the
    terminal's), the largest differences and the share of the question's candidate pairs that
    keep their order under the candidate score (the lowest of its clause and terminal scores, as
    the service ranks a chat model's candidates). Pairs the reference ties are not counted."""
    clause = terminal = cand = 0.0
    n_q = n_c = pairs = same = 0
    for sa, sb in questions:
        n_q += 1
        n_c += len(sa)
        for x, y in zip(sa, sb):
            d = np.abs(x - y)
            clause, terminal = max(clause, float(d[:-1].max(initial=0.0))), max(terminal, float(d[-1]))
        ca, cb = [float(x.min()) for x in sa], [float(x.min()) for x in sb]
        cand = max([cand, *(abs(x - y) for x, y in zip(ca, cb))])
        for i in range(len(ca)):
            for j in range(i + 1, len(ca)):
                if ca[i] == ca[j]:
                    continue
                pairs += 1
                same += (ca[i] - ca[j]) * (cb[i] - cb[j]) > 0
    return {"questions": n_q, "candidates": n_c, "pairs": pairs, "pair_order_agreement": same / pairs if pairs else 1.0,
            "max_abs_diff": max(clause, terminal), "max_clause_diff": clause, "max_terminal_diff": terminal,
            "max_candidate_diff": cand}


def parity(ref_model: Path, new_model: Path, groups, threads: int, remap: dict[int, int] | None = None) -> dict:
    """agreement of the new graph with the reference graph. `groups`: per question, the reference
    graph's prompts and the new graph's (question_prompts with two tokenizers, each side its own;
    with one, both graphs read the same ids), the same candidate's clauses read wherever each
    tokenizer puts their ends. `remap` (a cut vocabulary's old -> new ids) adds the share of
    prompts whose tokens changed, not just their numbers."""
    a, b = session(ref_model, threads), session(new_model, threads)
    out = agreement((scores(a, g[0]), scores(b, g[-1])) for g in groups)
    if remap is not None:
        cands = [(x, y) for g in groups for x, y in zip(g[0], g[-1])]
        changed = sum([remap.get(i, -1) for i in x.ids] != y.ids for x, y in cands)
        out["tokenization_changed"] = changed / len(cands) if cands else 0.0
    return out


def session(model: Path, threads: int):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.log_severity_level = 3
    return ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m caper_train.ship.ship", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="an exported base Clause-PRM directory (fp32 model.onnx)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--records", nargs="+", required=True, help="annotated records whose candidates measure parity")
    ap.add_argument("--bits", type=int, default=4, choices=[0, 4, 8], help="bits of the decoder's matrices (0: left fp32)")
    ap.add_argument("--embed-bits", type=int, choices=[0, 4], help="bits of the embedding table (default --bits; 0: fp32)")
    ap.add_argument("--block", type=int, help="values per scale in the decoder's matrices (default: the grid the model "
                    "was trained on, else 128)")
    ap.add_argument("--embed-block", type=int, help="values per scale in the embedding table (default: the grid's, else 64)")
    ap.add_argument("--max-file-mb", type=float, default=95.0,
                    help="largest file of the served model; its weights are split into files beside the graph (0: one file)")
    ap.add_argument("--max-questions", type=int, default=0)
    ap.add_argument("--min-agreement", type=float, default=0.99)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=0, metavar="K",
                    help="cut the vocabulary to the byte alphabet, the added tokens, the results of the first K BPE merges "
                    "and every token of the --vocab-records prompts, with the merges that build them (0: keep it whole)")
    ap.add_argument("--vocab-records", nargs="+", default=[],
                    help="with --vocab: the records the model was trained on, and only those. A held-out database's "
                    "words kept in the vocabulary would tokenize as the base does and flatter the held-out figures; "
                    "records of the export's training.exclude_dbs are skipped in any case")
    a = ap.parse_args(argv)
    if a.vocab < 0:
        ap.error("--vocab must be >= 0")
    if a.vocab and not a.vocab_records:
        ap.error("--vocab needs --vocab-records (the training records)")
    src, out = Path(a.model), Path(a.out)
    manifest = json.loads((src / "caper.json").read_text())
    if manifest.get("template") != "caper-chat-v1":
        ap.error(f"{src}: not a base Clause-PRM export (template {manifest.get('template')})")
    grid = (manifest.get("training") or {}).get("grid") or {}
    a.block = a.block or grid.get("block", 128)
    a.embed_block = a.embed_block or grid.get("embed_block", 64)
    out.mkdir(parents=True, exist_ok=True)
    for f in [*out.glob("model*.onnx*"), *out.glob("model.data-*")]:
        f.unlink()
    src_tok = src / manifest["files"]["tokenizer"]
    keep, remap, cut = None, None, None
    if a.vocab:
        keep, remap, cut = cut_vocab(src_tok, out / "tokenizer.json", a.vocab, a.vocab_records,
                                     set((manifest.get("training") or {}).get("exclude_dbs") or []))
    else:
        shutil.copyfile(src_tok, out / "tokenizer.json")
    q = quantize(src / manifest["files"]["model"], out / "model.onnx", a.bits, a.block, a.embed_block, a.embed_bits,
                 int(a.max_file_mb * 1e6), keep)
    groups = question_prompts(a.records, [src_tok, out / "tokenizer.json"] if cut else [out / "tokenizer.json"],
                              manifest["max_length"], a.max_questions)
    p = parity(src / manifest["files"]["model"], out / "model.onnx", groups, a.threads, remap)
    q["parity"] = {**p, "reference": "fp32 export" + (" with the whole vocabulary" if cut else ""),
                   "tokens": "each graph's own tokenizer" if cut else "identical ids",
                   "records": [Path(r).name for r in a.records]}
    if cut:
        rows = q.pop("embedding_cut")
        q["vocab"] = {**cut, "rows_before": rows["rows"]}
    q["bytes"] = sum((out / f).stat().st_size for f in ["model.onnx", *q["data_files"]])
    print(json.dumps(q, indent=2), file=sys.stderr)
    if p["pair_order_agreement"] < a.min_agreement:
        print(f"ship: pair order agreement {p['pair_order_agreement']:.4f} < {a.min_agreement}", file=sys.stderr)
        return 1
    # The train step's sections name the served files: recorded there, caper.json is reassembled
    # from the step outputs like any other model directory's.
    from ..model.manifest import read_manifest, read_step, section_writers, write_step

    if (src / "steps").is_dir():
        shutil.copytree(src / "steps", out / "steps", dirs_exist_ok=True)
    train = read_step(out, "train") or {k: v for k, v in manifest.items() if section_writers().get(k) == "train"}
    train["files"] = {"model": "model.onnx", "tokenizer": "tokenizer.json",
                      **({"model_data": q["data_files"]} if q["data_files"] else {})}
    train["export"] = {**(train.get("export") or {}), "weights": f"int{a.bits}" if a.bits else "fp32", "shipped": q}
    if cut:
        renumber_manifest(train, remap, q["vocab"], out / "tokenizer.json", rows["width"])
    write_step(out, "train", train)
    (out / "MODEL_CARD.md").write_text(card(read_manifest(out)))
    return 0


def cut_vocab(src_tok: Path, dst_tok: Path, merges_kept: int, records: list[str], exclude_dbs: set[str]):
    """Writes the cut tokenizer (caper_train.ship.vocab) and returns the kept old ids, the old -> new id
    map and the record of the cut. Refuses a cut under which a training prompt tokenizes otherwise,
    or under which hostile text has unknown pieces or does not decode back to itself."""
    from . import vocab

    texts = vocab.prompt_texts(records, exclude_dbs)
    c = vocab.cut(src_tok.read_text(encoding="utf-8"), merges_kept, texts)
    dst_tok.write_text(c.new_json, encoding="utf-8")
    of = len(set(c.spec["model"]["vocab"].values()) | {t["id"] for t in c.spec.get("added_tokens") or []})
    return c.keep, c.remap, {"kept": len(c.keep), "of": of, "merges_kept": merges_kept,
                             "merges": len(c.new_spec["model"]["merges"]), "of_merges": len(c.spec["model"]["merges"]),
                             "records": [Path(r).name for r in records], "excluded_dbs": sorted(exclude_dbs),
                             "prompt_texts": c.checked["texts"]}


def renumber_manifest(train: dict, remap: dict[int, int], cut: dict, tok_path: Path, width: int) -> None:
    """The train step's token ids and sizes under a cut vocabulary, each id checked against the cut
    tokenizer (the service refuses a marker_id its tokenizer does not give)."""
    from ..data.tok import CaperTokenizer

    tok = CaperTokenizer.load(tok_path)
    named = {**({train["marker"]: train["marker_id"]} if "marker_id" in train else {}), **(train.get("special_ids") or {})}
    for t, i in named.items():
        if tok.special_id(t) != remap[i]:
            raise ValueError(f"{t}: the cut tokenizer gives {tok.special_id(t)}, the id map {remap[i]}")
    if "marker_id" in train:
        train["marker_id"] = remap[train["marker_id"]]
    if "special_ids" in train:
        train["special_ids"] = {t: remap[i] for t, i in train["special_ids"].items()}
    if "pad_id" in train:
        train["pad_id"] = remap[train["pad_id"]]
    if tok.vocab_size != cut["kept"]:
        raise ValueError(f"the cut tokenizer has {tok.vocab_size} ids, the embedding {cut['kept']} rows")
    train["vocab_size"] = tok.vocab_size
    if "parameters" in train:
        train["parameters"] = int(train["parameters"]) - (cut["rows_before"] - cut["kept"]) * int(width)


def _num(x, spec: str) -> str:
    return format(x, spec) if isinstance(x, (int, float)) else '?'


def past_kv_text(pk: dict | None) -> str:
    """The card's sentences on a graph that takes past keys and values (caper_train.ship.past_kv)."""
    if not pk:
        return ""
    return (f"The graph also takes and returns the keys and values of a prompt's head (`{pk['interface']}`,\n"
            f"`caper_train.ship.past_kv`: {pk['layers']} layers, {pk['kv_heads']} key/value heads of {pk['head_dim']}), so a "
            f"server computes\nthe chat header and schema of a database once. Given no past it computes what the graph "
            f"before\nthe rewrite did (largest difference {_num(pk.get('no_past_max_abs_diff'), '.3g')}); a head read back "
            f"differs from the whole prompt\ncomputed at once by at most {_num(pk.get('cached_head_max_abs_diff'), '.3g')}.\n")


def card(m: dict) -> str:
    """The served model's card, written whole at every ship: `caper train` steps that run later on
    this directory add their evaluation sections under it."""
    tr = m.get("training") or {}
    sh = (m.get("export") or {}).get("shipped") or {}
    par = sh.get("parity") or {}
    grid = tr.get("grid") or {}
    files = [m["files"]["model"], *(m["files"].get("model_data") or []), m["files"]["tokenizer"]]
    held = ", ".join(tr.get("exclude_dbs") or []) or "none"
    trained = (f"the top {tr.get('top_k')} of them trained with a scalar head" if tr.get("family") == "topk"
               else "frozen, with a linear probe head")
    side = (m.get("export") or {}).get("side_probe")
    if side:
        trained += (f"; the served output at each position is the average of that head's and of a linear probe on the\n"
                    f"frozen layer {side['layer']}'s states (`caper_train.ship.side_probe`, fitted on {side.get('candidates', 0):,} "
                    f"training candidates of {side.get('databases', 0)} databases)")
    voc = sh.get("vocab")
    vocab_text = (f"""
Vocabulary: {voc['kept']:,} of the base's {voc['of']:,} ids, chosen from the training data only: the byte alphabet,
the control tokens, the results of the base's first {voc['merges_kept']:,} BPE merges and every token of the training
prompts ({', '.join(voc['records'])}), with the merges that build them. The training prompts tokenize
exactly as the base tokenizes them; text outside the kept vocabulary is split into smaller pieces of the same
bytes, so any input still tokenizes and decodes back to itself. Parity below tokenizes each side with its own
tokenizer: {_num(par.get('tokenization_changed'), '.1%')} of its prompts tokenize differently from the base.
""" if voc else "")
    tokens = (" (each graph reading the ids of its own tokenizer, the whole tokenizer on the fp32 side, so both\n"
              "include what the cut vocabulary changes; `python -m caper_train.ship.parity` compares the shipped graph\n"
              "alone with the PyTorch model its weights rebuild, on identical token ids)" if voc
              else " (both graphs reading identical token ids)")
    return f"""# CAPER Clause-PRM: {m['name']}

Clause-level process reward model for Text-to-SQL candidates: the first {tr.get('layers')} decoder layers
of the pretrained base `{Path(str(tr.get('base', '?'))).name}` (Qwen2.5-Coder-0.5B-Instruct, Apache-2.0), {trained}.
{m.get('parameters', 0):,} parameters, vocabulary {m.get('vocab_size')}.
{vocab_text}
## Input and output
Prompt template `{m['template']}`: the base's chat turn, the schema and question as the user's message,
the SQL as the assistant's answer in a sql fence. The output at each clause's last token judges the clause
prefix ending there (causal attention: it sees nothing after it); the output at the `{m['marker']}` closing
the answer judges the whole query. Scores shown to users are `sigmoid(raw)`. Max length {m['max_length']} tokens;
candidates of one question are packed as one prefix-tree row (`{m.get('packing')}`: inputs
{', '.join('`%s`' % n for n in m['input_names'])}).
{past_kv_text(m.get('past_kv'))}
## Files
{chr(10).join(f'- `{f}`' for f in files)}

Weights: {sh.get('method', '?')}. The layers were trained on this grid (`caper_train.model.grid`, blocks of
{grid.get('block', '?')} for the matrices and {grid.get('embed_block', '?')} for the embedding), so the stored values are the
trained ones (largest move: matrices {(sh.get('matrices') or {}).get('largest_move', '?')}, embedding
{(sh.get('embedding') or {}).get('largest_move', '?')}). Parity against the fp32 export on {par.get('questions', '?')} questions
({par.get('candidates', '?')} candidates, {par.get('pairs', '?')} candidate pairs of a question): pair order agreement
{_num(par.get('pair_order_agreement'), '.4f')}, largest score difference {_num(par.get('max_abs_diff'), '.3g')}{tokens}.

## Training
- Family `{tr.get('family')}`, compute dtype {tr.get('dtype')}, {tr.get('epochs')} epochs, at most {tr.get('per_question')} candidates a
  question, seed {tr.get('seed')}{', listwise blame weight ' + str(tr['blame_weight']) if tr.get('blame_weight') else ''}.
- Data ({tr.get('data_hash')}): records written by `caper annotate` (real candidates and failures of the
  dev-open training databases, labelled by their gold root cause; injected faults of Spider train questions).
- Databases held out of everything the model learned from: {held}.
  Figures on them: bench/results/prm-base.md. Figures on the other dev-open databases are in-sample.
  The selector, confidence maps and blame combiners are small fits that need many databases more
  than a clean split: each section of caper.json names the databases it was fitted on
  (`fitted_on.databases`, `fit.databases`), every dev-open database unless `caper train
  --fit-exclude-dbs` left some out.
- Command: `{tr.get('command')}`

## Limits
Trained on Spider-style SQLite SQL and English questions; the first {tr.get('layers')} layers of a 24-layer base
keep less of its knowledge than the whole. A score is evidence for ranking and blame, not a proof that a
query is right: with a database, execution-based selection beats the score alone.
"""


if __name__ == "__main__":
    raise SystemExit(main())
