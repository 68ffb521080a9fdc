"""The terminal verdict: `</s>` after the last marker, whole-query pairs at the terminal positions."""
import argparse

import pytest
import torch

from caper_train.data.prompt import BOS_ID, CLAUSE_ID, EOS_ID, Q_ID, SQL_ID, PromptError, build_from_ids, build_prompt
from caper_train.data.records import TERMINAL_MARGIN, build_dataset
from caper_train.scratch.distributed import step_counts
from caper_train.scratch.objective import compute_loss
from caper_train.scratch.packing import collate, collate_rows, pack_rows

SPECIALS = {"<s>": BOS_ID, "<q>": Q_ID, "<sql>": SQL_ID, "<clause>": CLAUSE_ID, "</s>": EOS_ID}
SCHEMA = "singer: singer_id*, name, country, age"
Q = "How many singers are from France?"
GOLD = ["SELECT count(*)", "FROM singer", "WHERE country = 'France'"]


def test_terminal_follows_last_marker_and_counts_in_the_sql_part():
    plain = build_from_ids([10, 11], [20], [[30, 31], [32]], 100, SPECIALS)
    p = build_from_ids([10, 11], [20], [[30, 31], [32]], 100, SPECIALS, terminal=True)
    assert p.ids == plain.ids + [EOS_ID] and p.markers == plain.markers
    assert p.terminal == len(p.ids) - 1 and plain.terminal == -1
    # the SQL part (with its terminal) is never cut: a prompt that just fits loses a schema token
    fit = build_from_ids([10] * 5, [20], [[30]], 11, SPECIALS)
    assert len(fit.ids) == 11 and not fit.truncated_schema
    cut = build_from_ids([10] * 5, [20], [[30]], 11, SPECIALS, terminal=True)
    assert len(cut.ids) == 11 and cut.truncated_schema and cut.ids[-1] == EOS_ID and cut.ids[-2] == CLAUSE_ID
    with pytest.raises(PromptError):
        build_from_ids([], [], [[7] * 6], 10, SPECIALS, terminal=True)
    assert len(build_from_ids([], [], [[7] * 6], 10, SPECIALS).ids) == 10


def records():
    base = {"db_id": "concert_singer", "question": Q, "schema": SCHEMA}
    units = lambda xs: [{"kind": x.split()[0], "text": x} for x in xs]  # noqa: E731
    return [
        {"type": "trajectory", **base, "units": units(GOLD), "rewards": [0, 0, 0], "correct": True, "source": "gold"},
        # drop_where: no clause is wrong, only the whole query
        {"type": "trajectory", **base, "units": units(GOLD[:2]), "rewards": [0, 0], "correct": False,
         "source": "fault", "mutation": "drop_where"},
        {"type": "trajectory", **base, "units": units(["SELECT count(*)", "FROM singer", "WHERE country = 'france'"]),
         "rewards": [0, 0, -1], "correct": False, "source": "fault", "mutation": "literal_case"},
        {"type": "pair", **base, "prefix": GOLD[:2], "chosen": GOLD[2], "rejected": "WHERE country = 'france'",
         "clause": "WHERE", "margin": 0.8, "source": "fault", "mutation": "literal_case"},
        # another question without a right trajectory: its wrong one has no partner
        {"type": "trajectory", "db_id": "x", "question": "other?", "schema": SCHEMA, "units": units(GOLD[:2]),
         "rewards": [0, -1], "correct": False, "source": "counterfactual"},
    ]


def test_dataset_pairs_every_wrong_trajectory_with_the_right_one_at_the_terminal(fixture_tokenizer):
    ds = build_dataset(records(), fixture_tokenizer, 512, terminal=True)
    term = [p for p in ds.pairs if p.terminal]
    assert len(ds.pairs) == 3 and len(term) == 2
    gold = ds.trajs[0]
    assert gold.terminal == len(gold.ids) - 1 and gold.ids[gold.terminal] == EOS_ID and gold.correct is True
    assert sorted(p.mutation for p in term) == ["drop_where", "literal_case"]
    for p in term:
        assert p.chosen == gold.ids and p.chosen_marker == gold.terminal and p.margin == TERMINAL_MARGIN
        assert p.rejected[p.rejected_marker] == EOS_ID and p.rejected_marker == len(p.rejected) - 1
    drop = next(p for p in term if p.mutation == "drop_where")
    assert drop.rejected == ds.trajs[1].ids
    # the clause pair keeps its old form: compared at its last marker, no terminal token
    clause = next(p for p in ds.pairs if not p.terminal)
    assert clause.chosen[clause.chosen_marker] == CLAUSE_ID and EOS_ID not in clause.chosen
    # the terminal ids are what build_prompt makes
    p = build_prompt(fixture_tokenizer, SCHEMA, Q, GOLD, 512, terminal=True)
    assert p.ids == gold.ids and p.terminal == gold.terminal

    old = build_dataset(records(), fixture_tokenizer, 512, terminal=False)
    assert len(old.pairs) == 1 and all(t.terminal == -1 and EOS_ID not in t.ids for t in old.trajs)


@pytest.mark.parametrize("packed", [False, True])
def test_loss_reads_the_terminal_positions(fixture_tokenizer, packed):
    ds = build_dataset(records(), fixture_tokenizer, 512, terminal=True)
    term = [p for p in ds.pairs if p.terminal]
    batch = term + ds.trajs[:2]
    rows = pack_rows(batch, 640, None) if packed else None
    ids, mask, pids, pidx, tpos, _ = collate_rows(rows, torch.device("cpu")) if packed else collate(batch, torch.device("cpu"))
    assert len(pidx) == 2
    for rp, pp, rn, pn, margin in pidx:
        assert ids[rp, pp] == EOS_ID and ids[rn, pn] == EOS_ID and margin == TERMINAL_MARGIN
    # trajectories: 3 + 2 markers, then one terminal each, labelled by `correct`
    assert len(tpos) == 3 + 1 + 2 + 1
    assert [t for r, p, t in tpos if ids[r, p] == EOS_ID] == [1.0, 0.0]
    n_pairs, n_marks = step_counts(rows if packed else batch, packed, "pref+reg")
    assert (n_pairs, n_marks) == (2, 7)

    a = argparse.Namespace(pref_form="weighted", loss="pref+reg", reg_weight=0.5)
    rewards = torch.zeros(ids.shape, requires_grad=True)
    loss, st = compute_loss(rewards, pidx, tpos, a, n_pairs, n_marks)
    loss.backward()
    g = rewards.grad
    rp, pp, rn, pn, _ = pidx[0]
    # the right query's terminal is pushed up, the deletion mutant's down
    assert g[rp, pp] < 0 and g[rn, pn] > 0
    drop = next(i for i, p in enumerate(term) if p.mutation == "drop_where")
    r, p, rn2, pn2, _ = pidx[drop]
    assert g[rn2, pn2] > 0
    # raising the right query's terminal lowers the loss
    with torch.no_grad():
        better = rewards.detach().clone()
        for rp, pp, *_ in pidx:
            better[rp, pp] = 2.0
    assert compute_loss(better, pidx, tpos, a, n_pairs, n_marks)[0] < loss
