"""Reliability of real `binac train` processes on the micro preset: two runs at once on one $BINAC_HOME, a run
killed with SIGKILL mid-iteration and started again, a run whose task raises and its retry.

The runs are real subprocesses with their own workspaces (each starts from a copy of the micro base model, so
none pretrains). The run of seed 0 in the concurrent pair doubles as the uninterrupted reference of the kill test.
"""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import REPO, binac_env, home_with_micro_base, run_binac, trajectory_rows

from binac_core.foundation.config import load_config
from binac_core.foundation.workspace import Workspace
from binac_core.store import sqlrun, tracking

pytestmark = pytest.mark.integration
TRAIN = ["train", "--preset", "micro", "--method", "binac", "--steps", "3"]


def start(argv: list[str], env: dict, log: Path, driver: list[str] | None = None) -> subprocess.Popen:
    """A `binac` process in its own process group (so a kill reaches every process it started)."""
    cmd = [sys.executable, *(driver or ["-m", "flows.cli"]), *argv]
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def wait_for_point(folder: Path, point: str, proc: subprocess.Popen, log: Path) -> None:
    """Wait until the run reaches fault point `point` (binac_core/foundation/faults.py, action `pause`): the process itself
    says so by creating `<point>.paused`. No deadline: the run decides when, on any machine; pytest's timeout
    guards a hang."""
    while not (folder / f"{point}.paused").exists():
        if proc.poll() is not None:
            raise AssertionError(f"process ended ({proc.returncode}) before {point}:\n{log.read_text()[-3000:]}")
        time.sleep(0.05)


def resume(folder: Path, point: str) -> None:
    (folder / f"{point}.resume").touch()


def only_run(home: Path):
    ws = Workspace(home)
    c = tracking.client(ws)
    runs = c.search_runs([tracking.experiment_id(c, ws)])
    assert len(runs) == 1, [r.info.run_name for r in runs]
    return c, runs[0]


@pytest.fixture(scope="module")
def concurrent(tmp_path_factory, prefect_home, micro_compare):
    """Two `binac train` runs (seeds 0 and 1) started at once on the same $BINAC_HOME."""
    home = home_with_micro_base(tmp_path_factory, "binac-home-concurrent", micro_compare)
    env = binac_env(home, prefect_home)
    logs = [home / f"seed{s}.log" for s in (0, 1)]
    procs = [start([*TRAIN, "--seed", str(s)], env, log) for s, log in zip((0, 1), logs, strict=True)]
    try:
        for p in procs:
            p.wait()
    finally:
        for p in procs:
            stop(p)
    return {"home": home, "rcs": [p.returncode for p in procs], "logs": logs}


def test_two_runs_at_once_on_one_home_both_complete_with_their_own_rows(concurrent):
    assert concurrent["rcs"] == [0, 0], "\n".join(log.read_text()[-2000:] for log in concurrent["logs"])
    ws = Workspace(concurrent["home"])
    c = tracking.client(ws)
    runs = c.search_runs([tracking.experiment_id(c, ws)])
    assert sorted(r.data.tags["seed"] for r in runs) == ["0", "1"]
    cfg = load_config("micro")
    per_step = cfg.train.batch_problems * cfg.train.group_size * cfg.train.critic_group_size
    n_eval = cfg.task.n_test * cfg.generation.eval_samples
    eval_steps = sorted({0, 3} | {s for s in (1, 2, 3) if s % cfg.train.eval_every == 0})
    for run in runs:
        rid = run.info.run_id
        assert run.info.status == "FINISHED"
        assert [m.step for m in c.get_metric_history(rid, "train/reward_first")] == [1, 2, 3]
        counts = sqlrun.run(
            ws,
            f"SELECT split, protocol, step, count(*) n, count(DISTINCT (problem_id, sample_idx,"
            f" feedback_idx, round)) k, any_value(seed) seed FROM trajectories "
            f"WHERE run_id = '{rid}' GROUP BY ALL ORDER BY ALL",
        )
        assert (counts["n"] == counts["k"]).all(), "no row stored twice"
        assert (counts["seed"].astype(str) == run.data.tags["seed"]).all(), "no row of the other run"
        train = counts[counts.split == "train"]
        assert train["step"].tolist() == [1, 2, 3] and (train["n"] == per_step).all()
        for protocol in ("single", "feedback"):
            ev = counts[(counts.split == "eval") & (counts.protocol == protocol)]
            assert ev["step"].tolist() == eval_steps and (ev["n"] == n_eval).all(), protocol


def test_sigkill_mid_iteration_then_rerun_ends_with_the_rows_of_a_run_that_never_died(
    concurrent, tmp_path_factory, prefect_home, micro_compare
):
    """The run kills itself (SIGKILL, fault point `shard:train@2`) right after iteration 2's rows are stored and
    before its metrics are logged; a query runs while it is paused after iteration 1. Exact points, any speed."""
    home = home_with_micro_base(tmp_path_factory, "binac-home-killed", micro_compare)
    env, faults = binac_env(home, prefect_home), home / "faults"
    faults.mkdir()
    args, log = [*TRAIN, "--seed", "0"], home / "killed.log"
    proc = start(
        args, {**env, "BINAC_FAULT": "shard:train@1:pause,shard:train@2:kill", "BINAC_FAULT_DIR": str(faults)}, log
    )
    try:
        wait_for_point(faults, "shard:train@1", proc, log)
        # Another process queries the store while the run is in the middle of writing it.
        query = run_binac(["sql", "sql/method_summary.sql", "--param", "per_run=1"], env)
        assert "binac" in query.stdout
        resume(faults, "shard:train@1")
        proc.wait()
    finally:
        stop(proc)
    assert proc.returncode == -signal.SIGKILL, log.read_text()[-3000:]
    shards = {p.name for p in home.glob("trajectories/*/*.parquet") if p.parent.name != "_schema"}
    assert {"train-step00001.parquet", "train-step00002.parquet"} <= shards
    assert "train-step00003.parquet" not in shards and "eval-single-step00003.parquet" not in shards
    c, killed = only_run(home)
    assert killed.info.status == "RUNNING"
    assert [m.step for m in c.get_metric_history(killed.info.run_id, "train/reward_first")] == [1]

    run_binac(args, env)  # the same command again

    assert concurrent["rcs"][0] == 0
    reference = trajectory_rows(concurrent["home"], where="seed = 0")
    assert trajectory_rows(home) == reference  # same rows: none lost, none duplicated, same contents
    c, run = only_run(home)
    assert run.info.status == "FINISHED"
    assert [m.step for m in c.get_metric_history(run.info.run_id, "train/reward_first")] == [1, 2, 3]


def test_two_methods_of_one_seed_at_once_share_the_initial_adapters_without_corrupting_them(
    tmp_path_factory, prefect_home, micro_compare
):
    """`grpo` and `fixed_critic` with seed 0 both write the seed's initial adapters into one shared folder. Each
    run pauses with its actor adapter written but not yet moved into place (fault point `adapter-written:actor`)
    until both are there, so both publish onto one destination: both runs finish, with their own rows, and the
    shared folder holds one whole adapter per name and nothing else."""
    from safetensors.torch import load_file

    home = home_with_micro_base(tmp_path_factory, "binac-home-same-seed", micro_compare)
    env, point, procs = binac_env(home, prefect_home), "adapter-written:actor@0", []
    for method in ("grpo", "fixed_critic"):
        faults = home / f"faults-{method}"
        faults.mkdir()
        argv = ["train", "--preset", "micro", "--method", method, "--steps", "1", "--seed", "0"]
        fault_env = {**env, "BINAC_FAULT": f"{point}:pause", "BINAC_FAULT_DIR": str(faults)}
        procs.append((faults, home / f"{method}.log", start(argv, fault_env, home / f"{method}.log")))
    try:
        for faults, log, proc in procs:
            wait_for_point(faults, point, proc, log)
        for faults, _, _ in procs:
            resume(faults, point)
        for _, _, proc in procs:
            proc.wait()
    finally:
        for _, _, proc in procs:
            stop(proc)
    assert [p.returncode for _, _, p in procs] == [0, 0], "\n".join(log.read_text()[-2000:] for _, log, _ in procs)
    (shared,) = list((home / "runs").glob("init-*-s0"))
    assert sorted(p.name for p in shared.iterdir() if p.is_dir()) == ["actor", "critic"]
    assert not [p for p in shared.parent.iterdir() if p.name.startswith(".")], "no temporary folder left"
    for name in ("actor", "critic"):
        assert load_file(str(shared / name / "adapter_model.safetensors")), name
    stored = sqlrun.run(Workspace(home), "SELECT method, split, count(*) n FROM trajectories GROUP BY ALL")
    train = stored[stored.split == "train"].set_index("method")["n"].to_dict()
    assert train == {"grpo": 4 * 4, "fixed_critic": 4 * 4 * 2}  # micro: 4 problems x 4 attempts (x 2 critiques)


# Runs `binac` with the actor update failing at its second call (iteration 2), mid-stage (after
# `Policy.begin_update`). The patch replaces the library function the task's update calls, not the task, so the
# task's cache key (inputs + task source) is the real one.
FAILING_DRIVER = textwrap.dedent("""
    import sys
    import binac_core.rl.update as stage
    from flows.cli import main
    real, calls = stage.policy_update, []
    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("injected failure in update-actor at iteration 2")
        return real(*args, **kwargs)
    stage.policy_update = failing
    sys.exit(main(sys.argv[1:]))
""")


def test_a_failing_task_marks_the_run_failed_keeps_its_rows_and_a_retry_resumes_from_cache(
    tmp_path_factory, prefect_home, micro_compare
):
    home = home_with_micro_base(tmp_path_factory, "binac-home-failing", micro_compare)
    env = binac_env(home, prefect_home)
    # The driver imports prefect before `binac` would set these: set them as `binac` does (flows/cli.py).
    failing_env = {
        **env,
        "PREFECT_RESULTS_LOCAL_STORAGE_PATH": str(home / "prefect"),
        "PREFECT_LOCAL_STORAGE_PATH": str(home / "prefect"),
    }
    args, log = ["train", "--preset", "micro", "--method", "grpo", "--steps", "2", "--seed", "0"], home / "fail.log"
    proc = start(args, failing_env, log, driver=["-c", FAILING_DRIVER])
    try:
        proc.wait()
    finally:
        stop(proc)
    assert proc.returncode not in (0, -signal.SIGKILL) and "injected failure" in log.read_text()
    c, run = only_run(home)
    assert run.info.status == "FAILED"
    ws = Workspace(home)
    stored = sqlrun.run(ws, "SELECT split, step, count(*) n FROM trajectories GROUP BY ALL ORDER BY ALL")
    assert stored[stored.split == "train"]["step"].tolist() == [1], "iteration 1 is kept, iteration 2 never stored"
    assert stored[stored.split == "eval"]["step"].tolist() == [0]
    first = "(split = 'train' AND step = 1) OR (split = 'eval' AND step = 0)"
    kept = trajectory_rows(home, where=first)
    step1 = sorted(home.glob("runs/grpo-s0-*/step-00001/*.json"))
    mtimes = [p.stat().st_mtime_ns for p in step1]
    assert step1

    run_binac(args, env)  # the retry: the same command, without the failure

    c, again = only_run(home)
    assert again.info.run_id == run.info.run_id and again.info.status == "FINISHED"
    assert [m.step for m in c.get_metric_history(run.info.run_id, "train/reward_first")] == [1, 2]
    assert [p.stat().st_mtime_ns for p in step1] == mtimes, "iteration 1 came from the cache"
    assert trajectory_rows(home, where=first) == kept
    steps = sqlrun.run(ws, "SELECT DISTINCT step FROM trajectories WHERE split = 'train' ORDER BY step")
    assert steps["step"].tolist() == [1, 2]
