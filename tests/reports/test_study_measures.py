"""sql/study_measures.sql on small hand-built stores (no training, no MLflow): every column equals the hand-computed
value and the metric `step_records` computes from the same rows; a store holding shards written before the
`feedback_approves` column existed still reads, with NULL in it. (The same agreement on a real micro run, against
MLflow: test_study_measures_run.py.)"""

from __future__ import annotations

import dataclasses

import duckdb
import pytest
from conftest import REPO
from trajectory_rows import STUDY_MEASURES

from binac_core.foundation.workspace import Workspace
from binac_core.model.stage_io import Attempt, Feedback, Refinement, ScoredBatch
from binac_core.reports.step_metrics import train_metrics
from binac_core.store import sqlrun, storage
from binac_core.store.identity import RunIdentity
from binac_core.store.records import trajectory_rows

MEASURES = (REPO / "sql" / "study_measures.sql").read_text()
META = RunIdentity(run_id="r", parent_run_id="P", method="binac", preset="micro", seed=0, benchmark="synthetic")

# question 7+5-3+4: correct steps 7+5=2 2-3=9 9+4=3, answer 3
Q = "7+5-3+4"
RIGHT = "7+5=2 2-3=9 9+4=3 A: 3"
WRONG_AT_1 = "7+5=1 1-3=8 8+4=2 A: 2"
WRONG_AT_2 = "7+5=2 2-3=8 8+4=2 A: 2"
LUCKY = "7+5=2 2-3=8 8+4=3 A: 3"  # step 2 wrong, the answer right by luck

# (problem, attempt, r0, [(feedback, critic reward, r1), ...]): G = 2 attempts per problem, K = 2 feedbacks
STEP = [
    ("p1", WRONG_AT_2, 0.0, [("Step 2 is wrong.", 1.0, 1.0), ("Looks correct.", 0.0, 0.0)]),  # mixed: +1
    ("p1", RIGHT, 1.0, [("Looks correct.", 1.0, 1.0), ("Step 1 is wrong.", 1.0, 0.0)]),  # mixed: 0 (a tie)
    ("p2", WRONG_AT_1, 0.0, [("Check your work.", 0.0, 0.0), ("Step 2 is wrong.", 0.0, 1.0)]),  # all useless
    ("p2", LUCKY, 1.0, [("Step 2 is wrong.", 2.0, 1.0), ("Looks correct.", -1.0, 1.0)]),  # mixed: +1
]
HAND = {
    "zero_adv_frac": 0.0,  # p1's r0: 0, 1; p2's: 0, 1
    "refine_zero_adv_frac": 1 / 2,  # feedback_idx 0's r1: p1 1, 1 (collapsed); p2 0, 1
    "critic_hits_first_error": 2 / 6,  # 6 rows on attempts with a wrong step; p1's and the lucky one's "Step 2"
    "critic_false_alarm": 1 / 2,  # the right attempt's "Step 1 is wrong."
    "critic_approves_wrong": 2 / 6,  # "Looks correct." on WRONG_AT_2 and on LUCKY
    "critic_approves_right": 2 / 4,  # r0 > 0: RIGHT's and LUCKY's "Looks correct.", not their "Step k is wrong."
    "critic_signal": 2 / 3,  # pairs +1, 0, +1
    "critic_useful_mixed_frac": 3 / 4,
    "critic_signal_frac": 2 / 4,  # critic rewards differ for p1's first attempt and for LUCKY
    "feedback_gain": 1 / 8,  # r1 - r0: 1, 0, 0, -1, 0, 1, 0, 0
}


def _scored(groups) -> tuple[ScoredBatch, list[float]]:
    attempts, r0, feedback, refined, r1, critic = [], [], [], [], [], []
    for i, (problem, attempt, reward, fs) in enumerate(groups):
        attempts.append(Attempt(problem, i, "", [], attempt, [], []))
        r0.append(reward)
        for k, (text, c, r) in enumerate(fs):
            feedback.append(Feedback(problem, i, k, text, [], [], []))
            refined.append(Refinement(problem, i, k, [], "", [], []))
            r1.append(r)
            critic.append(c)
    return ScoredBatch(attempts, r0, feedback, refined, r1), critic


def _complete(rows: list[dict]) -> list[dict]:
    """The rows with every schema column (None where the row builder does not fill one)."""
    return [{c: None for c in storage.columns()} | r for r in rows]


def _train_rows(groups, run_id: str = "r") -> tuple[list[dict], ScoredBatch, list[float]]:
    scored, critic = _scored(groups)
    rows = trajectory_rows(
        dataclasses.replace(META, run_id=run_id),
        1,
        scored,
        split="train",
        protocol="train",
        critic_rewards=critic,
        questions={"p1": Q, "p2": Q},
    )
    return _complete(rows), scored, critic


def _measures(ws: Workspace, **params) -> list[dict]:
    df = sqlrun.run(ws, MEASURES, {"comparison": "all", **params})
    return [{k: (None if v != v else v) for k, v in row.items()} for row in df.to_dict("records")]  # NaN -> None


def test_the_sql_measures_equal_the_hand_computed_values_and_the_python_metrics(tmp_path):
    ws = Workspace(tmp_path / "home")
    rows, scored, critic = _train_rows(STEP)
    storage.write_shard(ws, "r", "train", 1, rows)
    [got] = _measures(ws)
    assert {k: got[k] for k in STUDY_MEASURES} == pytest.approx(HAND)
    python = train_metrics(rows, scored, critic_rewards=critic, critic_measures=True)
    assert {k: python[f"train/{k}"] for k in STUDY_MEASURES} == pytest.approx(HAND)


def test_a_method_without_critic_rewards_or_feedback_gets_null_for_what_it_lacks(tmp_path):
    ws = Workspace(tmp_path / "home")
    rows, scored, _ = _train_rows(STEP)
    rows = [{**r, "critic_reward": None} for r in rows]  # a method whose critic is not trained
    storage.write_shard(ws, "r", "train", 1, rows)
    grpo = ScoredBatch(scored.attempts, [0.0, 1.0, 1.0, 1.0])
    no_feedback = trajectory_rows(
        dataclasses.replace(META, run_id="g", method="grpo"),
        1,
        grpo,
        split="train",
        protocol="train",
        questions={"p1": Q, "p2": Q},
    )
    storage.write_shard(ws, "g", "train", 1, _complete(no_feedback))
    got = {r["run_id"]: r for r in _measures(ws)}
    assert got["r"]["critic_signal"] is None and got["r"]["critic_signal_frac"] is None
    assert got["r"]["critic_useful_mixed_frac"] == pytest.approx(3 / 4)
    python = train_metrics(rows, scored, critic_rewards=None, critic_measures=True)
    assert "train/critic_signal" not in python and python["train/critic_useful_mixed_frac"] == pytest.approx(3 / 4)
    assert got["g"]["zero_adv_frac"] == pytest.approx(1 / 2)  # p1: 0, 1; p2: 1, 1
    assert all(got["g"][k] is None for k in STUDY_MEASURES if k != "zero_adv_frac")


def test_the_eval_split_gives_the_held_out_feedback_protocols_critic_measures(tmp_path):
    ws = Workspace(tmp_path / "home")
    one_each = [(p, a, r, fs[:1]) for p, a, r, fs in STEP]  # held out: one feedback per attempt
    scored, _ = _scored(one_each)
    rows = trajectory_rows(META, 1, scored, split="eval", protocol="feedback", questions={"p1": Q, "p2": Q})
    storage.write_shard(ws, "r", "eval-feedback", 1, _complete(rows))
    [got] = _measures(ws, split="eval")
    # wrong-step attempts: WRONG_AT_2 "Step 2" (hit), WRONG_AT_1 "Check your work.", LUCKY "Step 2" (hit)
    assert got["critic_hits_first_error"] == pytest.approx(2 / 3)
    assert got["critic_false_alarm"] == 0.0 and got["critic_approves_wrong"] == 0.0
    assert got["critic_approves_right"] == pytest.approx(1 / 2)  # RIGHT's "Looks correct.", LUCKY's "Step 2 ..."
    assert all(
        got[k] is None
        for k in (
            "zero_adv_frac",
            "refine_zero_adv_frac",
            "critic_signal",
            "critic_useful_mixed_frac",
            "critic_signal_frac",
        )
    )


def test_shards_written_before_feedback_approves_existed_still_read(tmp_path):
    """A shard (and a schema shard) without the column: the view has it from the current schema shard, the old
    rows read NULL there, and the measures that do not need it are still computed from them."""
    ws = Workspace(tmp_path / "home")
    rows, _, _ = _train_rows(STEP, run_id="old")
    old = ws.shards / "old" / "train-step00001.parquet"
    old.parent.mkdir(parents=True)
    (ws.shards / "_schema").mkdir()
    cols = [c for c in storage.columns() if c != "feedback_approves"]
    con = duckdb.connect()
    con.execute(storage.schema_sql())
    con.executemany(
        f"INSERT INTO trajectory_rows ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})",
        [[r[c] for c in cols] for r in rows],
    )
    con.execute(f"COPY (SELECT {', '.join(cols)} FROM trajectory_rows) TO {storage.sql_string(old)} (FORMAT parquet)")
    con.execute(
        f"COPY (SELECT {', '.join(cols)} FROM trajectory_rows LIMIT 0) TO "
        f"{storage.sql_string(ws.shards / '_schema' / 'empty.parquet')} (FORMAT parquet)"
    )
    con.close()
    read = sqlrun.run(ws, "SELECT count(*) AS n, count(feedback_approves) AS approves FROM trajectories")
    assert read.to_dict("records") == [{"n": 8, "approves": 0}]
    [got] = _measures(ws)
    for k in (
        "zero_adv_frac",
        "refine_zero_adv_frac",
        "critic_hits_first_error",
        "critic_false_alarm",
        "critic_signal_frac",
        "feedback_gain",
    ):
        assert got[k] == pytest.approx(HAND[k]), k
    assert got["critic_approves_wrong"] is None and got["critic_signal"] is None
    assert got["critic_approves_right"] is None
    assert got["critic_useful_mixed_frac"] is None
    # a new shard beside the old one: both read, each with what it has
    new_rows, _, _ = _train_rows(STEP, run_id="new")
    storage.write_shard(ws, "new", "train", 1, new_rows)
    got = {r["run_id"]: r for r in _measures(ws)}
    assert got["new"]["critic_approves_wrong"] == pytest.approx(HAND["critic_approves_wrong"])
    assert got["old"]["critic_approves_wrong"] is None
