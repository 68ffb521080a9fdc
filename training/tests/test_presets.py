"""The presets' comments say why each is sized as it is; the figures live in the preset itself (and
measurements in bench/results), so a comment cannot drift from the numbers beside it."""
import re
from pathlib import Path

MODEL = Path(__file__).resolve().parents[1] / "caper_train" / "model" / "reward_model.py"


def test_preset_comments_hold_no_figures():
    src = MODEL.read_text()
    block = src[src.index("PRESETS: dict[str, dict] = {"):]
    block = block[:block.index("\n}\n")]
    comments = [line.strip() for line in block.splitlines() if line.strip().startswith("#")]
    assert comments, "each preset says why it is sized as it is"
    assert [c for c in comments if re.search(r"\d", c)] == []
