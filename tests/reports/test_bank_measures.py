"""The critic's measures on the attempt bank (binac_core/reports/bank_measures.py) on hand-computed rows: the values
are measures.py's, the intervals Wilson's (and the mean of the halves' bounds for the balanced accuracy), the
metric names `bank_<split>/<critic>_<measure>`; and sql/bank_measures.sql recomputes them from stored rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from binac_core.reports.bank_measures import BANK_MEASURES, bank_measures, bank_metrics
from binac_core.reports.measures import critic_error_measures

REPO = Path(__file__).resolve().parents[2]


def _row(pid, reward, first_wrong, step, approves, verdict):
    return {
        "problem_id": pid,
        "sample_idx": 0,
        "attempt_reward": reward,
        "refined_reward": None,  # bank rows: no refinement
        "first_wrong_step": first_wrong,
        "feedback_step": step,
        "feedback_approves": approves,
        "feedback_verdict": verdict,
    }


ROWS = [
    # four wrong attempts whose step 2 is wrong: two hits, one other step, one approval
    _row("w1", 0.0, 2, 2, False, "incorrect"),
    _row("w2", 0.0, 2, 2, False, "incorrect"),
    _row("w3", 0.0, 2, 1, False, "incorrect"),
    _row("w4", 0.0, 2, None, True, "correct"),
    # two right attempts with right steps: one approved, one false alarm
    _row("r1", 1.0, None, None, True, "correct"),
    _row("r2", 1.0, None, 1, False, "incorrect"),
]


def test_the_measures_and_their_intervals_by_hand():
    m = bank_measures(ROWS)
    assert list(m) == list(BANK_MEASURES)
    assert (m["hits_first_error"].value, m["hits_first_error"].n) == (0.5, 4)
    # Wilson at 2/4: centre 1/2, half-width 1.96·sqrt(1/16 + 1.96²/64) / (1 + 1.96²/4) = 0.35
    assert (m["hits_first_error"].low, m["hits_first_error"].high) == (
        pytest.approx(0.150, abs=1e-3),
        pytest.approx(0.850, abs=1e-3),
    )
    assert (m["false_alarm"].value, m["false_alarm"].n) == (0.5, 2)
    assert (m["approves_wrong"].value, m["approves_wrong"].n) == (0.25, 4)
    assert (m["approves_right"].value, m["approves_right"].n) == (0.5, 2)
    # wrong attempts called incorrect 3/4, right ones called correct 1/2
    assert m["verdict_balanced_accuracy"].value == pytest.approx((0.75 + 0.5) / 2)
    assert m["verdict_balanced_accuracy"].n == 6
    from binac_core.foundation.stats import wilson_interval

    (a_lo, a_hi), (b_lo, b_hi) = wilson_interval(3, 4), wilson_interval(1, 2)
    assert m["verdict_balanced_accuracy"].low == pytest.approx((a_lo + b_lo) / 2)
    assert m["verdict_balanced_accuracy"].high == pytest.approx((a_hi + b_hi) / 2)
    # one definition: the shares are measures.py's
    same = critic_error_measures(ROWS)
    assert {k: m[k.removeprefix("critic_")].value for k in same} == same


def test_the_metric_names_and_an_empty_denominator():
    metrics = bank_metrics("eval", "frozen_critic", ROWS[:4])  # no right attempt: no false alarm, no balance
    assert metrics["bank_eval/frozen_critic_hits_first_error"] == 0.5
    assert {"bank_eval/frozen_critic_hits_first_error_lo", "bank_eval/frozen_critic_hits_first_error_hi"} <= set(
        metrics
    )
    assert not any("false_alarm" in k or "balanced" in k or "approves_right" in k for k in metrics)


def test_the_query_recomputes_them_from_stored_rows(tmp_path):
    from trajectory_rows import trajectory_row

    from binac_core.foundation.workspace import Workspace
    from binac_core.store import sqlrun, storage

    ws = Workspace(tmp_path / "home")
    cols = {"run_id": "r", "parent_run_id": "p", "method": "binac", "step": 4, "feedback": "f"}
    for protocol, split, rows in (("bank", "eval", ROWS), ("bank_frozen", "val", ROWS[:4])):
        planted = [
            trajectory_row(**cols, split=f"bank_{split}", protocol=protocol, **{**r, "refined_reward": None})
            for r in rows
        ]
        storage.write_shard(ws, "r", f"{protocol}-{split}", 4, planted)
    text = (REPO / "sql" / "bank_measures.sql").read_text()
    assert sqlrun.declared_params(text) == {"comparison": "latest", "method": "%"}
    df = sqlrun.run(ws, text, {"comparison": "p"})
    got = {(r.bank_split, r.critic): r for r in df.itertuples()}
    assert set(got) == {("eval", "critic"), ("val", "frozen_critic")}
    for (split, critic), rows in ((("eval", "critic"), ROWS), (("val", "frozen_critic"), ROWS[:4])):
        logged = bank_metrics(split, critic, rows)
        row = got[(split, critic)]
        for name in BANK_MEASURES:
            for suffix in ("", "_lo", "_hi"):
                key = f"bank_{split}/{critic}_{name}{suffix}"
                value = getattr(row, name + suffix)
                assert (value == pytest.approx(logged[key])) if key in logged else value != value, key  # NaN: none
