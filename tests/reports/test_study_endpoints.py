"""sql/study_endpoints.sql (the third edition's endpoints per run) on a small hand-built store: every column is
computed by hand from the planted rows. The same areas agree with the report's (`run_values.area` over MLflow
metrics) on real runs: checked when the study report is written (docs/results-study-v3.md)."""

from __future__ import annotations

from datetime import datetime

import pandas as pd
import pytest
from conftest import REPO
from trajectory_rows import trajectory_row

from binac_core.foundation.workspace import Workspace
from binac_core.store import sqlrun, storage

ENDPOINTS = (REPO / "sql" / "study_endpoints.sql").read_text()


def _row(run_id: str, parent: str, step: int, protocol: str, i: int, **cols) -> dict:
    """Problem i's held-out critic_only row (seed 3, round 1) at `step` under `protocol`, unless `cols` say more."""
    planted = {"run_id": run_id, "parent_run_id": parent, "step": step, "protocol": protocol, "problem_id": f"q{i}"}
    study = {"method": "critic_only", "seed": 3, "round": 1, "prompt": "Solve: 1+2-3"}
    return trajectory_row(**planted | study | {"created_at": datetime(2025, 1, 2, 10, step)} | cols)


def _feedback(ws, run_id, parent, step, protocol, rows):
    """rows: (first_wrong_step, feedback_step, approves, verdict, attempt_reward)."""
    storage.write_shard(
        ws,
        run_id,
        f"eval-{protocol}",
        step,
        [
            _row(
                run_id,
                parent,
                step,
                protocol,
                i,
                first_wrong_step=f,
                feedback_step=s,
                feedback_approves=a,
                feedback_verdict=v,
                attempt_reward=r0,
                feedback="z",
                refined="y",
                refined_reward=1.0,
            )
            for i, (f, s, a, v, r0) in enumerate(rows)
        ],
    )


@pytest.fixture
def store(tmp_path) -> Workspace:
    """Run r of study P: `single` at steps 0, 10, 12 (an equal-budget point), 20 with rewards [0, 1], [1, 1], [0, 0],
    [1, 0]; `feedback` at steps 0 and 20 only; `feedback_frozen` at step 20. Run x of another study Q."""
    ws = Workspace(tmp_path / "home")
    for step, rewards in ((0, [0, 1]), (10, [1, 1]), (12, [0, 0]), (20, [1, 0])):
        storage.write_shard(
            ws,
            "r",
            "eval-single",
            step,
            [_row("r", "P", step, "single", i, attempt_reward=float(r)) for i, r in enumerate(rewards)],
        )
    _feedback(ws, "r", "P", 0, "feedback", [(2, 2, False, "incorrect", 0.0), (None, None, True, "correct", 1.0)])
    _feedback(
        ws,
        "r",
        "P",
        20,
        "feedback",
        [(1, 2, False, "incorrect", 0.0), (3, None, True, "correct", 0.0), (None, None, True, "none", 1.0)],
    )
    _feedback(ws, "r", "P", 20, "feedback_frozen", [(1, 1, False, "incorrect", 0.0)])
    storage.write_shard(ws, "x", "eval-single", 0, [_row("x", "Q", 0, "single", 0, method="grpo")])
    return ws


def test_each_endpoint_by_hand(store):
    df = sqlrun.run(store, ENDPOINTS, {"comparison": "P", "eval_every": "10"})
    assert list(df["run_id"]) == ["r"], "only study P's run"
    row = df.iloc[0]
    assert (row["method"], row["seed"], row["difficulty"], row["last_step"]) == ("critic_only", 3, 2, 20)
    assert (row["acc_single_0"], row["acc_single_last"]) == (50.0, 50.0)
    # (10·(0.5 + 1)/2 + 10·(1 + 0.5)/2) / 20 = 0.75: the evaluation at 12 does not enter
    assert row["acc_single_area"] == 75.0
    assert pd.isna(row["acc_feedback_area"]), "feedback was not evaluated at 10: no area"
    assert (row["hits_0"], row["hits_last"], row["frozen_hits_last"]) == (100.0, 0.0, 100.0)
    assert row["wrong_steps_last"] == 2, "hits_last's denominator: the two attempts with a wrong step at step 20"
    assert (row["approves_wrong_0"], row["approves_wrong_last"]) == (0.0, 50.0)
    assert (row["approves_right_0"], row["approves_right_last"]) == (100.0, 100.0)
    # wrong first attempts called incorrect 1 of 2, right ones called correct 0 of 1 (`none`): (0.5 + 0) / 2
    assert row["balanced_accuracy_last"] == 25.0


def test_the_grid_follows_eval_every(store):
    """With eval_every 20 the grid is 0 and 20: (20·(0.5 + 0.5)/2) / 20 = 0.5."""
    df = sqlrun.run(store, ENDPOINTS, {"comparison": "P", "eval_every": "20"})
    assert df.iloc[0]["acc_single_area"] == 50.0
