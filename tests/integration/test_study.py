"""`binac study`: the study file, the regime rule, the verdict rules, the run lock, and a two-run study fanned
out over two real Prefect workers (`scripts/serve.py start`, what `make serve` runs), one of which is killed with
SIGKILL mid-run at a deterministic fault point; the study resubmits the dead run and ends with every row once."""

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, home_with_micro_base, serve_env

from binac_core.errors import BinacError
from binac_core.foundation.workspace import Workspace
from binac_core.runs import runlock
from binac_core.store import sqlrun, tracking
from binac_core.studies.regimes import closest_difficulty, sparse_difficulty
from binac_core.studies.study import grid, load_study
from binac_core.studies.verdicts import paired, verdict

SERVE = [sys.executable, str(REPO / "scripts" / "serve.py")]
SMOKE = REPO / "studies" / "micro-smoke.yaml"


# --------------------------------------------------------------------------- the study file


def test_the_shipped_study_expands_to_its_grid():
    st = load_study(REPO / "studies" / "sparse-feedback.yaml")
    runs = grid(st, {"moderate": 4, "sparse": 8})
    assert len(runs) == 2 * 8 * 5 and len({r.name for r in runs}) == len(runs)
    assert {r.method for r in runs} == {
        "grpo",
        "fixed_critic",
        "critic_only",
        "self_correct",
        "binac",
        "binac_lam0",
        "binac_after",
        "oracle_critic",
    }
    assert [r.seed for r in runs[:16]] == [0] * 16, "seed-major: a grid stopped early is balanced"
    cfg = st.config(4)
    assert (cfg.train.batch_problems, cfg.train.group_size, cfg.train.critic_group_size) == (8, 8, 4)
    assert runs[0].overrides["train.eval_at_samples"] == 40 * 8 * 8, "GRPO's final actor-sample count"
    assert "## The design (pre-registered" in st.design


@pytest.mark.parametrize(
    "edit, message",
    [
        ({"methods": ["grpo", "gpro"]}, "unknown method 'gpro'"),
        ({"seeds": [0, 0]}, "seeds must be distinct"),
        ({"iterations": 0}, "iterations must be a positive integer"),
        ({"regimes": {"x": {"difficulty": 4, "rule": {}}}}, "needs exactly one of difficulty, rule"),
        ({"regimes": {"x": {"rule": {"search": [2, 8]}}}}, "rule needs one of all_wrong_frac_at_least"),
        (
            {"regimes": {"x": {"rule": {"search": [2, 8], "single_closest_to": 0.3, "all_wrong_frac_at_least": 0.5}}}},
            "bad rule",
        ),
        ({"variants": {"binac": {"a": {"train.actor_lr": 0.001}}}}, "variants of 'binac', which is not in methods"),
        ({"variants": {"grpo": {"a": {"train.actor_rate": 0.001}}}}, "train.actor_rate"),
        ({"variants": {"grpo": []}}, "variants of 'grpo' must be"),
        ({"gates": {"shortcut": 0.05}}, "unknown gate 'shortcut'"),
        ({"gates": {"oracle_gain_at_least": 2}}, "must be a share in"),
        ({"colour": "red"}, "unknown key 'colour'"),
        ({"preset": "nope"}, "unknown preset 'nope'"),
    ],
)
def test_a_bad_study_file_is_one_line_naming_the_value(tmp_path, edit, message):
    import yaml

    raw = {**yaml.safe_load(SMOKE.read_text()), **edit}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(BinacError, match=message):
        load_study(path)


def test_the_study_key_follows_what_determines_the_runs(tmp_path):
    import yaml

    raw = yaml.safe_load(SMOKE.read_text())
    keys = []
    for edit in ({}, {"deployment": "train/other"}, {"seeds": [1]}):
        path = tmp_path / f"s{len(keys)}.yaml"
        path.write_text(yaml.safe_dump({**raw, **edit}))
        keys.append(load_study(path).key())
    assert keys[0] == keys[1] != keys[2]


def test_the_second_edition_expands_to_its_pilot_and_main_grids():
    pilot = load_study(REPO / "studies" / "sparse-feedback-v2-pilot.yaml")
    runs = grid(pilot, {"moderate": 5})
    assert len(runs) == (3 + 6) * 3 and len({r.name for r in runs}) == len(runs)
    assert {r.seed for r in runs} == {100, 101, 102}, "the pilot's seeds are never the main study's"
    lrs = {r.overrides["train.actor_lr"] for r in runs if r.method == "grpo"}
    assert lrs == {0.001, 0.002, 0.005}
    critic = {(r.overrides["train.critic_lr"], r.overrides["train.t_high"]) for r in runs if r.method == "critic_only"}
    assert len(critic) == 6
    assert all(r.overrides["train.lam"] == 0.25 for r in runs), "mu = lam (1 + alpha) = 0.5, the registered lambda"
    assert runs[0].overrides["train.eval_at_samples"] == 20 * 64 == runs[0].overrides["train.eval_at_generated"]
    cfg = pilot.config(5)
    assert (cfg.task.modulus, cfg.task.critic_false_approval_rate, cfg.train.lam * (1 + cfg.train.alpha_shaping)) == (
        100,
        0.5,
        0.5,
    )
    assert "second edition (pre-registered" in pilot.design


def test_the_main_second_edition_grid_and_its_gates():
    from binac_core.studies.study import gate_failures

    st = load_study(REPO / "studies" / "sparse-feedback-v2.yaml")
    runs = grid(st, {"moderate": 3, "sparse": 6})
    assert len(runs) == 2 * 8 * 5 and st.iterations == 60 and st.seeds == (0, 1, 2, 3, 4)
    assert runs[0].overrides["train.eval_at_samples"] == 60 * 64 == runs[0].overrides["train.eval_at_generated"]
    # the registered base's measurement at difficulty 3 (docs/results-study-v2.md): both gates fail
    measured = {
        3: {"shortcut_n": 1040, "shortcut_right": 478 / 1040, "oracle": 0.342, "single": 0.351},
        6: {"shortcut_n": 1000, "shortcut_right": 0.01, "oracle": 0.20, "single": 0.10},
    }
    failures = gate_failures(st, measured, {"moderate": 3, "sparse": 6})
    assert len(failures) == 2 and all("regime moderate (difficulty 3)" in f for f in failures)
    assert "478 of 1040" in failures[0] and "-0.9 points" in failures[1]
    # 10 of 1000 right after approval: the Wilson interval's upper end is 1.8 %, within 5 %
    assert gate_failures(st, measured, {"sparse": 6}) == []


def test_the_closest_rule_takes_the_difficulty_nearest_the_target_and_the_smaller_on_a_tie():
    measured = {d: {"single": a} for d, a in {2: 0.7, 3: 0.5, 4: 0.4, 5: 0.3, 6: 0.2}.items()}
    assert closest_difficulty(measured, 0.35) == 4  # 0.40 and 0.30 are both 0.05 away (up to float noise): the smaller
    assert closest_difficulty(measured, 0.33) == 5
    assert closest_difficulty(measured, 0.9) == 2


def test_the_sparse_rule_takes_the_smallest_difficulty_over_the_threshold():
    measured = {d: {"all_wrong_frac": f} for d, f in {2: 0.0, 3: 0.2, 4: 0.5, 5: 0.7, 6: 0.4}.items()}
    assert sparse_difficulty(measured, 0.5) == 4
    assert sparse_difficulty(measured, 0.71) is None


def test_verdict_rules_on_hand_made_differences():
    assert paired({0: 0.5, 1: 0.6, 2: 0.7}, {0: 0.4, 1: 0.5, 2: 0.6})[:2] == pytest.approx((0.1, 0.0))
    up, down, flat = (0.1, 0.05, 5), (-0.1, 0.05, 5), (0.01, 0.05, 5)
    assert verdict([up, up]) == "supported"
    assert verdict([up, down]) == "not supported"
    assert verdict([up, flat]) == "inconclusive"
    assert verdict([(0.1, math.nan, 1)]) == "inconclusive"


# --------------------------------------------------------------------------- the run lock


LOCK_HOLDER = """
import sys, time
from pathlib import Path
from binac_core.runs.runlock import run_lock
home, key, ready, finish = sys.argv[1:5]
with run_lock(Path(home), key, "flow-run-1"):
    Path(ready).touch()
    while not Path(finish).exists():
        time.sleep(0.02)
"""


@pytest.mark.parametrize("ending", ["exits", "killed"])
def test_the_run_lock_tells_a_killed_run_from_a_live_or_finished_one(tmp_path, ending):
    ready, finish = tmp_path / "ready", tmp_path / "finish"
    proc = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, str(tmp_path), "k1", str(ready), str(finish)], cwd=REPO)
    while not ready.exists():  # the holder says when it holds the lock: no sleep stands in for that
        assert proc.poll() is None
        time.sleep(0.02)
    live = runlock.probe(tmp_path, "k1")
    assert live.held and live.owner["pid"] == proc.pid and not live.dead("flow-run-1")
    if ending == "killed":
        proc.kill()
    else:
        finish.touch()
    proc.wait()
    after = runlock.probe(tmp_path, "k1")
    assert not after.held
    assert after.dead("flow-run-1") is (ending == "killed")
    assert not after.dead("another-flow-run")


# --------------------------------------------------------------------------- real servers, two workers


STUDY_CLI = [sys.executable, "-m", "flows.cli", "study", str(SMOKE)]
"""`binac study` of the smoke study file, as a user runs it."""


def _study_cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    """`STUDY_CLI` with `args` in the foreground, its output captured."""
    return subprocess.run([*STUDY_CLI, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)


def _started_groups(home: Path) -> list[int]:
    return [int(f.read_text().split()[0]) for f in (home / "serve").glob("*.pid")]


def _ppid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _flow_runs(api: str, tag: str) -> list[dict]:
    import urllib.request

    body = json.dumps({"flow_runs": {"tags": {"all_": [tag]}}, "limit": 200}).encode()
    req = urllib.request.Request(f"{api}/flow_runs/filter", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)


def _held_locks(home: Path) -> dict[str, dict]:
    out = {}
    for f in (home / "locks").glob("*.lock") if (home / "locks").exists() else []:
        p = runlock.probe(home, f.stem)
        if p.held and p.owner.get("state") == "running":
            out[f.stem] = p.owner
    return out


@pytest.mark.integration
@pytest.mark.timeout(3600)  # a hang guard, not a speed check: 13 min alone at load 8, longer beside the suite
def test_a_two_run_study_over_two_workers_survives_a_killed_worker_and_travels_in_its_archive(
    tmp_path_factory, micro_compare
):
    home = home_with_micro_base(tmp_path_factory, "binac-home-study", micro_compare)
    faults = home / "faults"
    faults.mkdir()
    env = serve_env(
        home,
        micro_compare,
        BINAC_WORKERS="2",
        # every run the workers start pauses right after iteration 1's rows are stored
        BINAC_FAULT="shard:train@1:pause",
        BINAC_FAULT_DIR=str(faults),
    )
    groups: list[int] = []
    study = None
    try:
        started = subprocess.run([*SERVE, "start"], cwd=REPO, env=env, capture_output=True, text=True, timeout=400)
        groups = _started_groups(home)
        assert started.returncode == 0, started.stdout + started.stderr
        assert "2 workers" in started.stdout and len(groups) == 4
        ports = dict(
            line.removeprefix("export ").split("=", 1) for line in (home / "serve" / "env.sh").read_text().splitlines()
        )
        cli_env = {**env, "PREFECT_API_URL": ports["PREFECT_API_URL"]}
        cli_env.pop("BINAC_FAULT")  # the study process itself stores nothing
        log = open(home / "study.log", "w")  # noqa: SIM115
        archive = tmp_path_factory.mktemp("study-archive") / "archive"  # each run archived as it finishes
        study = subprocess.Popen(
            [*STUDY_CLI, "--archive", str(archive)],
            cwd=REPO,
            env=cli_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        held = {}
        while len(held) < 2:  # both runs paused at once: each of the two workers took one
            assert study.poll() is None, (home / "study.log").read_text()[-3000:]
            held = _held_locks(home)
            time.sleep(0.2)
        workers = {int((home / "serve" / f"prefect-worker-{i}.pid").read_text().split()[0]) for i in (1, 2)}
        victim_key, owner = sorted(held.items())[0]
        worker = owner["pid"]
        while worker not in workers:  # the flow-run process's worker: walk up its parents
            worker = _ppid(worker)
        os.killpg(worker, signal.SIGKILL)  # the worker, and its run with it when it shares the group
        try:
            os.kill(owner["pid"], signal.SIGKILL)
        except ProcessLookupError:
            pass
        while runlock.probe(home, victim_key).held:
            time.sleep(0.05)
        (faults / "shard:train@1.resume").touch()  # the other run, and the resubmitted one, go on
        assert study.wait() == 0, (home / "study.log").read_text()[-4000:]
        out = (home / "study.log").read_text()
        assert "died while running" in out and "2/2 runs finished" in out

        ws = Workspace(home)
        c = tracking.client(ws)
        runs = c.search_runs([tracking.experiment_id(c, ws)])
        (parent,) = [r for r in runs if r.data.tags.get("kind") == "study"]
        children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
        assert parent.info.status == "FINISHED"
        assert sorted(r.data.tags["method"] for r in children) == ["fixed_critic", "grpo"]
        assert all(r.info.status == "FINISHED" for r in children)
        assert {a.path for a in c.list_artifacts(parent.info.run_id, "report")} >= {"report/report.md"}

        dupes = sqlrun.run(
            ws,
            "SELECT run_id, split, protocol, step, problem_id, sample_idx, feedback_idx, round, "
            "count(*) AS n FROM trajectories GROUP BY ALL HAVING count(*) > 1",
        )
        assert dupes.empty, dupes
        train = sqlrun.run(
            ws, "SELECT method, step, count(*) AS n FROM trajectories WHERE split = 'train' GROUP BY ALL ORDER BY ALL"
        )
        assert train.values.tolist() == [
            ["fixed_critic", 1, 32],
            ["fixed_critic", 2, 32],
            ["grpo", 1, 16],
            ["grpo", 2, 16],
        ]
        n_rows = len(sqlrun.run(ws, "SELECT * FROM trajectories"))

        again = _study_cli(cli_env)
        assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
        assert "2/2 runs done: 2 done" in again.stdout, "nothing submitted again"
        assert len(sqlrun.run(ws, "SELECT * FROM trajectories")) == n_rows
        assert len(c.search_runs([tracking.experiment_id(c, ws)])) == len(runs)
        flow_runs = _flow_runs(ports["PREFECT_API_URL"], f"binac-run:{victim_key}")
        assert sorted(fr["state_type"] for fr in flow_runs) == ["COMPLETED", "CRASHED"], flow_runs
        status = json.loads((home / "locks" / f"{victim_key}.lock").read_text())
        assert status["state"] == "exited", "the resubmitted run finished and released the lock"

        # a fresh home restores both runs from the archive and reports exactly what the first home reported
        assert (archive / "runs").is_dir() and len(list((archive / "runs").iterdir())) == 2
        fresh_home = tmp_path_factory.mktemp("fresh-home")
        fresh = {**cli_env, "BINAC_HOME": str(fresh_home)}
        restored = _study_cli(fresh, "--report-only", "--archive", str(archive))
        assert restored.returncode == 0, restored.stdout[-3000:] + restored.stderr[-3000:]
        assert "restored 2 finished run(s)" in restored.stdout and "2/2 runs finished" in restored.stdout
        report = (home / "reports").glob("study-*/report.md")
        fresh_report = (fresh_home / "reports").glob("study-*/report.md")
        assert next(fresh_report).read_text() == next(report).read_text()
        ws2 = Workspace(fresh_home)
        rows = "SELECT method, split, protocol, step, count(*), sum(attempt_reward) FROM trajectories GROUP BY ALL ORDER BY ALL"
        assert sqlrun.run(ws2, rows).values.tolist() == sqlrun.run(ws, rows).values.tolist()
    finally:
        if study is not None and study.poll() is None:
            os.killpg(study.pid, signal.SIGKILL)
        stopped = subprocess.run([*SERVE, "stop"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
        for pgid in groups or _started_groups(home):
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        assert stopped.returncode == 0, stopped.stderr
