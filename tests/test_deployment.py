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
from conftest import REPO, home_with_micro_base

from binac_core import sqlrun
from binac_core.workspace import Workspace

pytestmark = pytest.mark.integration
SERVE = [sys.executable, str(REPO / "scripts" / "serve.py")]
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


def mlflow(base: str, path: str, body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{base}/api/2.0/mlflow/{path}", data=data,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)


@pytest.fixture
def served(tmp_path_factory, micro_compare):
    home = home_with_micro_base(tmp_path_factory, "binac-home-served", micro_compare)
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "MLFLOW_TRACKING_URI")}
    env.update(BINAC_HOME=str(home), BINAC_PREFECT_PORT="0", BINAC_MLFLOW_PORT="0", HF_HUB_OFFLINE="1",
               PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_WORKER_QUERY_SECONDS="1")
    if micro_compare["env"].get("BINAC_MODEL_CACHE"):  # the worker's runs find the micro base model there
        env["BINAC_MODEL_CACHE"] = micro_compare["env"]["BINAC_MODEL_CACHE"]
    groups: list[int] = []
    try:
        proc = subprocess.run([*SERVE, "start"], cwd=REPO, env=env, capture_output=True, text=True, timeout=400)
        groups = started_groups(home)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert len(groups) == 4  # Prefect server, MLflow, two workers
        ports = dict(line.removeprefix("export ").split("=", 1)
                     for line in (home / "serve" / "env.sh").read_text().splitlines())
        yield {"home": home, "env": {**env, "PREFECT_API_URL": ports["PREFECT_API_URL"]},
               "mlflow": ports["MLFLOW_UI"], "stdout": proc.stdout}
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
    prefect = str(Path(sys.executable).parent / "prefect")
    ls = subprocess.run([prefect, "deployment", "ls"], env=env, capture_output=True, text=True, timeout=120)
    for name in ("train/micro", "compare/micro", "compare/tiny", "compare/nightly"):
        assert name in ls.stdout, ls.stdout

    def run_comparison():
        run = subprocess.run([prefect, "deployment", "run", "compare/micro", "--param", "seeds=[0]", "--watch",
                              "--watch-timeout", "900"], cwd=REPO, env=env, capture_output=True, text=True,
                             timeout=960)
        assert run.returncode == 0 and "Completed" in run.stdout, run.stdout[-4000:] + run.stderr[-4000:]

    run_comparison()

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
        keys = {m["key"] for m in mlflow(base, f"metrics/get-history?run_id={rid}&metric_key=train/reward_first")
                .get("metrics", [])}
        assert keys == {"train/reward_first"}
    arts = mlflow(base, f"artifacts/list?run_id={parents[0]}&path=report").get("files", [])
    assert arts, "the report is an artifact of the parent run"

    rows = sqlrun.run(Workspace(home), "SELECT method, run_id, count(*) n, count(*) FILTER (WHERE split = 'train') t "
                                       "FROM trajectories GROUP BY ALL")
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
