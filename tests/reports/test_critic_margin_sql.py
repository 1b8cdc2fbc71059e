"""sql/critic_margin.sql (the fourth edition's primary endpoint per run) on a small hand-built store: the margin
computed by hand from the planted bank rows, and equal to what the report computes (`critic_margin.run_margin`)
from the metrics the run logs for the same rows (`bank_measures.bank_metrics`)."""

from __future__ import annotations

import pytest
from conftest import REPO
from trajectory_rows import trajectory_row

from binac_core.foundation.workspace import Workspace
from binac_core.reports.bank_measures import bank_metrics
from binac_core.store import sqlrun, storage
from binac_core.studies.critic_margin import run_margin

MARGIN = (REPO / "sql" / "critic_margin.sql").read_text()
STEPS = {0: 0, 4: 3, 10: 1, 15: 3, 20: 2}
"""step -> the trained critic's hits among the 4 wrong attempts (steps 4 and 15: extra equal-budget evaluations)."""


def _rows(protocol: str, step: int, hits: int, alarms: int, split: str = "bank_eval") -> list[dict]:
    """4 attempts wrong at step 2 (the feedback names it on `hits`) and 2 with every step right (the feedback
    names step 1 on `alarms`)."""
    out = []
    for i in range(6):
        wrong = i < 4
        named = (2 if i < hits else 3) if wrong else (1 if i - 4 < alarms else None)
        out.append(
            trajectory_row(
                run_id="r",
                parent_run_id="P",
                method="binac",
                seed=7,
                step=step,
                split=split,
                protocol=protocol,
                problem_id=f"b{i}",
                round=1,
                attempt_reward=0.0 if wrong else 1.0,
                first_wrong_step=2 if wrong else None,
                feedback_step=named,
            )
        )
    return out


@pytest.fixture
def store(tmp_path):
    """Run r (iterations 20, evaluations every 10): the frozen critic hits 1 of 4 with 1 of 2 false alarms (J −0.25)
    at every step; the trained critic's hits `STEPS`, with 2 of 2 false alarms from step 10 on (J at 10: −0.75,
    at 20: −0.5). Window: 10 and 20 (not 15). Margin: (−0.5 + −0.25) / 2 = −0.375. The val half, planted with
    every hit, is not read."""
    ws = Workspace(tmp_path / "home")
    metrics: dict = {}
    for step, hits in STEPS.items():
        alarms = 2 if step >= 10 else 0
        for protocol, h, a, critic in (("bank", hits, alarms, "critic"), ("bank_frozen", 1, 1, "frozen_critic")):
            rows = _rows(protocol, step, h, a)
            storage.write_shard(ws, "r", f"{protocol}-eval", step, rows)
            storage.write_shard(ws, "r", f"{protocol}-val", step, _rows(protocol, step, 4, 0, "bank_val"))
            for name, v in bank_metrics("eval", critic, rows).items():
                metrics.setdefault(name, {})[step] = v
    return ws, {"seed": 7, "metrics": metrics}


def test_the_margin_is_the_hand_computed_one_and_the_reports(store):
    ws, run = store
    df = sqlrun.run(ws, MARGIN, {"comparison": "all", "iterations": "20", "eval_every": "10"})
    assert len(df) == 1 and df["run_id"][0] == "r" and df["window_evaluations"][0] == 2
    assert df["critic_margin"][0] == pytest.approx(-0.375)
    assert df["hits_margin"][0] == pytest.approx(((0.25 - 0.25) + (0.5 - 0.25)) / 2)
    assert df["false_alarm_margin"][0] == pytest.approx(0.5)
    assert run_margin(run, "eval", [10, 20]) == pytest.approx(df["critic_margin"][0])
    val = sqlrun.run(ws, MARGIN, {"comparison": "all", "iterations": "20", "eval_every": "10", "split": "val"})
    assert val["critic_margin"][0] == pytest.approx(0.0), "the val half: both critics alike there"
