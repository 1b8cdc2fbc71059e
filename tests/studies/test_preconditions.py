"""The preconditions G1-G4 and their gates (binac_core/studies/preconditions.py) on hand-made records: the measures'
values by hand, a fake base that passes every gate and, from it, one that fails each gate alone."""

import math
from dataclasses import replace

import pytest

from binac_core.studies import preconditions as pc
from binac_core.studies.preconditions import AttemptRecord

GATES = {
    "greedy_single_at_most": 0.1,
    "all_wrong_frac_at_least": 0.5,
    "hint_gap_at_least": 0.2,
    "hint_over_self_correct_at_least": 2.0,
    "critic_over_chance_above": 0.0,
    "critic_hits_of_oracle_at_most": 0.5,
    "approval_gap_above": 0.0,
    "oracle_over_verifier_at_least": 0.05,
}


def _record(
    p: int,
    right: bool,
    first=None,
    other=True,
    critic=None,
    approves=False,
    oracle=1.0,
    other_after=0.0,
    self_after=0.0,
    approval_after=0.0,
) -> AttemptRecord:
    return AttemptRecord(
        problem_id=f"p{p}",
        right=right,
        first_wrong_step=first,
        has_other_step=other,
        critic_step=critic,
        critic_approves=approves,
        oracle_step=first,
        after_oracle=oracle,
        after_other_step=other_after if other else None,
        after_self_correct=self_after,
        after_approval=approval_after,
    )


def passing_base(problems: int = 100) -> list[AttemptRecord]:
    """8 attempts per problem: 2 right (approved by the critic once, copied right after approval), 6 wrong with a
    first wrong step 1-3 (the critic names it on 2 of them, step 4 on the others); the oracle's hint fixes every
    wrong attempt, another step's none, the self-correction 1 in 6."""
    out = []
    for p in range(problems):
        out += [
            _record(p, True, approves=True, approval_after=1.0, oracle=1.0),
            _record(p, True, approves=False, approval_after=1.0, oracle=1.0),
        ]
        for k in range(6):
            first = 1 + k % 3
            out.append(
                _record(
                    p, False, first=first, critic=first if k < 2 else 4, oracle=1.0, self_after=1.0 if k == 5 else 0.0
                )
            )
    return out


def _measures(records, greedy=2, all_wrong=80, problems=100):
    return {k: e.to_json() for k, e in pc.measures(records, greedy, problems, all_wrong, problems).items()}


def test_the_measures_of_a_hand_made_base():
    m = _measures(passing_base())
    value = {k: round(v["value"], 6) for k, v in m.items()}
    assert value["fix_first_error"] == 1.0 and value["fix_other_step"] == 0.0
    assert value["fix_self_correct"] == round(1 / 6, 6) and value["hint_over_self_correct"] == 6.0
    assert value["hint_gap"] == 1.0
    assert value["critic_hits"] == round(2 / 6, 6) and value["critic_hits_of_oracle"] == round(2 / 6, 6)
    # the critic names the first wrong step (1 or 2) on two wrong attempts per problem and step 4 on the others;
    # 200 of the 600 first wrong steps are 1 (and 200 are 2): a feedback naming its own attempt's first wrong step
    # names that of (200 - 1) of the 599 other attempts, one naming step 4 none
    assert value["critic_hits_chance"] == round(2 * (199 / 599) / 6, 6)
    assert value["approves_right"] == 0.5 and value["approves_wrong"] == 0.0 and value["approval_gap"] == 0.5
    # verifier-only: right attempts approved (copied: right), wrong ones re-checked (1 in 6 fixed); the oracle
    # fixes all: 8 of 8 against 2 + 1 per problem
    assert value["oracle_over_verifier"] == round(1 - 3 / 8, 6)
    assert value["greedy_single"] == 0.02 and value["all_wrong"] == 0.8
    assert m["hint_gap"]["n"] == 600 and m["approves_right"]["n"] == 200


def test_a_constant_measure_has_an_interval_of_zero_width_and_a_varying_one_covers_its_value():
    m = _measures(passing_base())
    assert m["fix_first_error"]["low"] == m["fix_first_error"]["high"] == 1.0
    e = m["critic_over_chance"]
    assert e["low"] <= e["value"] <= e["high"]


def test_the_repaired_chance_by_hand():
    records = [_record(0, False, first=1, critic=1), _record(1, False, first=2, critic=1), _record(2, False, first=1)]
    chance = pc._repaired_chance(records)
    assert [chance[id(r)] for r in records] == [0.5, 1.0, 0.0]  # the other attempts' first steps: {2, 1}, {1, 1}


def test_a_passing_base_passes_every_gate():
    assert pc.failures("sparse", 6, _measures(passing_base()), GATES) == []


def _fail(records, **counts):
    return pc.failures("sparse", 6, _measures(records, **counts), GATES)


def _wrong_map(records, fn):
    return [fn(r) if not r.right else r for r in records]


@pytest.mark.parametrize(
    "gate, make",
    [
        ("greedy_single_at_most", lambda: (passing_base(), {"greedy": 12})),
        ("all_wrong_frac_at_least", lambda: (passing_base(), {"all_wrong": 52})),
        ("hint_gap_at_least", lambda: (_wrong_map(passing_base(), lambda r: replace(r, after_other_step=0.9)), {})),
        (
            "hint_over_self_correct_at_least",
            lambda: (
                _wrong_map(passing_base(), lambda r: replace(r, after_self_correct=0.6, after_other_step=0.0)),
                {},
            ),
        ),
        (
            "critic_over_chance_above",  # the critic names step 4 whatever the attempt: no hits, no chance
            lambda: (_wrong_map(passing_base(), lambda r: replace(r, critic_step=4)), {}),
        ),
        (
            "critic_hits_of_oracle_at_most",
            lambda: (_wrong_map(passing_base(), lambda r: replace(r, critic_step=r.first_wrong_step)), {}),
        ),
        (
            "approval_gap_above",  # it approves two wrong attempts in three, one right attempt in two
            lambda: (
                [replace(r, critic_approves=r.first_wrong_step in (1, 2) or r.critic_approves) for r in passing_base()],
                {},
            ),
        ),
        (
            "oracle_over_verifier_at_least",  # the oracle's hint fixes 3 wrong attempts in 10 (3 x the self-correction's)
            # and its approval keeps only half of the right ones: 0.35 against a verifier-only critic's 0.325
            lambda: (
                [
                    replace(r, after_oracle=0.3, after_self_correct=0.1)
                    if not r.right
                    else replace(r, after_oracle=0.5)
                    for r in passing_base()
                ],
                {},
            ),
        ),
    ],
)
def test_a_base_failing_one_gate_fails_that_gate_alone(gate, make):
    records, counts = make()
    lines = _fail(records, **counts)
    assert len(lines) == 1 and f"gate {gate} " in lines[0] and "regime sparse (difficulty 6)" in lines[0], lines


def test_a_failure_line_names_the_gate_the_regime_and_the_value():
    (line,) = pc.failures("sparse", 6, _measures(passing_base(), greedy=30), {"greedy_single_at_most": 0.1})
    assert line.startswith("regime sparse (difficulty 6): gate greedy_single_at_most 0.1 fails: G1")
    assert "0.300 [" in line and "upper end" in line


def test_an_empty_population_is_nan_and_fails_its_gate():
    """A base whose wrong attempts all lack another locally right step (or that gets every attempt right) leaves G2's
    population empty: its measures are NaN, not an error, and a gate reading one fails."""
    right_only = [_record(p, True, approves=True, approval_after=1.0) for p in range(5)]
    e = pc.measures(right_only, 5, 5, 0, 5)
    for name in ("fix_first_error", "hint_gap", "hint_over_self_correct", "critic_hits", "approves_wrong"):
        assert all(map(math.isnan, (e[name].value, e[name].low, e[name].high))) and e[name].n == 0, name
    assert e["approves_right"].value == 1.0
    out = pc.failures("easy", 2, {k: v.to_json() for k, v in e.items()}, {"hint_gap_at_least": 0.2})
    assert len(out) == 1 and "hint_gap_at_least" in out[0] and "nan" in out[0]
