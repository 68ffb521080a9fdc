"""Real candidates from an open code model: N sampled replies per question of a Spider-layout split.

    python -m caper_train.data.sample --data DIR --gguf FILE --policy NAME --out SAMPLES.jsonl
        [--n 8] [--temperature 0.8] [--top-p 0.95] [--seed 0] [--max-new-tokens 200] [--stop fence|eos]
        [--limit N] [--shard K/N] [--resume] [--max-minutes M] [--engine llama|hf] [--threads 2]

What a verifier learns from must be what policies get wrong, on every database it trains on. This
step asks a local GGUF chat model for SQL, in the model's own chat template, with the database's
CREATE TABLE statements and the question; `caper sample` (src/commands/sample.ts) drives it and
turns the replies into the predictions layout (the SQL is cut out of each reply by the service's
own extractor, so what a policy wrote is read the way /rerank reads it).

Output: one JSON line per question, appended as each question finishes:
    {"index", "db_id", "question", "policy", "prompt_tokens",
     "samples": [{"k", "seed", "temperature", "top_p", "reply", "tokens", "stop"}]}
"stop" is eos (the model ended its turn), length (--max-new-tokens) or fence (--stop fence: the reply's
first fenced block closed, the SQL read from it final).
Questions are taken round-robin over the databases (the r-th question of every database before
any database's r+1-th), so a --limit spreads over all of them. Every sample draws from its own
generator seeded by (--seed, question index, k) and the samples of a question are decoded
together, the same way in every run, so a run stopped and resumed (--resume) or split into shards
writes the same lines as one run. Sampling (temperature, then nucleus) is done here on the
engine's logits, not by the engine, so both engines sample by the same rule.

Engines: `llama` (llama-cpp-python, built for this CPU by training/setup-sample.sh): the prompt is
decoded once and its cache shared by the N sequences, which are then decoded as one batch per
step. `hf` (transformers, the GGUF dequantized): the same loop on a torch model, for machines
without llama.cpp and for the tests.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sqlite3
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

SYSTEM = ("You are an expert in SQLite. Given a database schema and a question, write one SQLite "
          "query that answers the question. Reply with the query in a ```sql code block.")


# ---------------------------------------------------------------- questions and prompts

def load_split(data: Path) -> list[dict]:
    """The split's questions in file order (train.json, dev.json or questions.json)."""
    for name in ("train.json", "dev.json", "questions.json"):
        p = data / name
        if p.is_file():
            return json.loads(p.read_text())
    raise FileNotFoundError(f"{data} has no train.json, dev.json or questions.json")


def db_file(data: Path, db_id: str) -> Path:
    return data / "database" / db_id / f"{db_id}.sqlite"


def spread_order(questions: list[dict], data: Path) -> list[int]:
    """Question indexes round-robin over the databases (sorted by name), skipping databases the
    split does not ship: every database is reached before any gets a second question."""
    by_db: dict[str, list[int]] = {}
    for i, q in enumerate(questions):
        by_db.setdefault(q["db_id"], []).append(i)
    dbs = [d for d in sorted(by_db) if db_file(data, d).is_file()]
    out = []
    for r in range(max((len(by_db[d]) for d in dbs), default=0)):
        out += [by_db[d][r] for d in dbs if r < len(by_db[d])]
    return out


def schema_ddl(db: Path) -> str:
    """The database's CREATE TABLE statements as SQLite keeps them (what a prompt shows a policy)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND sql IS NOT NULL "
                           "AND name NOT LIKE 'sqlite_%' ORDER BY rowid").fetchall()
    finally:
        con.close()
    return "\n\n".join(r[0].strip().rstrip(";") + ";" for r in rows)


def messages(ddl: str, question: str) -> list[dict]:
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"Database schema:\n{ddl}\n\nQuestion: {question}"}]


def gguf_chat_template(gguf: Path) -> str:
    """The chat template the GGUF carries (tokenizer.chat_template)."""
    from gguf import GGUFReader

    f = GGUFReader(str(gguf)).fields.get("tokenizer.chat_template")
    if f is None:
        raise ValueError(f"{gguf} carries no chat template (tokenizer.chat_template)")
    return bytes(f.parts[f.data[0]]).decode("utf-8")


def render_chat(template: str, msgs: list[dict]) -> str:
    """The template rendered as Hugging Face renders chat templates, with the assistant turn opened."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise ValueError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(messages=msgs, add_generation_prompt=True, tools=None)


def prompt_parts(template: str, ddl: str, question: str) -> tuple[str, str]:
    """The rendered prompt and its part before the question: everything a database's questions share
    (chat header, instructions, schema), which the wave schedule decodes once per database."""
    full = render_chat(template, messages(ddl, question))
    cut = full.rindex(f"\n\nQuestion: {question}") + len("\n\nQuestion:")
    return full, full[:cut]


# ---------------------------------------------------------------- sampling

def sample_seed(seed: int, index: int, k: int) -> int:
    """A sample's own seed: the same for (run seed, question, sample) whatever else the run does."""
    h = hashlib.sha256(f"{seed}:{index}:{k}".encode()).digest()
    return int.from_bytes(h[:8], "little") >> 1


def pick_token(logits: np.ndarray, rng: np.random.Generator, temperature: float, top_p: float) -> int:
    """Temperature, then nucleus (the smallest set of tokens whose probability reaches top_p);
    temperature 0 is greedy."""
    x = np.asarray(logits, dtype=np.float64)
    if temperature <= 0:
        return int(np.argmax(x))
    top = float(x.max())
    p = np.exp((x - top) / temperature)
    mass = float(p.sum(dtype=np.float64))
    # Sorting a whole vocabulary per token would cost more than the model's step on a small policy.
    # The nucleus (the most likely tokens until their mass reaches top_p) lies among the tokens
    # above any cut whose mass already reaches top_p, so only those are sorted; ties break by id,
    # as a stable sort of the whole vocabulary would.
    for gap in (8.0, 16.0, float("inf")):
        idx = np.flatnonzero(x >= top - gap * temperature)
        if float(p[idx].sum(dtype=np.float64)) >= top_p * mass or gap == float("inf"):
            break
    order = idx[np.lexsort((idx, -p[idx]))]
    cum = np.cumsum(p[order], dtype=np.float64) / mass
    keep = order[: int(min(np.searchsorted(cum, top_p), len(order) - 1)) + 1]
    q = p[keep].astype(np.float64)
    q /= q.sum()
    return int(keep[rng.choice(len(keep), p=q)])


@dataclass
class Reply:
    tokens: list[int]
    stop: str  # "eos", "length" or "fence"
    text: bytearray = field(default_factory=bytearray)  # the reply's bytes so far, kept for a Closer


class Closer:
    """Ends a reply as soon as what is cut out of it can no longer change: the SQL is the first
    fenced block (src/core/candidates.ts extractSql), so once a second ``` has been written the
    rest is prose about the query, and decoding it costs time and changes nothing read from it.
    Counted as that extractor reads: the first ``` opens, the next one after it closes."""

    def __init__(self, piece, marker: bytes = b"```", count: int = 2):
        self.piece, self.marker, self.count = piece, marker, count

    def closes(self, r: Reply, tok: int) -> bool:
        r.text += self.piece(tok)
        return r.text.count(self.marker) >= self.count


@dataclass
class WaveJob:
    prompt: list[int]
    rngs: list[np.random.Generator]
    state: bytes | None = None  # the cache of prompt[:prefix_len], from LlamaEngine.prefix_state
    prefix_len: int = 0


class Engine:
    """Decodes N continuations of one prompt together; subclasses supply the model calls."""
    name = "?"

    def tokenize(self, text: str) -> list[int]:
        raise NotImplementedError

    def detokenize(self, ids: list[int]) -> str:
        raise NotImplementedError

    def is_end(self, tok: int) -> bool:
        raise NotImplementedError

    def piece(self, tok: int) -> bytes:
        """The bytes one token writes."""
        raise NotImplementedError

    def start(self, prompt: list[int], n: int) -> np.ndarray:
        """Decodes the prompt once for n sequences; returns the logits after it (vocab,)."""
        raise NotImplementedError

    def step(self, tokens: list[int], seqs: list[int], pos: int) -> np.ndarray:
        """Feeds one token to each of `seqs` at position `pos`; returns their logits (len(seqs), vocab)."""
        raise NotImplementedError

    def finish(self) -> None:
        pass

    def generate(self, prompt: list[int], rngs: list[np.random.Generator], temperature: float, top_p: float,
                 max_new: int, parallel: int = 0, closer: Closer | None = None) -> list[Reply]:
        """N replies, decoded `parallel` at a time (0: all together); each group decodes the prompt once."""
        step = parallel or len(rngs)
        return [r for at in range(0, len(rngs), step)
                for r in self._group(prompt, rngs[at: at + step], temperature, top_p, max_new, closer)]

    def took(self, r: Reply, t: int, max_new: int, closer: Closer | None) -> bool:
        """Adds a sampled token to a reply; whether the reply goes on."""
        if self.is_end(t):
            r.stop = "eos"
            return False
        r.tokens.append(t)
        if closer is not None and closer.closes(r, t):
            r.stop = "fence"
            return False
        return len(r.tokens) < max_new

    def _group(self, prompt: list[int], rngs: list[np.random.Generator], temperature: float, top_p: float,
               max_new: int, closer: Closer | None = None) -> list[Reply]:
        n = len(rngs)
        first = self.start(prompt, n)
        out = [Reply([], "length") for _ in range(n)]
        live = [s for s in range(n) if self.took(out[s], pick_token(first, rngs[s], temperature, top_p), max_new, closer)]
        pos = len(prompt)
        while live:
            logits = self.step([out[s].tokens[-1] for s in live], live, pos)
            pos += 1
            live = [s for row, s in enumerate(live)
                    if self.took(out[s], pick_token(logits[row], rngs[s], temperature, top_p), max_new, closer)]
        self.finish()
        return out


class LlamaEngine(Engine):
    """llama.cpp through llama-cpp-python's C API: one context, the prompt in sequence 0 shared
    with sequences 1..n-1 by reference (no copy of its cache), then one batch per step."""
    name = "llama"

    def __init__(self, gguf: Path, threads: int, n_ctx: int = 8192, n_batch: int = 512, flash: bool = False):
        import llama_cpp as L

        self.L = L
        # llama.cpp reports every tensor it loads on stderr; the run's own progress lines are what
        # a user reads there. The callback is kept on the engine so it outlives the C side's use.
        self._quiet = L.llama_log_callback(lambda level, text, data: None)
        L.llama_log_set(self._quiet, None)
        L.llama_backend_init()
        mp = L.llama_model_default_params()
        self.model = L.llama_model_load_from_file(str(gguf).encode(), mp)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {gguf}")
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)
        cp = L.llama_context_default_params()
        cp.n_ctx = n_ctx
        cp.n_batch = n_batch
        cp.n_ubatch = n_batch
        cp.n_seq_max = 64
        # One cache for all sequences: a prompt's cells are shared by reference, and a sequence
        # may use as many cells as it needs (split per sequence, a long schema would not fit).
        cp.kv_unified = True
        # The wave schedule keeps several questions' cells in the cache at once; without flash
        # attention every token would pay for the cells of the others, masked.
        if flash:
            cp.flash_attn_type = 1
        cp.n_threads = threads
        cp.n_threads_batch = threads
        self.ctx = L.llama_init_from_model(self.model, cp)
        if not self.ctx:
            raise RuntimeError("llama.cpp could not create a context")
        self.n_batch = n_batch
        self.batch = L.llama_batch_init(max(n_batch, 64), 0, 64)
        # where a run's time goes (the run's --stats): schemas decoded, prompts entered, steps
        self.timing = {"schema_s": 0.0, "enter_s": 0.0, "step_s": 0.0, "steps": 0, "stepped": 0}
        self.mem = L.llama_get_memory(self.ctx)

    def tokenize(self, text: str) -> list[int]:
        L = self.L
        raw = text.encode("utf-8")
        buf = (L.llama_token * (len(raw) + 16))()
        n = L.llama_tokenize(self.vocab, raw, len(raw), buf, len(buf), False, True)
        if n < 0:
            raise RuntimeError("tokenization overflow")
        return list(buf[:n])

    def detokenize(self, ids: list[int]) -> str:
        return b"".join(self.piece(t) for t in ids).decode("utf-8", errors="replace")

    def is_end(self, tok: int) -> bool:
        return bool(self.L.llama_vocab_is_eog(self.vocab, tok))

    def piece(self, tok: int) -> bytes:
        import ctypes

        buf = ctypes.create_string_buffer(256)
        n = self.L.llama_token_to_piece(self.vocab, tok, buf, len(buf), 0, False)
        return buf.raw[: max(n, 0)]

    def _fill(self, items: list[tuple[int, int, list[int], bool]]) -> None:
        b = self.batch
        b.n_tokens = len(items)
        for i, (tok, pos, seqs, logits) in enumerate(items):
            b.token[i] = tok
            b.pos[i] = pos
            b.n_seq_id[i] = len(seqs)
            for j, s in enumerate(seqs):
                b.seq_id[i][j] = s
            b.logits[i] = logits

    def _decode(self) -> None:
        rc = self.L.llama_decode(self.ctx, self.batch)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")

    def _logits(self, i: int) -> np.ndarray:
        p = self.L.llama_get_logits_ith(self.ctx, i)
        return np.ctypeslib.as_array(p, shape=(self.n_vocab,)).copy()

    def start(self, prompt: list[int], n: int) -> np.ndarray:
        self.L.llama_memory_clear(self.mem, True)
        # Every sequence reads the prompt's cells: one copy of its keys and values.
        return self._feed(prompt, 0, list(range(n)))

    def step(self, tokens: list[int], seqs: list[int], pos: int) -> np.ndarray:
        self._fill([(t, pos, [s], True) for t, s in zip(tokens, seqs)])
        self._decode()
        return np.stack([self._logits(i) for i in range(len(seqs))])

    # ------------------------------------------------------------ the wave schedule

    def _feed(self, tokens: list[int], at: int, seqs: list[int]) -> np.ndarray:
        """Decodes tokens from position `at` into every one of `seqs`, in n_batch chunks; the logits
        after the last one."""
        for c in range(0, len(tokens), self.n_batch):
            chunk = tokens[c: c + self.n_batch]
            last = c + len(chunk) == len(tokens)
            self._fill([(t, at + c + j, seqs, last and j == len(chunk) - 1) for j, t in enumerate(chunk)])
            self._decode()
        return self._logits(len(chunk) - 1)

    def prefix_state(self, prefix: list[int]) -> bytes:
        """The keys and values of a prompt's shared part, decoded alone in an empty cache: the same
        bytes whenever and wherever a run computes them, so a question's samples do not depend on
        which question first needed its database."""
        import ctypes

        L = self.L
        t0 = time.time()
        L.llama_memory_clear(self.mem, True)
        self._feed(prefix, 0, [0])
        size = L.llama_state_seq_get_size(self.ctx, 0)
        buf = (ctypes.c_uint8 * size)()
        got = L.llama_state_seq_get_data(self.ctx, buf, size, 0)
        L.llama_memory_clear(self.mem, True)
        self.timing["schema_s"] += time.time() - t0
        return bytes(buf[:got])

    def _admit(self, job: "WaveJob", seqs: list[int]) -> np.ndarray:
        """Puts a question's prompt into `seqs` (its shared part restored, the rest decoded once for
        all of them); the logits after the prompt."""
        import ctypes

        L = self.L
        at = 0
        if job.state is not None:
            buf = (ctypes.c_uint8 * len(job.state)).from_buffer_copy(job.state)
            if L.llama_state_seq_set_data(self.ctx, buf, len(job.state), seqs[0]) == 0:
                raise RuntimeError("llama.cpp found no room to restore a schema's cache: raise --context")
            for s in seqs[1:]:
                L.llama_memory_seq_cp(self.mem, seqs[0], s, -1, -1)
            at = job.prefix_len
        return self._feed(job.prompt[at:], at, seqs)

    def generate_wave(self, jobs: list["WaveJob"], temperature: float, top_p: float, max_new: int,
                      slots: int, closer: Closer | None = None) -> list[list[Reply]]:
        """Every job's replies, decoded as one stream of batches: a question enters as soon as
        `slots` leaves room for all its samples and each sample leaves the batch when it ends, so
        the batch stays full instead of shrinking to a question's longest sample. The cache starts
        empty and the order of entry is fixed by the wave, so a wave gives the same replies in
        every run."""
        L = self.L
        L.llama_memory_clear(self.mem, True)
        out = [[Reply([], "length") for _ in j.rngs] for j in jobs]
        free = list(range(slots))
        live: dict[int, tuple[int, int, int]] = {}  # sequence -> (job, sample, position of its next token)
        nxt = 0

        def take(s: int, ji: int, k: int, logits: np.ndarray, pos: int) -> None:
            if self.took(out[ji][k], pick_token(logits, jobs[ji].rngs[k], temperature, top_p), max_new, closer):
                live[s] = (ji, k, pos)
                return
            L.llama_memory_seq_rm(self.mem, s, -1, -1)
            free.append(s)
            free.sort()

        while nxt < len(jobs) or live:
            while nxt < len(jobs) and len(free) >= len(jobs[nxt].rngs):
                n = len(jobs[nxt].rngs)
                seqs, free[:] = free[:n], free[n:]
                t0 = time.time()
                first = self._admit(jobs[nxt], seqs)
                self.timing["enter_s"] += time.time() - t0
                for k, s in enumerate(seqs):
                    take(s, nxt, k, first, len(jobs[nxt].prompt))
                nxt += 1
            if not live:
                continue
            order = sorted(live)
            t0 = time.time()
            self._fill([(out[live[s][0]][live[s][1]].tokens[-1], live[s][2], [s], True) for s in order])
            self._decode()
            for row, s in enumerate(order):
                ji, k, pos = live.pop(s)
                take(s, ji, k, self._logits(row), pos + 1)
            self.timing["step_s"] += time.time() - t0
            self.timing["steps"] += 1
            self.timing["stepped"] += len(order)
        return out


class HfEngine(Engine):
    """transformers on the GGUF (dequantized): the prompt once, its cache repeated for n rows."""
    name = "hf"

    def __init__(self, gguf: Path, threads: int):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.set_num_threads(threads)
        self.torch = torch
        kw = {"gguf_file": Path(gguf).name}
        self.tok = AutoTokenizer.from_pretrained(str(Path(gguf).parent), **kw)
        self.model = AutoModelForCausalLM.from_pretrained(str(Path(gguf).parent), dtype=torch.float32, **kw).eval()
        ends = {self.tok.eos_token_id}
        for name in ("<|im_end|>", "<|endoftext|>"):
            t = self.tok.convert_tokens_to_ids(name)
            if isinstance(t, int) and t != self.tok.unk_token_id:
                ends.add(t)
        self.ends = {t for t in ends if t is not None}
        self.cache = None

    def tokenize(self, text: str) -> list[int]:
        return self.tok(text, add_special_tokens=False)["input_ids"]

    def detokenize(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=False)

    def is_end(self, tok: int) -> bool:
        return tok in self.ends

    def piece(self, tok: int) -> bytes:
        return self.tok.convert_tokens_to_string([self.tok.convert_ids_to_tokens(tok)]).encode("utf-8", errors="replace")

    def start(self, prompt: list[int], n: int) -> np.ndarray:
        torch = self.torch
        with torch.no_grad():
            out = self.model(torch.tensor([prompt]), use_cache=True)
        self.cache = out.cache
        self.cache.batch_repeat_interleave(n)
        self.rows = list(range(n))
        return out.logits[0, -1].float().numpy()

    def step(self, tokens: list[int], seqs: list[int], pos: int) -> np.ndarray:
        torch = self.torch
        if seqs != self.rows:
            # finished sequences leave the batch, as in the llama engine
            keep = torch.tensor([self.rows.index(s) for s in seqs])
            self.cache.batch_select_indices(keep)
            self.rows = list(seqs)
        with torch.no_grad():
            out = self.model(torch.tensor(tokens)[:, None], cache=self.cache, use_cache=True,
                             position_ids=torch.full((len(tokens), 1), pos))
        self.cache = out.cache
        return out.logits[:, -1].float().numpy()

    def finish(self) -> None:
        self.cache = None


def make_engine(name: str, gguf: Path, threads: int, context: int = 8192, flash: bool = False) -> Engine:
    if name == "llama":
        return LlamaEngine(gguf, threads, n_ctx=context, flash=flash)
    if name == "hf":
        return HfEngine(gguf, threads)
    raise ValueError(f"unknown engine {name}")


# ---------------------------------------------------------------- the run

def parse_shard(s: str | None) -> tuple[int, int]:
    if not s:
        return 0, 1
    try:
        k, n = (int(x) for x in s.split("/"))
    except ValueError:
        raise SystemExit(f"--shard takes K/N, got {s!r}") from None
    if not 0 <= k < n:
        raise SystemExit(f"--shard K/N needs 0 <= K < N, got {s!r}")
    return k, n


def done_indexes(out: Path) -> set[int]:
    """Questions already in the output; a torn last line (a run killed mid-write) is cut off."""
    if not out.exists():
        return set()
    data = out.read_bytes()
    end = data.rfind(b"\n") + 1
    if end != len(data):
        with open(out, "r+b") as f:
            f.truncate(end)
    return {json.loads(line)["index"] for line in data[:end].splitlines() if line.strip()}


def waves_of(order: list[int], size: int) -> list[list[int]]:
    """The spread order cut into waves of `size` questions (size 1: one question at a time)."""
    return [order[at: at + size] for at in range(0, len(order), size)]


class HeadStore:
    """Each database's prompt head, decoded once, kept on disk across runs: a stopped run resumed, or
    another shard on the same machine, restores it instead of decoding every schema again. The file
    is keyed by the policy's bytes, the cache layout (flash attention stores values another way) and
    the head's tokens, and holds a digest of its payload, so a torn or foreign file is decoded anew,
    never restored. The bytes restored are the ones the decoding wrote, so runs stay the same."""

    MAGIC = b"CAPERHD1"

    def __init__(self, root: Path, gguf: Path, layout: str):
        self.root = root
        h = hashlib.sha256()
        with open(gguf, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 22), b""):
                h.update(chunk)
        self.key = f"{h.hexdigest()}/{layout}".encode()
        self.loaded = self.written = 0

    def _path(self, head: list[int]) -> Path:
        h = hashlib.sha256(self.key)
        h.update(np.asarray(head, dtype="<i4").tobytes())
        return self.root / f"{h.hexdigest()[:40]}.state"

    def get(self, head: list[int]) -> bytes | None:
        try:
            raw = self._path(head).read_bytes()
        except OSError:
            return None
        n = len(self.MAGIC)
        if raw[:n] != self.MAGIC or hashlib.sha256(raw[n + 32:]).digest() != raw[n:n + 32]:
            return None
        self.loaded += 1
        return raw[n + 32:]

    def put(self, head: list[int], state: bytes) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        path = self._path(head)
        # written aside then renamed, so a shard reading it meanwhile sees all of it or none
        tmp = path.with_suffix(f".{time.time_ns()}.tmp")
        tmp.write_bytes(self.MAGIC + hashlib.sha256(state).digest() + state)
        tmp.replace(path)
        self.written += 1


def run(a) -> int:
    data = Path(a.data)
    questions = load_split(data)
    order = spread_order(questions, data)
    if a.limit:
        order = order[: a.limit]
    k, n = parse_shard(a.shard)
    # A wave is decoded as one stream of batches, so its questions' samples depend on which
    # questions share it: shards take whole waves and a resumed run redoes a wave it had not
    # finished, so that every split of the work writes the lines one run writes.
    size = a.wave if a.schedule == "wave" else 1
    waves = waves_of(order, size)[k::n]
    mine = [qi for w in waves for qi in w]
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists() and not a.resume:
        raise SystemExit(f"{out} exists: --resume continues it (or remove it)")
    # What a shard holds and how it was made: `caper sample --merge` checks every part is complete
    # and that all were made alike before joining them.
    meta = {"policy": a.policy, "data": str(data), "gguf": Path(a.gguf).name, "engine": a.engine, "n": a.n,
            "parallel": a.parallel, "temperature": a.temperature, "top_p": a.top_p, "seed": a.seed,
            "max_new_tokens": a.max_new_tokens, "limit": a.limit, "shard": [k, n], "questions": len(mine),
            "schedule": a.schedule, "wave": size, "slots": a.slots if a.schedule == "wave" else 0}
    # Files begun before the wave schedule existed were made one question at a time, and those begun
    # before replies ended at their closed fence decoded them to the end.
    before = {"schedule": "question", "wave": 1, "slots": 0, "stop": "eos"}
    meta_path = Path(str(out) + ".meta.json")
    was = json.loads(meta_path.read_text()) if a.resume and meta_path.exists() else None
    # A resumed file goes on ending its replies as it began; a new one ends them at the closed fence.
    meta["stop"] = a.stop or (was.get("stop", before["stop"]) if was is not None else "fence")
    if was is not None:
        # Samples depend on every setting (the decoding groups included): a file is only ever
        # continued the way it was begun.
        changed = sorted(x for x in meta if x != "data" and was.get(x, before.get(x)) != meta[x])
        if changed:
            raise SystemExit(f"--resume: {out} was begun with other settings ({', '.join(f'{x} {was.get(x, before.get(x))!r} -> {meta[x]!r}' for x in changed)})")
    meta_path.write_text(json.dumps(meta, indent=1) + "\n")
    done = done_indexes(out) if a.resume else set()
    todo = [w for w in waves if any(qi not in done for qi in w)]
    left_q = sum(len(w) for w in todo)
    print(f"sample: {a.policy} ({a.engine}, {a.schedule} schedule) on {data}: {len(mine)} questions"
          f"{f' (shard {k}/{n} of {len(order)})' if n > 1 else ''}, {len(mine) - left_q} already done, "
          f"{a.n} samples each, temperature {a.temperature}, top-p {a.top_p}, seed {a.seed}", file=sys.stderr)
    if not todo:
        return 0
    gguf = Path(a.gguf)
    template = gguf_chat_template(gguf)
    engine = make_engine(a.engine, gguf, a.threads, *((a.context, True) if a.schedule == "wave" else (8192, False)))
    # The engine's cache layout: the wave schedule runs llama.cpp with flash attention and f16 keys
    # and values, and the state's format is the library's.
    store = HeadStore(Path(a.head_cache) if a.head_cache else out.parent / "heads", gguf,
                      f"llama-{engine.L.__version__}-fa-f16") if a.schedule == "wave" and a.head_cache != "none" else None
    closer = Closer(engine.piece) if meta["stop"] == "fence" else None
    ddl_of: dict[str, str] = {}
    states: dict[str, tuple[list[int], bytes | None]] = {}  # database -> its prompts' shared part and its cache
    t0 = time.time()
    gen_tokens = prompt_tokens = done_now = 0
    with open(out, "a") as fh:
        for j, wave in enumerate(todo):
            if a.max_minutes and time.time() - t0 > a.max_minutes * 60:
                print(f"sample: --max-minutes {a.max_minutes} reached after {done_now} questions; --resume continues", file=sys.stderr)
                break
            jobs, seeds_of = [], []
            for qi in wave:
                q = questions[qi]
                if q["db_id"] not in ddl_of:
                    ddl_of[q["db_id"]] = schema_ddl(db_file(data, q["db_id"]))
                full, shared = prompt_parts(template, ddl_of[q["db_id"]], q["question"])
                prompt = engine.tokenize(full)
                seeds = [sample_seed(a.seed, qi, s) for s in range(a.n)]
                seeds_of.append(seeds)
                jobs.append(WaveJob(prompt, [np.random.default_rng(x) for x in seeds]))
                if a.schedule != "wave":
                    continue
                # A database's shared part is the same text for all its questions: tokenized once,
                # decoded the first time one of its questions can use it (its tokens begin that
                # question's tokens).
                if q["db_id"] not in states:
                    states[q["db_id"]] = (engine.tokenize(shared), None)
                head, state = states[q["db_id"]]
                if len(head) < len(prompt) and prompt[: len(head)] == head:
                    if state is None:
                        state = store.get(head) if store else None
                        if state is None:
                            state = engine.prefix_state(head)
                            prompt_tokens += len(head)
                            if store:
                                store.put(head, state)
                        states[q["db_id"]] = (head, state)
                    jobs[-1].state, jobs[-1].prefix_len = state, len(head)
            if a.schedule == "wave":
                replies = engine.generate_wave(jobs, a.temperature, a.top_p, a.max_new_tokens, a.slots, closer)
                prompt_tokens += sum(len(jb.prompt) - jb.prefix_len for jb in jobs)
            else:
                replies = [engine.generate(jb.prompt, jb.rngs, a.temperature, a.top_p, a.max_new_tokens, a.parallel, closer)
                           for jb in jobs]
                prompt_tokens += sum(len(jb.prompt) * -(-a.n // (a.parallel or a.n)) for jb in jobs)
            for qi, jb, seeds, reps in zip(wave, jobs, seeds_of, replies):
                gen_tokens += sum(len(r.tokens) for r in reps)
                if qi in done:
                    continue  # a wave begun before: its lines come out the same again
                q = questions[qi]
                rec = {"index": qi, "db_id": q["db_id"], "question": q["question"], "policy": a.policy,
                       "prompt_tokens": len(jb.prompt),
                       "samples": [{"k": s, "seed": seeds[s], "temperature": a.temperature, "top_p": a.top_p,
                                    "reply": engine.detokenize(r.tokens), "tokens": len(r.tokens), "stop": r.stop}
                                   for s, r in enumerate(reps)]}
                fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
            fh.flush()
            done_now += len(wave)
            secs = time.time() - t0
            left = sum(len(w) for w in todo[j + 1:])
            if (j + 1) * size % a.progress_every < size or left == 0:
                print(f"  {done_now}/{left_q} questions, {done_now / secs:.3f} q/s, {gen_tokens / secs:.1f} generated tokens/s, "
                      f"eta {left * secs / done_now / 60:.1f} min", file=sys.stderr)
    secs = time.time() - t0
    stats = {"engine": a.engine, "policy": a.policy, "schedule": a.schedule, "wave": size,
             "slots": a.slots if a.schedule == "wave" else 0, "parallel": a.parallel or a.n, "n": a.n, "threads": a.threads,
             "stop": meta["stop"], "questions": done_now, "generated_tokens": gen_tokens, "prompt_tokens_decoded": prompt_tokens,
             "seconds": round(secs, 2), "generated_tokens_per_s": round(gen_tokens / max(secs, 1e-9), 2),
             "questions_per_hour": round(3600 * done_now / max(secs, 1e-9), 1),
             **{k: round(v, 2) for k, v in getattr(engine, "timing", {}).items()},
             **({"heads_loaded": store.loaded, "heads_written": store.written} if store else {})}
    print(f"sample: {done_now} questions, {gen_tokens} generated tokens in {secs:.0f} s: "
          f"{stats['generated_tokens_per_s']} generated tokens/s, {stats['questions_per_hour']} questions/hour", file=sys.stderr)
    if a.stats:
        Path(a.stats).write_text(json.dumps(stats) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="Spider-layout split: its questions file and database/<db>/<db>.sqlite")
    ap.add_argument("--gguf", required=True, help="the policy: a GGUF chat model with its chat template")
    ap.add_argument("--policy", required=True, help="its name in the output (predictions/<policy>-s<k>.sql)")
    ap.add_argument("--out", required=True, help="samples JSONL, one line per question")
    ap.add_argument("--n", type=int, default=8, help="samples per question")
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--top-p", type=float, default=0.95)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-new-tokens", type=int, default=200)
    ap.add_argument("--stop", choices=["fence", "eos"], default=None,
                    help="fence (a new file's default): a reply ends once its first ```-fenced block is closed, where "
                         "what is read from it can no longer change; eos: at the model's end of turn. A resumed file "
                         "keeps the way it began")
    ap.add_argument("--limit", type=int, default=0, help="the first N questions of the spread order (0: all)")
    ap.add_argument("--shard", help="K/N: every N-th question of the spread order from the K-th")
    ap.add_argument("--resume", action="store_true", help="continue an output file, skipping its questions")
    ap.add_argument("--max-minutes", type=float, default=0, help="stop after this long (resumable)")
    ap.add_argument("--engine", choices=["llama", "hf"], default="llama")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--schedule", choices=["wave", "question"], default=None,
                    help="wave (llama only, its default): --wave questions decoded as one stream of batches of up to "
                         "--slots samples, each database's schema decoded once; question: one question's samples at a time")
    ap.add_argument("--wave", type=int, default=32, help="questions per wave")
    ap.add_argument("--slots", type=int, default=32, help="samples decoded together in a wave")
    ap.add_argument("--context", type=int, default=16384, help="cache cells for a wave's live questions and samples together")
    ap.add_argument("--head-cache", help="wave schedule: where each database's decoded prompt head is kept across runs "
                    "(default: heads/ beside --out; none: decode them every run)")
    ap.add_argument("--parallel", type=int, default=0, help="question schedule: samples decoded together (0: all N of a question; 1: one at a time)")
    ap.add_argument("--stats", help="write the run's throughput here (JSON)")
    ap.add_argument("--progress-every", type=int, default=10)
    a = ap.parse_args(argv)
    if a.n < 1 or a.n > 64:
        raise SystemExit("--n must be between 1 and 64")
    if a.parallel < 0:
        raise SystemExit("--parallel must be >= 0")
    if a.schedule is None:
        a.schedule = "wave" if a.engine == "llama" and a.parallel == 0 else "question"
    if a.schedule == "wave":
        if a.engine != "llama":
            raise SystemExit("--schedule wave needs --engine llama (it shares the cache between sequences)")
        if a.parallel:
            raise SystemExit("--parallel is the question schedule's: the wave schedule takes --slots")
        if a.wave < 1:
            raise SystemExit("--wave must be >= 1")
        if not a.n <= a.slots <= 64:
            raise SystemExit("--slots must hold one question's --n samples and be at most 64")
    if not 0 < a.top_p <= 1:
        raise SystemExit("--top-p must be in (0, 1]")
    return run(a)


if __name__ == "__main__":
    raise SystemExit(main())
