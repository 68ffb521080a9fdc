import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The research package and the product package it builds on.
for p in (ROOT / "research", ROOT / "training"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))
