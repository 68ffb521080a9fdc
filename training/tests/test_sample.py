"""caper_train.data.sample on a tiny chat GGUF the test writes: the prompt in the model's own template, the
spread of questions over databases, the sampling rule, and runs that write the same file whether
they go through at once, are stopped and resumed, or are split into shards. The `hf` engine runs
everywhere the training environment does; the `llama` engine where llama-cpp-python is installed
(training/setup-sample.sh)."""
import json
import sqlite3

import numpy as np
import pytest

from caper_train.data import sample
from fixtures.tiny_gguf import CHAT_TEMPLATE, write_tiny_qwen2_gguf

DBS = {
    "shop": "CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, country TEXT);"
            "CREATE TABLE concert (concert_id INTEGER PRIMARY KEY, singer_id INTEGER REFERENCES singer(singer_id));",
    "zoo": "CREATE TABLE animal (id INTEGER PRIMARY KEY, kind TEXT);",
    "gone": "CREATE TABLE t (a INTEGER);",
}


def make_split(root):
    for db, ddl in DBS.items():
        if db == "gone":
            continue  # a database the split names but does not ship (as Spider train's baseball_1)
        d = root / "database" / db
        d.mkdir(parents=True)
        con = sqlite3.connect(d / f"{db}.sqlite")
        con.executescript(ddl)
        con.close()
    qs = [{"db_id": db, "question": f"Question {i} about {db}?", "query": "SELECT 1"}
          for i, db in enumerate(["shop", "shop", "zoo", "gone", "shop", "zoo", "zoo"])]
    (root / "train.json").write_text(json.dumps(qs))
    return qs


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    pytest.importorskip("gguf")
    d = tmp_path_factory.mktemp("gguf")
    write_tiny_qwen2_gguf(d / "tiny.gguf", chat=True, context=1024)
    return d / "tiny.gguf"


def test_questions_go_round_robin_over_the_databases_it_ships(tmp_path):
    qs = make_split(tmp_path)
    order = sample.spread_order(qs, tmp_path)
    assert order == [0, 2, 1, 5, 4, 6], "shop and zoo alternate; gone has no database file"


def test_the_schema_is_the_databases_own_create_table_statements(tmp_path):
    make_split(tmp_path)
    ddl = sample.schema_ddl(sample.db_file(tmp_path, "shop"))
    assert ddl.startswith("CREATE TABLE singer (singer_id INTEGER PRIMARY KEY")
    assert "CREATE TABLE concert" in ddl and ddl.count(";") == 2


def test_the_prompt_is_the_models_own_chat_template(tiny):
    assert sample.gguf_chat_template(tiny) == CHAT_TEMPLATE
    text = sample.render_chat(CHAT_TEMPLATE, sample.messages("CREATE TABLE t (a);", "How many?"))
    assert text.startswith("<|im_start|>system\nYou are an expert in SQLite.")
    assert "<|im_start|>user\nDatabase schema:\nCREATE TABLE t (a);\n\nQuestion: How many?<|im_end|>" in text
    assert text.endswith("<|im_start|>assistant\n")


def full_sort_pick(logits, rng, t, top_p):
    x = (logits - logits.max()) / t
    p = np.exp(x)
    p /= p.sum()
    order = np.argsort(-p, kind="stable")
    keep = order[: int(np.searchsorted(np.cumsum(p[order]), top_p) + 1)]
    return int(keep[rng.choice(len(keep), p=p[keep] / p[keep].sum())])


def test_sampling_is_the_nucleus_rule_and_depends_only_on_the_seed():
    rng = np.random.default_rng(1)
    for scale in (0.5, 3.0, 12.0):
        logits = (rng.normal(size=5000) * scale).astype(np.float32)
        got = [sample.pick_token(logits, np.random.default_rng(s), 0.8, 0.9) for s in range(200)]
        want = [full_sort_pick(logits.astype(np.float64), np.random.default_rng(s), 0.8, 0.9) for s in range(200)]
        assert got == want, scale
    logits = np.array([0.0, 5.0, 4.9], dtype=np.float32)
    assert sample.pick_token(logits, np.random.default_rng(0), 0.0, 0.95) == 1, "temperature 0 is greedy"
    assert {sample.pick_token(logits, np.random.default_rng(s), 1.0, 1e-6) for s in range(50)} == {1}
    assert sample.sample_seed(0, 12, 3) == sample.sample_seed(0, 12, 3) != sample.sample_seed(0, 12, 4)


def run(tmp_path, tiny, out, *extra, engine="hf"):
    return sample.main(["--data", str(tmp_path), "--gguf", str(tiny), "--policy", "tiny", "--out", str(out),
                        "--n", "3", "--max-new-tokens", "8", "--engine", engine, "--threads", "1", *extra])


SCHEDULES = {"hf": ("hf", []), "llama-question": ("llama", ["--schedule", "question"]),
             # waves of two questions, and room for one question's samples and part of another's, so
             # questions enter while others are still decoding
             "llama-wave": ("llama", ["--wave", "2", "--slots", "5"])}


@pytest.mark.parametrize("schedule", list(SCHEDULES))
def test_one_run_a_resumed_run_and_shards_write_the_same_lines(tmp_path, tiny, schedule):
    engine, how = SCHEDULES[schedule]
    if engine == "llama":
        pytest.importorskip("llama_cpp")
    make_split(tmp_path)
    one = tmp_path / "one.jsonl"
    assert run(tmp_path, tiny, one, *how, engine=engine) == 0
    lines = one.read_text().splitlines()
    recs = [json.loads(x) for x in lines]
    assert [r["index"] for r in recs] == [0, 2, 1, 5, 4, 6]
    for r in recs:
        assert [s["k"] for s in r["samples"]] == [0, 1, 2]
        assert all(s["tokens"] <= 8 and s["stop"] in ("eos", "length") for s in r["samples"])
        assert len({s["seed"] for s in r["samples"]}) == 3
    meta = json.loads((tmp_path / "one.jsonl.meta.json").read_text())
    assert meta["questions"] == 6
    # A run killed mid-write: two whole lines and half of the third; --resume cuts the torn line off
    # (and redoes the wave the torn line belongs to).
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(lines[:2]) + "\n" + lines[2][: len(lines[2]) // 2])
    assert run(tmp_path, tiny, cut, "--resume", *how, engine=engine) == 0
    assert cut.read_text() == one.read_text()
    # Shards take whole waves (a question at a time: single questions), every other one.
    w = meta["wave"]
    waves = [lines[at: at + w] for at in range(0, len(lines), w)]
    for k in range(2):
        part = tmp_path / f"tiny.shard-{k}-of-2.jsonl"
        assert run(tmp_path, tiny, part, "--shard", f"{k}/2", *how, engine=engine) == 0
        assert part.read_text().splitlines() == [x for wave in waves[k::2] for x in wave]
    # A file is continued only the way it was begun.
    other = ["--parallel", "1", "--schedule", "question"] if engine == "hf" or "question" in how else ["--wave", "3", "--slots", "5"]
    with pytest.raises(SystemExit, match="other settings .*(parallel|wave)"):
        run(tmp_path, tiny, one, "--resume", *other, engine=engine)
    # An existing output is never appended to without --resume.
    with pytest.raises(SystemExit, match="--resume"):
        run(tmp_path, tiny, one, *how, engine=engine)


def test_a_schemas_restored_cache_continues_as_the_whole_prompt_does(tiny):
    """The wave schedule decodes a database's shared prompt part once and restores it for each of
    its questions: what the model sees after the restore is what it sees after the whole prompt."""
    pytest.importorskip("llama_cpp")
    eng = sample.LlamaEngine(tiny, 1, n_ctx=4096)
    tmpl = sample.gguf_chat_template(tiny)
    full, shared = sample.prompt_parts(tmpl, "CREATE TABLE t (a INTEGER);", "How many rows?")
    prompt, head = eng.tokenize(full), eng.tokenize(shared)
    assert full.startswith(shared) and prompt[: len(head)] == head and len(head) < len(prompt)
    whole = eng.start(prompt, 1)
    state = eng.prefix_state(head)
    assert state == eng.prefix_state(head), "the shared part's cache is the same bytes each time"
    eng.L.llama_memory_clear(eng.mem, True)
    restored = eng._admit(sample.WaveJob(prompt, [], state, len(head)), [3, 5])
    # The cache is f16 and llama.cpp's kernels differ with the batch's size, so the two agree to a
    # tolerance; the prompt without its restored part misses it by several times this.
    np.testing.assert_allclose(restored, whole, rtol=0, atol=0.02 * float(np.abs(whole).max()))
    # Greedy replies of the wave schedule are the question schedule's.
    rng = [np.random.default_rng(0)]
    by_question = eng.generate(prompt, rng, 0.0, 1.0, 6)
    by_wave = eng.generate_wave([sample.WaveJob(prompt, [np.random.default_rng(0)], state, len(head))], 0.0, 1.0, 6, 4)
    assert [r.tokens for r in by_wave[0]] == [r.tokens for r in by_question]


def test_schema_heads_kept_on_disk_are_restored_by_the_next_run(tmp_path, tiny):
    """A resumed run restores the heads an earlier run decoded instead of decoding them again, and
    writes what a run without the store writes; a damaged file is decoded anew."""
    pytest.importorskip("llama_cpp")
    make_split(tmp_path)
    how = ["--wave", "2", "--slots", "5"]
    plain = tmp_path / "plain.jsonl"
    assert run(tmp_path, tiny, plain, *how, "--head-cache", "none", engine="llama") == 0
    assert not (tmp_path / "heads").exists()
    stats = []
    for name in ("first", "second"):
        st = tmp_path / f"{name}.stats.json"
        assert run(tmp_path, tiny, tmp_path / f"{name}.jsonl", *how, "--stats", str(st), engine="llama") == 0
        stats.append(json.loads(st.read_text()))
        assert (tmp_path / f"{name}.jsonl").read_text() == plain.read_text()
    files = sorted((tmp_path / "heads").glob("*.state"))
    assert len(files) == 2, "one head for each database with questions that can use one (shop, zoo)"
    assert (stats[0]["heads_written"], stats[0]["heads_loaded"]) == (2, 0)
    assert (stats[1]["heads_written"], stats[1]["heads_loaded"]) == (0, 2)
    # A torn file: its digest no longer holds, so the head is decoded and written again.
    files[0].write_bytes(files[0].read_bytes()[:-7])
    st = tmp_path / "third.stats.json"
    assert run(tmp_path, tiny, tmp_path / "third.jsonl", *how, "--stats", str(st), engine="llama") == 0
    third = json.loads(st.read_text())
    assert (third["heads_written"], third["heads_loaded"]) == (1, 1)
    assert (tmp_path / "third.jsonl").read_text() == plain.read_text()


def test_bad_arguments_are_refused(tmp_path, tiny):
    make_split(tmp_path)
    for bad, why in ((["--shard", "2/2"], "0 <= K < N"), (["--shard", "x"], "K/N"), (["--n", "0"], "--n"), (["--top-p", "0"], "--top-p"),
                     (["--schedule", "wave"], "needs --engine llama"),
                     (["--engine", "llama", "--slots", "2"], "--slots must hold"),
                     (["--engine", "llama", "--schedule", "wave", "--parallel", "2"], "--parallel is the question schedule's")):
        with pytest.raises(SystemExit, match=why):
            run(tmp_path, tiny, tmp_path / "x.jsonl", *bad)


def test_a_reply_is_closed_where_the_extractor_would_stop_reading():
    """The SQL is the first fenced block; the second ``` ends it, however the tokens split the backticks."""
    r = sample.Reply([], "length")
    pieces = [b"Here", b" is:\n", b"``", b"`sql\nSELECT", b" 1\n", b"``", b"`\n\nThis", b" query"]
    closer = sample.Closer(lambda t: pieces[t])
    assert [closer.closes(r, t) for t in range(7)] == [False] * 6 + [True]
    # four backticks open the block once, as the extractor's first match does
    r = sample.Reply([], "length")
    assert [closer.closes(r, t) for t in range(3)] == [False] * 3
    r = sample.Reply([], "length")
    assert not closer.closes(r, 0) and not sample.Closer(lambda t: b"````").closes(r, 0)


def cut_at(reply, piece, marker, count):
    """The reply's tokens up to the one that completes the marker's count-th occurrence (None: never)."""
    text = b""
    for i, t in enumerate(reply.tokens):
        text += piece(t)
        if text.count(marker) >= count:
            return reply.tokens[: i + 1]
    return None


@pytest.mark.parametrize("schedule", list(SCHEDULES))
def test_closed_replies_are_the_whole_replies_cut_where_they_close(tiny, schedule):
    """With a Closer, each reply is the reply decoded without one, ended at the token that closes it:
    the other samples of the batch go on as they would have. The random tiny model never writes a
    fence, so the rule is checked with the byte it writes in most replies, closing at its first."""
    engine_name, how = SCHEDULES[schedule]
    if engine_name == "llama":
        pytest.importorskip("llama_cpp")
    eng = sample.make_engine(engine_name, tiny, 1, 4096, schedule == "llama-wave")
    tmpl = sample.gguf_chat_template(tiny)
    prompts = [eng.tokenize(sample.prompt_parts(tmpl, DBS["shop"], f"Question {i}?")[0]) for i in range(3)]

    def decode(closer):
        rngs = [[np.random.default_rng(100 * i + k) for k in range(4)] for i in range(3)]
        if schedule == "llama-wave":
            return eng.generate_wave([sample.WaveJob(p, r) for p, r in zip(prompts, rngs)], 1.0, 1.0, 24, 6, closer)
        return [eng.generate(p, r, 1.0, 1.0, 24, 0, closer) for p, r in zip(prompts, rngs)]

    whole = decode(None)
    counts = {}
    for reps in whole:
        for r in reps:
            for b in set(b"".join(eng.piece(t) for t in r.tokens)):
                counts[b] = counts.get(b, 0) + 1
    marker = bytes([max(counts, key=counts.get)])
    closed = decode(sample.Closer(eng.piece, marker, 1))
    cut = 0
    for reps, creps in zip(whole, closed):
        for r, c in zip(reps, creps):
            # every reply ends at the token that closes it, and only there
            assert cut_at(c, eng.piece, marker, 1) == (c.tokens if c.stop == "fence" else None)
            if schedule == "llama-wave":
                # Samples that end sooner let the next question in sooner, so the others share their
                # batches with other rows, and llama.cpp's sums over a batch's cache cells differ in
                # the last bits; a reply that is not closed is the same reply only up to that.
                continue
            want = cut_at(r, eng.piece, marker, 1)
            if want is None:
                assert (c.tokens, c.stop) == (r.tokens, r.stop)
            else:
                assert (c.tokens, c.stop) == (want, "fence")
        cut += sum(c.stop == "fence" for c in creps)
    assert cut > 0, "some reply closed"


def test_new_files_close_replies_at_the_fence_and_old_ones_resume_as_begun(tmp_path, tiny):
    make_split(tmp_path)
    out = tmp_path / "new.jsonl"
    assert run(tmp_path, tiny, out, "--limit", "2") == 0
    assert json.loads((tmp_path / "new.jsonl.meta.json").read_text())["stop"] == "fence"
    # a file begun before --stop existed: its meta has no "stop", and its replies ran to the end of turn
    old = tmp_path / "old.jsonl"
    assert run(tmp_path, tiny, old, "--limit", "2", "--stop", "eos") == 0
    meta_path = tmp_path / "old.jsonl.meta.json"
    meta = json.loads(meta_path.read_text())
    del meta["stop"]
    meta_path.write_text(json.dumps(meta))
    assert run(tmp_path, tiny, old, "--resume", "--limit", "2") == 0
    assert json.loads(meta_path.read_text())["stop"] == "eos"
    with pytest.raises(SystemExit, match=r"other settings \(stop 'eos' -> 'fence'\)"):
        run(tmp_path, tiny, old, "--resume", "--limit", "2", "--stop", "fence")
