import pytest

from caper_train.data.prompt import BOS_ID, CLAUSE_ID, Q_ID, SQL_ID, PromptError, build_from_ids, build_prompt

SPECIALS = {"<s>": BOS_ID, "<q>": Q_ID, "<sql>": SQL_ID, "<clause>": CLAUSE_ID}


def test_layout_and_markers():
    p = build_from_ids([10, 11], [20], [[30, 31], [32]], 100, SPECIALS)
    assert p.ids == [1, 10, 11, 5, 20, 6, 30, 31, 4, 32, 4]
    assert p.markers == [8, 10]
    assert all(p.ids[m] == CLAUSE_ID for m in p.markers)
    assert not p.truncated_schema and not p.truncated_question


def test_question_cut_to_96_then_schema():
    schema, question, units = list(range(100, 400)), list(range(500, 700)), [[7] * 10]
    p = build_from_ids(schema, question, units, 256, SPECIALS)
    assert len(p.ids) == 256
    assert p.truncated_question and p.truncated_schema
    q_start = p.ids.index(Q_ID) + 1
    assert p.ids[q_start:q_start + 96] == question[:96]
    assert p.ids[1:p.ids.index(Q_ID)] == schema[:256 - 2 - 96 - 12]
    assert p.ids[p.markers[0]] == CLAUSE_ID


def test_only_schema_cut_when_question_short():
    p = build_from_ids(list(range(100, 400)), [9, 9], [[7] * 5], 64, SPECIALS)
    assert len(p.ids) == 64 and p.truncated_schema and not p.truncated_question


def test_question_cut_further_when_sql_leaves_no_room():
    p = build_from_ids([100] * 10, [9] * 90, [[7] * 40], 80, SPECIALS)
    assert len(p.ids) == 80 and p.truncated_schema and p.truncated_question
    assert p.ids[1] == Q_ID  # empty schema


def test_sql_never_cut():
    with pytest.raises(PromptError):
        build_from_ids([], [], [[7] * 100], 50, SPECIALS)
    with pytest.raises(PromptError):
        build_from_ids([1], [1], [], 50, SPECIALS)


def test_build_prompt_encodes_segments(fixture_tokenizer):
    p = build_prompt(fixture_tokenizer, "singer: singer_id*, name", "How many?", ["SELECT count(*)", "FROM singer"], 512)
    assert p.ids[0] == BOS_ID and p.ids.count(CLAUSE_ID) == 2 and p.ids[-1] == CLAUSE_ID
