"""A Spider-layout view of some databases of a split, for evaluating on held-out databases only.

Writes OUT/dev.json, OUT/predictions/<system>.sql and OUT/labels/root_cause.jsonl with the lines
of the chosen databases (label `index` renumbered to the view's dev.json) and links
OUT/database/<db_id> to the split's folders, so every `caper eval` and bench command runs on the
view unchanged. Nothing is copied from the databases themselves.

    python -m caper_train.data.dataview --data ../shared/data/spider/dev-open --dbs a,b,c --out runs/heldout-data
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path


def write_view(data: Path, dbs: set[str], out: Path) -> dict:
    qs = json.loads((data / "dev.json").read_text())
    keep = [i for i, q in enumerate(qs) if q["db_id"] in dbs]
    if not keep:
        raise SystemExit(f"no question of {sorted(dbs)} in {data}")
    new_index = {old: new for new, old in enumerate(keep)}
    out.mkdir(parents=True, exist_ok=True)
    (out / "dev.json").write_text(json.dumps([qs[i] for i in keep], indent=1))
    for sub in ("predictions", "predictions-extra"):
        if not (data / sub).is_dir():
            continue
        (out / sub).mkdir(exist_ok=True)
        for f in sorted((data / sub).glob("*.sql")):
            lines = f.read_text().split("\n")
            (out / sub / f.name).write_text("\n".join(lines[i] if i < len(lines) else "" for i in keep) + "\n")
    labels = data / "labels" / "root_cause.jsonl"
    n_labels = 0
    if labels.exists():
        (out / "labels").mkdir(exist_ok=True)
        rows = []
        for line in labels.read_text().splitlines():
            if not line.strip():
                continue
            r = json.loads(line)
            if r["db_id"] in dbs:
                r["index"] = new_index[r["index"]]
                rows.append(json.dumps(r))
        (out / "labels" / "root_cause.jsonl").write_text("\n".join(rows) + "\n")
        n_labels = len(rows)
    (out / "database").mkdir(exist_ok=True)
    for db in sorted(dbs):
        link = out / "database" / db
        if link.is_symlink() or link.exists():
            link.unlink()
        os.symlink((data / "database" / db).resolve(), link)
    return {"questions": len(keep), "labels": n_labels, "databases": sorted(dbs)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m caper_train.data.dataview")
    ap.add_argument("--data", required=True)
    ap.add_argument("--dbs", required=True, help="comma-separated db_ids")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    print(json.dumps(write_view(Path(a.data), {d for d in a.dbs.split(",") if d}, Path(a.out))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
