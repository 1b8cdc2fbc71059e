"""The critic's reward information (binac_core/reports/measures.py) on hand-computed rows: the
flat share, the within-group spread, the wrong-attempt share, the hint's value and r1 after approving a right
attempt; the step metrics that log them; the report's bins of 10 iterations; and sql/critic_information.sql, which
recomputes them from stored rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from binac_core.reports.measures import critic_information, hint_measures
from binac_core.reports.report import information_bins

REPO = Path(__file__).resolve().parents[2]


def _row(pid, k, critic, attempt, refined=0.0, first_wrong=None, step=None, approves=False):
    return {
        "problem_id": pid,
        "sample_idx": k,
        "critic_reward": critic,
        "attempt_reward": attempt,
        "refined_reward": refined,
        "first_wrong_step": first_wrong,
        "feedback_step": step,
        "feedback_approves": approves,
    }


ROWS = [
    # group (a, 0): wrong attempt, rewards 1 and 0: spread 1
    _row("a", 0, 1.0, 0.0),
    _row("a", 0, 0.0, 0.0),
    # group (a, 1): right attempt, rewards 0.5 and 0.5: flat, spread 0
    _row("a", 1, 0.5, 1.0),
    _row("a", 1, 0.5, 1.0),
    # group (b, 0): wrong attempt, rewards 1, 0.25, 0.5: spread 0.75
    _row("b", 0, 1.0, 0.0),
    _row("b", 0, 0.25, 0.0),
    _row("b", 0, 0.5, 0.0),
    # no critic reward: left out
    _row("c", 0, None, 0.0),
]


def test_flat_share_spread_and_wrong_share_by_hand():
    m = critic_information(ROWS)
    assert m["critic_flat_frac"] == pytest.approx(1 / 3)
    assert m["critic_reward_spread"] == pytest.approx((1 + 0 + 0.75) / 3)
    assert m["critic_wrong_frac"] == pytest.approx(2 / 3)
    assert critic_information([_row("c", 0, None, 0.0)]) == dict.fromkeys(m)


HINT_ROWS = [
    _row("a", 0, 0, 0.0, refined=1.0, first_wrong=2, step=2),  # names the first wrong step: fixed
    _row("a", 0, 0, 0.0, refined=0.0, first_wrong=2, step=2),  # names it: not fixed
    _row("a", 1, 0, 0.0, refined=0.0, first_wrong=2, step=3),  # names another step
    _row("a", 1, 0, 0.0, refined=1.0, first_wrong=2, step=None),  # names none: in neither set
    _row("b", 0, 0, 1.0, refined=1.0, approves=True),  # approves a right attempt: kept
    _row("b", 0, 0, 1.0, refined=0.0, approves=True),  # approves a right attempt: lost
    _row("b", 1, 0, 0.0, refined=1.0, approves=True),  # approves a wrong attempt: not counted
]


def test_the_hints_value_and_r1_after_approving_a_right_attempt_by_hand():
    assert hint_measures(HINT_ROWS) == {"hint_value": pytest.approx(0.5 - 0.0), "r1_after_approving_right": 0.5}
    assert hint_measures(HINT_ROWS[:2]) == {"hint_value": None, "r1_after_approving_right": None}


def test_the_step_metrics_log_them_under_train():
    from binac_core.model.stage_io import Attempt, Feedback, ScoredBatch
    from binac_core.reports.step_metrics import train_metrics

    rows = [{**r, "feedback_idx": j % 2, "feedback_tokens": 1} for j, r in enumerate(ROWS[:7])]
    attempts = [Attempt(p, k, "", [1], "", [2], [0.0]) for p, k in (("a", 0), ("a", 1), ("b", 0))]
    feedback = [Feedback(r["problem_id"], r["sample_idx"], 0, "", [1], [2], [0.0]) for r in rows]
    scored = ScoredBatch(attempts, [0.0, 1.0, 0.0], feedback=feedback, refined=[], refined_rewards=[])
    m = train_metrics(rows, scored, critic_rewards=[r["critic_reward"] for r in rows], critic_measures=False)
    assert m["train/critic_flat_frac"] == pytest.approx(1 / 3)
    assert m["train/critic_flat_frac"] == pytest.approx(1 - m["train/critic_signal_frac"])
    assert m["train/critic_reward_spread"] == pytest.approx(1.75 / 3)
    assert m["train/critic_wrong_frac"] == pytest.approx(2 / 3)
    assert "train/hint_value" not in m  # the synthetic task's analysis only (`critic_measures`)


def test_the_report_bins_ten_iterations():
    information = {str(s): {"critic_flat_frac": s / 10} for s in range(1, 13)} | {"13": {}}
    assert information_bins(information, "critic_flat_frac") == {
        1: pytest.approx(sum(range(1, 11)) / 100),
        11: pytest.approx((1.1 + 1.2) / 2),
    }
    assert information_bins(information, "hint_value") == {}


def test_the_query_recomputes_them_from_stored_rows(tmp_path):
    """Bin 1 (iteration 1): the three groups of ROWS; bin 11 (iteration 12): two groups of HINT_ROWS with equal
    critic rewards; with bin 1 and per_run 1 each iteration alone, as MLflow logs it."""
    from trajectory_rows import trajectory_row

    from binac_core.foundation.workspace import Workspace
    from binac_core.store import sqlrun, storage

    ws = Workspace(tmp_path / "home")
    cols = {"run_id": "r", "parent_run_id": "p", "method": "binac", "split": "train", "protocol": "train"}
    for step, rows in ((1, ROWS[:7]), (12, [{**r, "critic_reward": 1.0} for r in HINT_ROWS[:3]])):
        planted = [trajectory_row(**cols, step=step, feedback_idx=j, feedback="f", **r) for j, r in enumerate(rows)]
        storage.write_shard(ws, "r", "train", step, planted)
    text = (REPO / "sql" / "critic_information.sql").read_text()
    assert sqlrun.declared_params(text) == {"comparison": "latest", "method": "%", "bin": "10", "per_run": "0"}
    df = sqlrun.run(ws, text, {"comparison": "p"})
    first, second = df.iloc[0], df.iloc[1]
    assert (first["bin_start"], first["groups"], first["runs"]) == (1, 3, 1)
    assert first["critic_flat_frac"] == pytest.approx(1 / 3)
    assert first["critic_reward_spread"] == pytest.approx(1.75 / 3)
    assert first["critic_wrong_frac"] == pytest.approx(2 / 3)
    assert (second["bin_start"], second["groups"]) == (11, 2)
    assert second["hint_value"] == pytest.approx(0.5) and second["critic_flat_frac"] == 1.0
    per_iteration = sqlrun.run(ws, text, {"comparison": "p", "bin": 1, "per_run": 1})
    assert list(per_iteration["bin_start"]) == [1, 12] and list(per_iteration["run_id"]) == ["r", "r"]
