"""yes_topk on a tiny randomly initialised Qwen2 with a small byte-level BPE tokenizer: the packed,
cached path must give each candidate the score the unpacked model gives it alone, and training
must move the top layers only, checkpoint by epoch and resume."""
import json

import pytest
import torch

import yes_topk

CHAT = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
SCHEMA = "singer: singer_id*, name, age | concert: concert_id*, year"


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
    d = tmp_path_factory.mktemp("base")
    tk = Tokenizer(models.BPE(unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    corpus = [SCHEMA, "SELECT name FROM singer WHERE age > 30", "Yes No", yes_topk.ASK]
    tk.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400, special_tokens=["[UNK]", "<|im_start|>", "<|im_end|>"],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]")
    tok.chat_template = CHAT
    tok.save_pretrained(d)
    cfg = Qwen2Config(vocab_size=512, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=2,
                      num_key_value_heads=1, max_position_embeddings=1024, tie_word_embeddings=False)
    torch.manual_seed(0)
    Qwen2ForCausalLM(cfg).save_pretrained(d)
    return d


def _trajectory(db, q, sql, ok):
    return {"type": "trajectory", "db_id": db, "question": q, "schema": SCHEMA, "correct": ok,
            "units": [{"kind": "SELECT", "text": sql}]}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("data")
    recs = []
    for i in range(4):
        q = f"Names of singers older than {20 + i}?"
        recs += [_trajectory("singer", q, f"SELECT name FROM singer WHERE age > {20 + i}", True),
                 _trajectory("singer", q, f"SELECT name FROM singer WHERE age < {20 + i}", False),
                 _trajectory("singer", q, "SELECT age FROM singer", False)]
    recs.append(_trajectory("concert_singer", "held-out database", "SELECT 1", True))
    (d / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    facts = {"questions": [{"db_id": "singer", "question": "Who is older than 30?",
                            "candidates": [{"sql": "SELECT name FROM singer WHERE age > 30", "units": [1]},
                                           {"sql": "SELECT name FROM concert", "units": [1]}],
                            "correct": [True, False]}]}
    (d / "facts.json").write_text(json.dumps(facts))
    (d / "schemas.json").write_text(json.dumps({"singer": SCHEMA}))
    return d


def test_trajectory_questions_exclude_held_out_databases_and_subsample(files):
    qs = yes_topk.trajectory_questions([str(files / "train.jsonl")], wrong=1, right=1, limit=0, seed=0)
    assert {q["db_id"] for q in qs} == {"singer"} and len(qs) == 4
    assert all(sorted(ok for _, ok in q["cands"]) == [False, True] for q in qs)


def test_packed_cached_score_is_the_models_own_yes_no_gap(base, files, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    assert yes_topk.main(["cache", "--held", str(files / "facts.json"), "--schemas", str(files / "schemas.json"),
                          "--base", str(base), "--layer", "2", "--out", str(tmp_path / "held"), "--threads", "1"]) == 0
    assert yes_topk.main(["score", "--cache", str(tmp_path / "held"), "--base", str(base), "--out", str(tmp_path / "s.jsonl"),
                          "--threads", "1"]) == 0
    got = [json.loads(x) for x in (tmp_path / "s.jsonl").read_text().splitlines()]
    tok = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).eval()
    yes, no = tok.encode("Yes", add_special_tokens=False)[0], tok.encode("No", add_special_tokens=False)[0]
    q = json.loads((files / "facts.json").read_text())["questions"][0]
    want = []
    for c in q["candidates"]:
        row = yes_topk.packed_row(tok, {**q, "schema": SCHEMA, "cands": [(c["sql"], True)]}, 10_000)
        with torch.no_grad():
            logits = model(torch.tensor([row["ids"]])).logits[0, -1]
        want.append(float(logits[yes] - logits[no]))
    assert [g["sql"] for g in got] == [c["sql"] for c in q["candidates"]]
    assert want[0] != pytest.approx(want[1], abs=1e-3)  # the two candidates do differ
    for g, w in zip(got, want):
        assert g["yes"] == pytest.approx(w, abs=2e-3)  # the cache is fp16


def test_training_moves_the_top_layers_only_and_resumes(base, files, tmp_path):
    assert yes_topk.main(["cache", "--train", str(files / "train.jsonl"), "--wrong", "2", "--right", "1",
                          "--base", str(base), "--layer", "2", "--out", str(tmp_path / "train"), "--threads", "1"]) == 0
    run = tmp_path / "run"
    args = ["train", "--cache", str(tmp_path / "train"), "--base", str(base), "--run", str(run), "--epochs", "2",
            "--lr", "1e-3", "--threads", "1"]
    assert yes_topk.main(args) == 0
    assert (run / "epoch1.pt").exists() and (run / "epoch2.pt").exists() and (run / "final.pt").exists()
    start = yes_topk.Top(str(base), 2).state_dict()
    end = torch.load(run / "final.pt", weights_only=False)
    assert not torch.equal(start["layers.0.mlp.up_proj.weight"], end["layers.0.mlp.up_proj.weight"])
    assert not torch.equal(start["head.weight"], end["head.weight"])
    assert torch.equal(start["norm.weight"], end["norm.weight"])
    ck = torch.load(run / "ckpt.pt", weights_only=False)
    assert ck["state"]["step"] == 8  # 4 questions, 2 epochs
    assert yes_topk.main(args + ["--resume"]) == 0  # a finished run resumes to no further steps
    assert torch.load(run / "ckpt.pt", weights_only=False)["state"]["step"] == 8
