"""Borrowed-gold candidates: a neighbour on the same database, never the question itself, never
the same SQL, never another database's; one line per question."""
import json

from caper_train.data.borrowed import main, neighbours

QS = [
    {"db_id": "a", "question": "names of singers from France", "query": "SELECT name FROM singer WHERE country = 'France'"},
    {"db_id": "a", "question": "names of singers from Spain", "query": "SELECT name FROM singer WHERE country = 'Spain'"},
    {"db_id": "a", "question": "how many singers", "query": "SELECT count(*) FROM singer"},
    {"db_id": "a", "question": "number of singers", "query": "select  count(*) from singer"},
    {"db_id": "b", "question": "names of singers from France", "query": "SELECT title FROM song"},
]


def test_sql_rule_takes_the_nearest_other_gold_of_the_database():
    out = neighbours(QS, "sql")
    assert out[0] == QS[1]["query"] and out[1] == QS[0]["query"]
    # 3's gold is 2's in other case and spacing: the same SQL is skipped, the next nearest taken.
    assert out[2] != QS[3]["query"] and out[2] in (QS[0]["query"], QS[1]["query"])
    # The only question of its database has no neighbour.
    assert out[4] == ""


def test_question_rule_reads_the_wording_and_stays_in_the_database():
    out = neighbours(QS, "question")
    assert out[0] == QS[1]["query"]
    assert out[4] == ""  # b's question matches a's wording exactly, but a is another database


def test_files_align_with_the_split(tmp_path):
    (tmp_path / "train.json").write_text(json.dumps(QS))
    main(["--data", str(tmp_path), "--out", str(tmp_path / "out")])
    for rule in ("sql", "question"):
        lines = (tmp_path / "out" / f"borrowed-{rule}.sql").read_text().split("\n")
        assert len(lines) == len(QS) + 1 and lines[-1] == ""
        assert lines[:len(QS)] == neighbours(QS, rule)
