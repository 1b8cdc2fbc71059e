"""A micro `binac train` with the critic's attempt bank on (binac_core/rl/bank.py): the bank metrics logged at every
evaluation for the method's critic and the frozen base critic, the frozen critic's the same at every one, both
critics writing the same feedback at step 0 (the same sampling stream, the trained adapter still the identity),
sql/bank_measures.sql equal to the logged metrics, and a second run on the same base reusing the stored bank and
the frozen critic's feedback."""

from __future__ import annotations

import os

import pytest
from conftest import MODEL_CACHE, REPO, binac_env, run_binac

from binac_core.foundation.workspace import Workspace
from binac_core.reports.bank_measures import BANK_MEASURES
from binac_core.store import sqlrun, tracking

BANK = ("--set", "bank.enabled=true")


@pytest.fixture(scope="module")
def banked(tmp_path_factory, prefect_home):
    home = tmp_path_factory.mktemp("binac-home-bank")
    env = binac_env(home, prefect_home)
    run_binac(["train", "--preset", "micro", "--method", "binac", "--steps", "2", "--seed", "0", *BANK], env)
    return {"home": home, "env": env}


def _history(ws, run_id, key):
    c = tracking.client(ws)
    return {m.step: m.value for m in c.get_metric_history(run_id, key)}


def test_a_run_logs_both_critics_bank_measures_at_every_evaluation(banked):
    ws = Workspace(banked["home"])
    c = tracking.client(ws)
    (run,) = c.search_runs([tracking.experiment_id(c, ws)])
    keys = {k for k in run.data.metrics if k.startswith("bank_")}
    for split in ("val", "eval"):
        for critic in ("critic", "frozen_critic"):
            assert f"bank_{split}/{critic}_hits_first_error_lo" in keys
            assert {f"bank_{split}/{critic}_{m}" for m in BANK_MEASURES} & keys
    for key in keys:
        history = _history(ws, run.info.run_id, key)
        assert sorted(history) == [0, 2], key  # eval_every 2
        if "/frozen_critic_" in key:
            assert len(set(history.values())) == 1, key  # computed once per bank
    df = sqlrun.run(ws, (REPO / "sql" / "bank_measures.sql").read_text(), {"comparison": "all"})
    assert len(df) == 2 * 2 * 2  # steps 0, 2 x splits x critics
    for row in df.itertuples():
        for name in BANK_MEASURES:
            for suffix in ("", "_lo", "_hi"):
                key = f"bank_{row.bank_split}/{row.critic}_{name}{suffix}"
                value = getattr(row, name + suffix)
                logged = _history(ws, run.info.run_id, key).get(row.step)
                assert (value == pytest.approx(logged)) if logged is not None else value != value, key
    same = sqlrun.run(
        ws,
        "SELECT count(*) n, count(*) FILTER (WHERE a.feedback = b.feedback) same FROM trajectories a "
        "JOIN trajectories b USING (run_id, step, split, problem_id) "
        "WHERE a.protocol = 'bank' AND b.protocol = 'bank_frozen' AND step = 0",
    )
    assert same["n"][0] == same["same"][0] == 2 * (4 + 8)  # micro's bank: 4 right, 8 wrong per split
    rows = sqlrun.run(ws, "SELECT count(*) n, count(refined) refined FROM trajectories WHERE split LIKE 'bank_%'")
    assert (rows["n"][0], rows["refined"][0]) == (2 * 2 * 2 * 12, 0)


def test_a_second_run_on_the_same_base_reuses_the_bank(banked):
    banks = MODEL_CACHE / "banks"
    files = sorted(banks.glob("bank-*.json"))
    assert len(files) >= 2  # the bank and the frozen critic's feedback on it (the cache may hold others)
    mtimes = [os.stat(p).st_mtime_ns for p in files]
    args = ["train", "--preset", "micro", "--method", "critic_only", "--steps", "1", "--seed", "1", *BANK]
    run_binac(args, banked["env"])
    assert sorted(banks.glob("bank-*.json")) == files
    assert [os.stat(p).st_mtime_ns for p in files] == mtimes
