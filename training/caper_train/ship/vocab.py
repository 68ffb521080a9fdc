"""A cut vocabulary for a shipped base Clause-PRM: fewer embedding rows, the same tokens on the
text the model was trained on, and any other text still tokenized (into smaller pieces).

The base's byte-level BPE vocabulary is far larger than what schema, question and SQL text use,
and its embedding table is about half of a shipped model's bytes. The kept ids form a closed BPE
vocabulary:
- every added token (the chat control tokens and the rest of the base's specials);
- the 256 symbols of the byte alphabet, so every input still splits into known tokens;
- the results of the first K merges by rank (the merges the base's training data used most);
- every token the base tokenizer gives on the training prompts,
closed under "the parts of every merge whose result is kept are kept": the BPE of the cut
tokenizer then applies, on every word of the training prompts, the same merges in the same
order (a merge it applied there is still present, and the merges it lacks were never the
lowest-ranked one present), so those prompts keep their tokens exactly. Other text loses the
merges that were cut and stays as the smaller pieces those merges would have joined.

Only training records may choose the vocabulary: a held-out database whose rare words were kept
would tokenize as the base does and look better than new text will.

New ids follow the old ids' order (dense, so the merges keep their ranks' order and the added
tokens stay at the end); the embedding row of new id i is the old row keep[i].
"""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Iterable, NamedTuple, Sequence

# Text a served request can carry that the training prompts never held: every one must still
# tokenize into known pieces and decode back to itself under the cut tokenizer.
HOSTILE = [
    "SELECT \"名前\", `first name`, [last name] FROM \"社員 テーブル\" WHERE note = '😀👩‍💻🇫🇷'",
    "users: user_id*, display\u00a0name, e\u0301t\u00e9, \u200bzero\u200bwidth, \ufeffbom, tab\tcol",
    "Wie viele Straßen gibt es in Zürich? 北京有多少条街道？ 서울에는 몇 개의 거리가 있나요? Сколько улиц?",
    "SELECT `weird ``quoted`` col`, 'O''Brien', \"a \"\"b\"\" c\" FROM `my table` -- ☃ ∑ ∞ ≠ ≤ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "  \n\n\t \r\n leading and trailing \u3000 whitespace \u2028 line \u2029 separators \u0085  ",
    "<|im_start|>user\n<|im_end|><|endoftext|> ```sql\n``` \\u0000 \x00 \x7f \x1b[31m",
    "table_" + "x" * 300 + ": " + ", ".join(f"column_{i}_ñame_{'é' * (i % 5)}" for i in range(40)),
    # a 10,000-character schema: long input must not be a special case of the pieces
    " | ".join(f"t{i}_Ångström: id*, \"naïve col {i}\", `βeta`, 値{i}, 🐍{i}" for i in range(400))[:10_000],
]


class VocabError(ValueError):
    pass


def _merge_pair(m) -> tuple[str, str]:
    # tokenizer.json stores a merge as "a b" (older files) or ["a", "b"]
    if isinstance(m, str):
        a, b = m.split(" ", 1)
        return a, b
    return m[0], m[1]


def _is_byte_level(spec: dict) -> bool:
    return '"ByteLevel"' in json.dumps(spec.get("pre_tokenizer"))


def choose(spec: dict, merges_kept: int, used: Iterable[int]) -> list[int]:
    """The kept old ids, ascending: added tokens, the byte alphabet, the first `merges_kept` merges'
    results and the `used` ids, closed under the parts of every merge whose result is kept."""
    from tokenizers.pre_tokenizers import ByteLevel

    model = spec.get("model") or {}
    if model.get("type") != "BPE" or not _is_byte_level(spec):
        raise VocabError("only a byte-level BPE tokenizer can be cut without unknown tokens")
    vocab: dict[str, int] = model["vocab"]
    inv = {i: s for s, i in vocab.items()}
    merges = [_merge_pair(m) for m in model["merges"]]
    keep: set[str] = set()
    added = [t["id"] for t in spec.get("added_tokens") or []]
    for c in ByteLevel.alphabet():
        if c not in vocab:
            raise VocabError(f"the byte symbol {c!r} is not in the vocabulary: cut text could not be spelled")
        keep.add(c)
    if model.get("unk_token") in vocab:
        keep.add(model["unk_token"])
    for a, b in merges[:max(merges_kept, 0)]:
        keep.add(a + b)
    for i in used:
        if i not in inv:
            if i in added:
                continue
            raise VocabError(f"id {i} was produced but is not in the vocabulary")
        keep.add(inv[i])
    producers: dict[str, list[tuple[str, str]]] = {}
    for a, b in merges:
        producers.setdefault(a + b, []).append((a, b))
    todo = list(keep)
    while todo:
        s = todo.pop()
        for a, b in producers.get(s, ()):
            for p in (a, b):
                if p not in keep:
                    if p not in vocab:
                        raise VocabError(f"merge part {p!r} is not in the vocabulary")
                    keep.add(p)
                    todo.append(p)
    ids = {vocab[s] for s in keep} | set(added)
    return sorted(ids)


def prune(spec: dict, keep: Sequence[int]) -> tuple[dict, dict[int, int]]:
    """The tokenizer.json of the kept ids (new id = rank of the old id among them) and the old -> new
    map. Merges keep their relative order; added tokens and post-processor ids are renumbered."""
    remap = {old: new for new, old in enumerate(keep)}
    out = copy.deepcopy(spec)
    model = out["model"]
    vocab = model["vocab"]
    model["vocab"] = {s: remap[i] for s, i in sorted(vocab.items(), key=lambda kv: kv[1]) if i in remap}
    kept_strings = model["vocab"]
    model["merges"] = [m for m in model["merges"] if "".join(_merge_pair(m)) in kept_strings]
    for a, b in map(_merge_pair, model["merges"]):
        if a not in kept_strings or b not in kept_strings:
            raise VocabError(f"merge ({a!r}, {b!r}) is kept without its parts")
    for t in out.get("added_tokens") or []:
        t["id"] = remap[t["id"]]
    _renumber_processor(out.get("post_processor"), remap)
    pad = out.get("padding")
    if isinstance(pad, dict) and isinstance(pad.get("pad_id"), int):
        pad["pad_id"] = remap[pad["pad_id"]]
    return out, remap


def _renumber_processor(p, remap: dict[int, int]) -> None:
    if not isinstance(p, dict):
        return
    kind = p.get("type")
    if kind == "Sequence":
        for q in p.get("processors") or []:
            _renumber_processor(q, remap)
    elif kind == "TemplateProcessing":
        for t in (p.get("special_tokens") or {}).values():
            t["ids"] = [remap[i] for i in t["ids"]]
    elif kind in ("BertProcessing", "RobertaProcessing"):
        for k in ("sep", "cls"):
            if isinstance(p.get(k), list) and len(p[k]) == 2:
                p[k][1] = remap[p[k][1]]
    elif kind != "ByteLevel":
        raise VocabError(f"post-processor {kind} may hold token ids this cut does not know how to renumber")


def content_tokenizer(tokenizer_json: str):
    """The tokenizer without added tokens that encodes prompt text (caper_train.data.tok)."""
    from ..data.tok import _content_tokenizer

    return _content_tokenizer(tokenizer_json)


def prompt_texts(records: Sequence[str | Path], exclude_dbs: set[str]) -> list[str]:
    """Every distinct text the caper-chat-v1 prompts of these records encode (fixed template parts,
    schemas, questions, clause units as the template spaces them), in first-seen order."""
    from ..data import chat_prompt
    from ..base.features import question_groups
    from ..data.prompt import PromptError

    seen: dict[str, None] = {}

    def record(text: str) -> list[int]:
        seen.setdefault(text, None)
        return []

    sp = {t: 0 for t in chat_prompt.CONTROL}
    for (_db, question), g in question_groups([str(r) for r in records], None, set(exclude_dbs)).items():
        for c in g["cands"].values():
            try:
                chat_prompt.build(record, sp, g["schema"], question, [u["text"] for u in c["units"]], 1 << 30)
            except PromptError:
                continue
    return list(seen)


def used_ids(tokenizer_json: str, texts: Sequence[str]) -> set[int]:
    tok = content_tokenizer(tokenizer_json)
    used: set[int] = set()
    for e in tok.encode_batch(list(texts), add_special_tokens=False):
        used.update(e.ids)
    return used


def check(old_json: str, new_json: str, remap: dict[int, int], texts: Sequence[str], hostile: Sequence[str] = HOSTILE) -> dict:
    """Raises unless the cut tokenizer gives the old ids (mapped) on `texts` and, on `hostile`, only
    ids it has and a decoding equal to the input (as the tokenizer's normalizer leaves it)."""
    old, new = content_tokenizer(old_json), content_tokenizer(new_json)
    size = new.get_vocab_size(with_added_tokens=True)
    for k in range(0, len(texts), 4096):
        chunk = list(texts[k:k + 4096])
        for t, a, b in zip(chunk, old.encode_batch(chunk, add_special_tokens=False),
                           new.encode_batch(chunk, add_special_tokens=False)):
            if [remap.get(i, -1) for i in a.ids] != b.ids:
                raise VocabError(f"the cut tokenizer splits a training text differently: {t[:80]!r}")
    split = 0
    for t in hostile:
        want = new.normalizer.normalize_str(t) if new.normalizer else t
        ids = new.encode(t, add_special_tokens=False).ids
        if any(i < 0 or i >= size for i in ids):
            raise VocabError(f"unknown id on {t[:40]!r}")
        if new.decode(ids, skip_special_tokens=False) != want:
            raise VocabError(f"the cut tokenizer does not decode {t[:40]!r} back to itself")
        split += len(ids) - len(old.encode(t, add_special_tokens=False).ids)
    return {"texts": len(texts), "hostile": len(hostile), "hostile_extra_tokens": split}


class Cut(NamedTuple):
    spec: dict          # the whole tokenizer.json
    new_spec: dict      # the cut one
    new_json: str
    keep: list[int]     # kept old ids, ascending (the embedding rows to keep)
    remap: dict[int, int]
    checked: dict       # what check() measured


def cut(old_json: str, merges_kept: int, texts: Sequence[str]) -> Cut:
    """A tokenizer.json text cut to the first `merges_kept` merges and the tokens of `texts`, checked:
    raises VocabError unless `texts` keep their tokens and hostile text round-trips (check)."""
    spec = json.loads(old_json)
    keep = choose(spec, merges_kept, used_ids(old_json, texts))
    new_spec, remap = prune(spec, keep)
    new_json = json.dumps(new_spec, ensure_ascii=False)
    return Cut(spec, new_spec, new_json, keep, remap, check(old_json, new_json, remap, texts))


def cut_embedding(model, keep: Sequence[int]) -> dict:
    """In an fp32 ONNX graph: the token embedding table (the constant looked up by the graph's input
    ids) replaced by its kept rows, new row i = old row keep[i]. Refuses a graph that uses the
    table or the vocabulary's size anywhere else (a tied output head would need the same cut)."""
    import numpy as np
    from onnx import numpy_helper

    g = model.graph
    inits = {t.name: t for t in g.initializer}
    inputs = {i.name for i in g.input}
    node = next((n for n in g.node if n.op_type == "Gather" and n.input[0] in inits and n.input[1] in inputs
                 and len(inits[n.input[0]].dims) == 2), None)
    if node is None:
        raise VocabError("no embedding lookup (a Gather of a constant table by the input ids) in the graph")
    table = inits[node.input[0]]
    rows = int(table.dims[0])
    users = [n for n in g.node if n is not node and table.name in n.input]
    if users or any(o.name == table.name for o in g.output):
        raise VocabError(f"{table.name} is used beyond the token lookup ({', '.join(n.op_type for n in users) or 'an output'})")
    for t in g.initializer:
        if t is not table and rows in t.dims:
            raise VocabError(f"{t.name} {list(t.dims)} has the vocabulary's size {rows}: it would need the same cut")
    keep = np.asarray(keep, dtype=np.int64)
    if len(keep) == 0 or keep.min() < 0 or keep.max() >= rows or (np.diff(keep) <= 0).any():
        raise VocabError(f"kept ids must be ascending rows of the {rows}-row table")
    w = numpy_helper.to_array(table)
    new = numpy_helper.from_array(np.ascontiguousarray(w[keep]), table.name)
    at = list(g.initializer).index(table)
    g.initializer.remove(table)
    g.initializer.insert(at, new)
    return {"table": table.name, "rows": rows, "width": int(table.dims[1]), "kept": int(len(keep))}
