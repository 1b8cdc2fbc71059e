"""The lab setup end to end: `scripts/serve.py start` (what `make serve` runs) starts a real Prefect server,
process worker and MLflow server on free loopback ports over a temporary $BINAC_HOME, creates the work pool and
deploys prefect.yaml; `prefect deployment run 'compare/micro' --param seeds='[0]' --watch` runs the comparison
to COMPLETED; the MLflow runs are checked over the REST API and the trajectories with SQL; `serve.py stop`
(what `make stop` runs) stops every process, and a finally-block kills any process group that survived.
"""

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from conftest import REPO, home_with_micro_base, run_binac, serve_env

from binac_core.foundation.workspace import Workspace
from binac_core.store import sqlrun

pytestmark = pytest.mark.integration
SERVE = [sys.executable, str(REPO / "scripts" / "serve.py")]
PREFECT = str(Path(sys.executable).parent / "prefect")  # the project's environment's
METHODS = {"grpo", "fixed_critic", "binac"}  # the defaults of the compare/micro deployment


def started_groups(home: Path) -> list[int]:
    """Process groups serve.py recorded (each started process leads its own group)."""
    return [int(f.read_text().split()[0]) for f in (home / "serve").glob("*.pid")]


def kill_survivors(groups: list[int]) -> None:
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def prefect_api(api: str, path: str, body: dict | None = None):
    """A call to the Prefect server's REST API (POST with a JSON body, else GET)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{api}/{path}", data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)


def wait_for_logs(api: str, flow_run_ids: list[str], line: str, guard: float = 300) -> list[str]:
    """The flow runs' log messages once one of them starts with `line` (the guard only bounds a hang)."""
    import time

    t0 = time.time()
    while True:
        logs = [
            g["message"]
            for g in prefect_api(api, "logs/filter", {"logs": {"flow_run_id": {"any_": flow_run_ids}}, "limit": 200})
        ]
        if any(m.startswith(line) for m in logs) or time.time() - t0 > guard:
            return logs
        time.sleep(0.5)


def deployment_run(env: dict, param: str, watch_timeout: int) -> subprocess.CompletedProcess:
    """`prefect deployment run 'compare/micro' --param PARAM --watch`, which waits for the flow run to end (for at most
    `watch_timeout` seconds)."""
    watch = ["--watch", "--watch-timeout", str(watch_timeout)]
    cmd = [PREFECT, "deployment", "run", "compare/micro", "--param", param, *watch]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=watch_timeout + 60)


def mlflow(base: str, path: str, body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        f"{base}/api/2.0/mlflow/{path}", data=data, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)


@pytest.fixture(scope="module")
def served(tmp_path_factory, micro_compare):
    """`scripts/serve.py start` over a fresh $BINAC_HOME (with the micro base model), shared by this module's tests;
    stopped with `serve.py stop` at the end."""
    home = home_with_micro_base(tmp_path_factory, "binac-home-served", micro_compare)
    env = serve_env(home, micro_compare)
    groups: list[int] = []
    try:
        proc = subprocess.run([*SERVE, "start"], cwd=REPO, env=env, capture_output=True, text=True, timeout=400)
        groups = started_groups(home)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert len(groups) == 4  # Prefect server, MLflow, two workers
        ports = dict(
            line.removeprefix("export ").split("=", 1) for line in (home / "serve" / "env.sh").read_text().splitlines()
        )
        yield {
            "home": home,
            "env": {**env, "PREFECT_API_URL": ports["PREFECT_API_URL"]},
            "mlflow": ports["MLFLOW_UI"],
            "stdout": proc.stdout,
        }
    finally:
        groups = groups or started_groups(home)
        stopped = subprocess.run([*SERVE, "stop"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
        kill_survivors(groups)
        assert stopped.returncode == 0, stopped.stderr
        assert not list((home / "serve").glob("*.pid"))


@pytest.mark.timeout(1200)
def test_compare_deployment_runs_on_real_servers(served):
    home, env = served["home"], served["env"]
    assert "prefect deployment run 'compare/micro'" in served["stdout"]
    ls = subprocess.run([PREFECT, "deployment", "ls"], env=env, capture_output=True, text=True, timeout=120)
    for name in ("train/micro", "compare/micro", "compare/tiny", "compare/nightly"):
        assert name in ls.stdout, ls.stdout

    def run_comparison():
        run = deployment_run(env, "seeds=[0]", watch_timeout=900)
        assert run.returncode == 0 and "Completed" in run.stdout, run.stdout[-4000:] + run.stderr[-4000:]

    run_comparison()

    # What the deployment run tells its user, in Prefect's own records: readable run names, progress in the
    # logs, a closing markdown artifact with the report table and the MLflow parent run.
    api = env["PREFECT_API_URL"]
    flow_runs = prefect_api(api, "flow_runs/filter", {})
    names = {r["name"] for r in flow_runs}
    assert {"grpo-micro-s0", "fixed_critic-micro-s0", "binac-micro-s0"} <= names, names
    (top,) = [r for r in flow_runs if r["name"] == "compare-micro-steps5"]
    ids = [r["id"] for r in flow_runs]
    # A run's process sends its last log lines as it exits, which may be just after --watch saw it complete.
    logs = wait_for_logs(api, ids, "compare: 3/3 runs done")
    assert any(m.startswith("[binac micro seed 0] iteration 1/1: reward_first") and "ETA" in m for m in logs), logs
    assert "compare: 3/3 runs done" in "\n".join(logs)
    finished = [m for m in logs if m.startswith("Finished in state")]
    assert len(finished) <= len(ids), "one per flow run at most: task runs log warnings and errors only"
    arts = prefect_api(api, "artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [top["id"]]}}})
    (art,) = [a for a in arts if a["type"] == "markdown"]
    assert "| method | feedback source | acc_single" in art["data"] and "| binac |" in art["data"], art["data"]

    base = served["mlflow"]
    exp = mlflow(base, "experiments/get-by-name?experiment_name=binac")["experiment"]
    assert exp["artifact_location"] == (home / "mlartifacts" / "binac").as_uri()
    runs = mlflow(base, "runs/search", {"experiment_ids": [exp["experiment_id"]], "max_results": 100})["runs"]
    tags = {r["info"]["run_id"]: {t["key"]: t["value"] for t in r["data"]["tags"]} for r in runs}
    status = {r["info"]["run_id"]: r["info"]["status"] for r in runs}
    parents = [rid for rid, t in tags.items() if t.get("method") == "compare"]
    assert len(parents) == 1 and status[parents[0]] == "FINISHED"
    children = {rid: t for rid, t in tags.items() if t.get("mlflow.parentRunId") == parents[0]}
    assert {t["method"] for t in children.values()} == METHODS and len(children) == len(METHODS)
    assert all(t["seed"] == "0" and t["preset"] == "micro" for t in children.values())
    assert all(status[rid] == "FINISHED" for rid in children)
    for rid in children:
        keys = {
            m["key"]
            for m in mlflow(base, f"metrics/get-history?run_id={rid}&metric_key=train/reward_first").get("metrics", [])
        }
        assert keys == {"train/reward_first"}
    assert (
        parents[0] in art["data"] and f"{base}/#/experiments/{exp['experiment_id']}/runs/{parents[0]}" in art["data"]
    ), art["data"]
    arts = mlflow(base, f"artifacts/list?run_id={parents[0]}&path=report").get("files", [])
    assert {"report/report.md", "report/report.html"} <= {a["path"] for a in arts}

    rows = sqlrun.run(
        Workspace(home),
        "SELECT method, run_id, count(*) n, count(*) FILTER (WHERE split = 'train') t FROM trajectories GROUP BY ALL",
    )
    assert set(rows["method"]) == METHODS and set(rows["run_id"]) == set(children)
    assert (rows["t"] > 0).all()

    # Run it again: the worker's runs keep their cache under $BINAC_HOME (job variables of prefect.yaml), so no
    # stage runs again, no row and no MLflow run is added.
    stages = sorted((home / "runs").rglob("*.json"))
    mtimes = [p.stat().st_mtime_ns for p in stages]
    run_comparison()
    assert [p.stat().st_mtime_ns for p in stages] == mtimes
    again = mlflow(base, "runs/search", {"experiment_ids": [exp["experiment_id"]], "max_results": 100})["runs"]
    assert len(again) == len(runs)
    assert len(sqlrun.run(Workspace(home), "SELECT * FROM trajectories")) == rows["n"].sum()


@pytest.mark.timeout(900)
def test_deployment_runs_refuse_a_bad_parameter_with_the_clis_line_and_env_sh_puts_prefect_on_path(served):
    """`source env.sh` in a shell whose PATH lacks the project's environment finds its `prefect`; a deployment
    run with a misspelt method ends Failed with exactly the line `binac compare` prints for the same mistake."""
    home, env = served["home"], served["env"]
    bare = {k: v for k, v in env.items() if k not in ("PREFECT_API_URL", "VIRTUAL_ENV")}
    bare["PATH"] = "/usr/bin:/bin"
    found = subprocess.run(
        ["bash", "-c", f"source {home / 'serve' / 'env.sh'} && command -v prefect"],
        env=bare,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert found.stdout.strip() == PREFECT, found.stdout + found.stderr

    bad = ["compare", "--preset", "micro", "--methods", "bianc", "--seeds", "0", "--steps", "5"]
    cli = run_binac(bad, env, timeout=300, check=False)
    assert cli.returncode == 2 and cli.stderr.count("\n") == 1, cli.stderr
    run = deployment_run(env, 'methods=["bianc"]', watch_timeout=600)
    assert run.returncode != 0, run.stdout
    (failed,) = prefect_api(
        env["PREFECT_API_URL"], "flow_runs/filter", {"flow_runs": {"state": {"type": {"any_": ["FAILED"]}}}}
    )
    assert failed["state"]["message"] == cli.stderr.strip(), (failed["state"], cli.stderr)
