"""The proof of the lab (several hosts that share only the Prefect API, the MLflow server and the object store), on
one machine: a study whose workers share no disk with each other or with the submitter survives a lost host.

The module's fixture `proof` starts the object store (`moto_server`) and the lab (`scripts/lab.py start`, every
server on a free 127.0.0.1 port, its home here), then two worker hosts (tests/integration/lab_hosts.py: each in its
own mount, pid and host-name namespaces, over its own code copy and an empty tmpfs home, seeing neither the other
host's files, the submitter's, nor the submitter's checkout). Host `a` pauses the first run it takes right after
that run's iteration 1 rows are stored (`BINAC_FAULT=shard:train@1:pause`), and host `b` holds its first run after
iteration 2 (so that the lost run goes to the new host); the submitter runs `binac study` on a micro study (two
methods, two seeds, two iterations) with `--archive`; once `a` has paused, its namespace is SIGKILLed (the host is
lost, the run's flow run left RUNNING) and host `c` starts with an empty home; once `c` has taken the lost run, `b`
goes on. The study must end by itself: Prefect's automation marks the lost flow run CRASHED (flows/liveness.py),
the study resubmits it, and the run's concurrency slot (flows/exclusive.py) is free once the lost holder's lease
expires. Then the hosts end and their code copies are deleted (their homes were tmpfs mounts of their namespaces),
and each test below checks one item of what must hold, from the servers and the store alone."""

from __future__ import annotations

import collections
import csv
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import httpx
import pytest
import yaml
from conftest import MODEL_CACHE, REPO, until
from lab_hosts import Host, editable_root

from flows import liveness

sys.path.insert(0, str(REPO / "scripts"))
import lab_env  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.needs_tool("namespaces")]

BUCKET, PREFIX = "proof", "lab"
PAUSE = "shard:train@1"
"""Where host a pauses its run (after iteration 1's training rows are stored) until it is lost."""
HOLD = "shard:train@2"
"""Where host b holds its first run (after iteration 2's rows) until host c has taken the lost run."""
STUDY = {
    "name": "lab-proof",
    "preset": "micro",
    "deployment": "train/micro",
    "iterations": 2,
    "eval_every": 2,
    "equal_samples_method": "grpo",
    "methods": ["grpo", "fixed_critic"],
    "seeds": [0, 1],
    "regimes": {"easy": {"difficulty": 2}},
    "rule_measure": {"group_size": 4, "seed": 0},
}
TRAIN_ROWS_PER_STEP = {"grpo": 16, "fixed_critic": 32}
"""Training rows of one iteration of a micro run: 4 problems x 4 attempts (grpo); with their refinements
(fixed_critic: 4 x 4 attempts, each with one feedback and one refinement)."""
RUNS = len(STUDY["methods"]) * len(STUDY["seeds"])
STUDY_LIMIT_S = 600
"""The study's wall time must stay within 10 minutes on a 2-core machine (the lost host's wait included)."""
CACHED_STAGES = {
    "prepare-data",
    "init-adapters",
    "generate-rollouts",
    "score-rewards",
    "sample-feedback",
    "refine",
    "update-actor",
    "critic-reward",
    "update-critic",
    "evaluate",
}
"""The stage tasks a training run caches (tasks/; `CACHED`): a resumed run takes each it finished from the cache."""
SHARED_VARS = ("PREFECT_API_URL", "MLFLOW_TRACKING_URI", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")
DROPPED = (*SHARED_VARS, *lab_env.STORE_VARS, "AWS_ENDPOINT_URL", "MLFLOW_S3_ENDPOINT_URL", "BINAC_HOME")


def bare_env(**extra: str) -> dict:
    """This process's environment less every address, credential, home and fault point a lab would give."""
    env = {k: v for k, v in os.environ.items() if k not in DROPPED and not k.startswith(("PREFECT_", "BINAC_"))}
    env["BINAC_DATA_DIR"] = os.environ["BINAC_DATA_DIR"]
    return {**env, "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "HF_HUB_OFFLINE": "1", **extra}


# --------------------------------------------------------------------------- the servers and the store


def api(lab: dict, path: str, body: dict | None = None):
    """The Prefect server's answer to GET `path` (or POST `body` to it)."""
    url = f"{lab['values']['PREFECT_API_URL']}/{path}"
    r = httpx.post(url, json=body, timeout=60) if body is not None else httpx.get(url, timeout=60)
    r.raise_for_status()
    return r.json()


def flow_runs(lab: dict, tag: str) -> list[dict]:
    """Every flow run carrying `tag`, oldest first."""
    body = {"flow_runs": {"tags": {"all_": [tag]}}, "sort": "EXPECTED_START_TIME_ASC", "limit": 200}
    return api(lab, "flow_runs/filter", body)


def train_flow_runs(lab: dict) -> list[dict]:
    """Every flow run of the `train` flow (the study's runs; not the study's own flow run)."""
    return api(lab, "flow_runs/filter", {"flows": {"name": {"any_": ["train"]}}, "limit": 200})


def task_runs(lab: dict, flow_run_id: str) -> list[dict]:
    return api(lab, "task_runs/filter", {"flow_runs": {"id": {"any_": [flow_run_id]}}, "limit": 200})


def s3_keys(store: dict, under: str) -> list[str]:
    """The store's object keys under `<prefix>/<under>/`."""
    import boto3

    s3 = boto3.client(
        "s3",
        endpoint_url=store["BINAC_STORE_ENDPOINT"],
        aws_access_key_id=store["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=store["AWS_SECRET_ACCESS_KEY"],
        region_name="us-east-1",
    )
    keys: list[str] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{PREFIX}/{under}/"):
        keys += [o["Key"] for o in page.get("Contents", [])]
    return keys


@pytest.fixture(scope="module")
def lab(tmp_path_factory, object_store) -> dict:
    """The lab's servers (`scripts/lab.py start`), their services looping every second; stopped by the pids its
    start recorded (`scripts/serve.py stop` over this lab's own home)."""
    tmp = tmp_path_factory.mktemp("lab-proof")
    home, lab_file = tmp / "server-home", tmp / "lab.env"
    env = bare_env(
        **object_store,
        BINAC_STORE=f"s3://{BUCKET}/{PREFIX}",
        BINAC_HOME=str(home),
        BINAC_PREFECT_PORT="0",
        BINAC_MLFLOW_PORT="0",
        PREFECT_SERVER_EVENTS_PROACTIVE_GRANULARITY="PT1S",
        PREFECT_SERVER_SERVICES_REPOSSESSOR_LOOP_SECONDS="1",
    )
    start = [sys.executable, str(REPO / "scripts" / "lab.py"), "start", "--lab-file", str(lab_file)]
    try:
        proc = subprocess.run(start, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        yield {"tmp": tmp, "home": home, "values": lab_env.read(lab_file), "file": lab_file, "store": object_store}
    finally:
        stop = [sys.executable, str(REPO / "scripts" / "serve.py"), "stop"]
        subprocess.run(stop, env=bare_env(BINAC_HOME=str(home)), timeout=180)


def submitter_env(lab: dict) -> dict:
    """The submitter's environment: the lab file's variables, its own home; its base models in the session's cache."""
    home = lab["tmp"] / "submitter-home"
    return bare_env(**lab["values"], BINAC_HOME=str(home), BINAC_MODEL_CACHE=str(MODEL_CACHE))


def binac(env: dict, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """`binac ARGS` as the submitter, from its checkout."""
    argv = [sys.executable, "-m", "flows.cli", *args]
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


# --------------------------------------------------------------------------- the hosts and the study


def new_host(lab: dict, name: str, **extra: str) -> Host:
    """Host `name` (not started): its own code copy, hiding the lab server's and the submitter's homes."""
    root = lab["tmp"] / f"host-{name}"
    root.mkdir()
    env = bare_env(PREFECT_WORKER_QUERY_SECONDS="1", BINAC_TORCH_THREADS="1", **extra)
    for var in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX"):  # the copy's compiled files show what ran
        env.pop(var, None)
    return Host(name, root, REPO, lab["file"], env, [lab["home"], lab["tmp"] / "submitter-home"])


def namespace_pids(host: Host) -> list[int]:
    """This machine's pids of the processes in the host's pid namespace."""
    ns = os.readlink(f"/proc/{host.first_process()}/ns/pid")
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if os.readlink(d / "ns" / "pid") == ns:
                    out.append(int(d.name))
            except OSError:
                continue
    return out


def listing(host: Host, inside: Path) -> list[str]:
    return sorted(os.listdir(host.path(inside)))


def flow_run_process(host: Host) -> dict:
    """The working directory and environment of the host's flow-run process (`python -m prefect.engine`)."""
    for pid in namespace_pids(host):
        if b"prefect.engine" in Path(f"/proc/{pid}/cmdline").read_bytes():
            env = dict(v.split("=", 1) for v in Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in v)
            return {"cwd": os.readlink(f"/proc/{pid}/cwd"), "env": env}
    raise AssertionError(f"no flow-run process on host {host.name}")


def what_host_sees(host: Host, lab: dict) -> dict:
    """What a host's processes see of the others' folders, and where its flow-run process runs."""
    seen = {
        "checkout": listing(host, REPO),
        "submitter home": listing(host, lab["tmp"] / "submitter-home"),
        "lab home": listing(host, lab["home"]),
        "prefect home": listing(host, Path.home() / ".prefect"),
        "flow run": flow_run_process(host),
    }
    if (editable := editable_root()) is not None:
        seen["editable install"] = listing(host, editable)
    return seen


def taken_by(lab: dict, key: str, host: str) -> bool:
    """Whether run `key`'s newest flow run is running or completed on `host`'s worker (its name holds the host's)."""
    newest = flow_runs(lab, f"binac-run:{key}")[-1]
    worker = newest["labels"].get("prefect.worker.name", "")
    return newest["state_type"] in ("RUNNING", "COMPLETED") and f"-{host}-" in worker


def alive(study: subprocess.Popen, lab: dict) -> bool:
    """True while the study runs; a study that ended before it should have fails the wait, with its output."""
    assert study.poll() is None, (lab["tmp"] / "study.log").read_text()[-4000:]
    return True


def lose_a_host_mid_study(lab: dict, hosts: dict, study: subprocess.Popen, t0: float) -> dict:
    """Wait until host a paused its run, note what it sees and which run it holds, SIGKILL it, start host c."""
    a = hosts["a"]

    def paused() -> bool:
        alive(study, lab)
        found = a.path(a.faults / f"{PAUSE}.paused")
        return found is not None and found.exists()

    until("host a paused its run after iteration 1", paused, 900)
    seen = {"a sees": what_host_sees(a, lab), "paused_at_s": time.time() - t0}
    [lock] = [p.stem for p in a.path(a.home / "locks").glob("*.lock")]
    seen["lost run"] = lock
    a.kill()
    seen["lost at"] = time.time()
    hosts["c"] = new_host(lab, "c").start()
    until("host c's worker started", hosts["c"].started, 120)
    return seen


@pytest.fixture(scope="module")
def proof(lab) -> dict:
    """The study of the module docstring, run to its end; returns what the tests check, the hosts already gone."""
    study_file = lab["tmp"] / "lab-proof.yaml"
    study_file.write_text(yaml.safe_dump(STUDY, sort_keys=False))
    env = submitter_env(lab)
    seen: dict = {"file": study_file, "archive": lab["tmp"] / "archive", "env": env}
    hosts = {
        "a": new_host(lab, "a", BINAC_FAULT=f"{PAUSE}:pause"),
        "b": new_host(lab, "b", BINAC_FAULT=f"{HOLD}:pause"),
    }
    study = None
    try:
        for host in hosts.values():
            host.start()
        for host in hosts.values():
            until(f"host {host.name}'s worker started", host.started, 120)
        argv = [sys.executable, "-m", "flows.cli", "study", str(study_file), "--archive", str(seen["archive"])]
        with open(lab["tmp"] / "study.log", "w") as log:
            t0 = time.time()
            study = subprocess.Popen(
                argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        seen |= lose_a_host_mid_study(lab, hosts, study, t0)
        until("host c took the lost run", lambda: alive(study, lab) and taken_by(lab, seen["lost run"], "host-c"), 900)
        hosts["b"].path(hosts["b"].faults / f"{HOLD}.resume").touch()  # b goes on
        seen["rc"] = study.wait(timeout=1800)
        seen["wall_s"] = time.time() - t0
        seen["log"] = (lab["tmp"] / "study.log").read_text()
        seen["trains"] = [(r["name"], r["state_type"], r["state"]["message"]) for r in train_flow_runs(lab)]
        reports = sorted((lab["tmp"] / "submitter-home" / "reports").glob("study-*/report.md"))
        seen["report"] = reports[0].read_text() if reports else None
        seen["worker logs"] = {n: h.worker_log() for n, h in hosts.items()}
        seen["compiled"] = {n: list(h.code.glob("binac_core/rl/__pycache__/loop.*.pyc")) for n, h in hosts.items()}
    finally:
        if study is not None and study.poll() is None:
            os.killpg(study.pid, signal.SIGKILL)
            study.wait()
        for host in hosts.values():
            host.kill()
    for host in hosts.values():
        shutil.rmtree(host.root)  # its code copy; its home was a tmpfs of its namespace, gone with it
    seen["hosts"] = hosts
    lost, resumed = flow_runs(lab, f"binac-run:{seen['lost run']}")
    after = lambda at: datetime.fromisoformat(at).timestamp() - seen["lost at"]  # noqa: E731
    print(
        f"study: {seen['wall_s']:.0f} s; host a lost at {seen['paused_at_s']:.0f} s; its flow run CRASHED "
        f"{after(lost['state']['timestamp']):.0f} s later; resumed by {resumed['labels'].get('prefect.worker.name')} "
        f"{after(resumed['start_time']):.0f} s after the loss, COMPLETED {after(resumed['end_time']):.0f} s after it"
    )
    print(f"flow runs: {seen['trains']}")
    return seen


# --------------------------------------------------------------------------- what must hold


def test_the_study_exits_0_with_every_run_finished_within_10_minutes(proof):
    assert proof["rc"] == 0, (proof["log"][-4000:], proof["worker logs"])
    assert f"{RUNS}/{RUNS} runs finished" in proof["log"], proof["log"][-4000:]
    assert "stopped sending heartbeats (worker lost?); resubmitting" in proof["log"]
    states = sorted(state for _, state, _ in proof["trains"])
    assert states == ["COMPLETED"] * RUNS + ["CRASHED"], f"only the lost run's flow run ended badly: {proof['trains']}"
    assert proof["wall_s"] <= STUDY_LIMIT_S, f"the study took {proof['wall_s']:.0f} s"


def test_each_host_ran_its_own_code_copy_and_saw_no_other_hosts_files(proof):
    a, sees = proof["hosts"]["a"], proof["a sees"]
    assert sees["checkout"] in ([], [".venv"]), "the submitter's checkout: a tmpfs, the venv bound into it"
    assert sees.get("editable install", []) in ([], [".venv"])
    assert sees["submitter home"] == sees["lab home"] == sees["prefect home"] == []
    run = sees["flow run"]
    assert Path(run["cwd"]) == a.code and run["env"]["PYTHONPATH"] == str(a.code)
    assert run["env"]["BINAC_HOME"] == str(a.home)
    # the flow runs imported the library from their host's copy: Python compiled it there
    assert proof["compiled"]["a"] and proof["compiled"]["b"], proof["compiled"]
    assert not any(host.root.exists() for host in proof["hosts"].values()), "code copies deleted"


def test_the_lost_runs_flow_runs_read_crashed_then_completed_on_the_new_host(lab, proof):
    runs = flow_runs(lab, f"binac-run:{proof['lost run']}")
    assert [r["state_type"] for r in runs] == ["CRASHED", "COMPLETED"], runs
    assert runs[0]["state"]["message"] == liveness.CRASH_MESSAGE
    workers = [r["labels"].get("prefect.worker.name", "") for r in runs]
    assert "-host-a-" in workers[0] and "-host-c-" in workers[1], workers


def test_the_new_host_took_the_stages_finished_before_the_loss_from_the_cache(lab, proof):
    lost, resumed = flow_runs(lab, f"binac-run:{proof['lost run']}")

    def stages(flow_run: dict, state_name: str) -> collections.Counter:
        """How many of the flow run's stage task runs ended in `state_name`, by stage (a task run's name is
        `<task name>-<suffix>`)."""
        names = [
            tr["name"].rsplit("-", 1)[0] for tr in task_runs(lab, flow_run["id"]) if tr["state_name"] == state_name
        ]
        return collections.Counter(n for n in names if n in CACHED_STAGES)

    finished = stages(lost, "Completed") + stages(lost, "Cached")
    assert {"generate-rollouts", "update-actor", "evaluate"} <= set(finished), finished
    cached, computed = stages(resumed, "Cached"), stages(resumed, "Completed")
    assert not finished - cached, f"finished before the loss but not taken from the cache: {finished - cached}"
    assert computed["generate-rollouts"] >= 1, "iteration 2 was computed on the new host"


def sql(proof: dict, query: str, tmp: Path) -> list[dict]:
    """`binac sql QUERY` as the submitter, its result as CSV rows."""
    out = tmp / "out.csv"
    done = binac(proof["env"], "sql", query, "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    with open(out) as f:
        return list(csv.DictReader(f))


def test_every_runs_training_rows_are_there_exactly_once_one_object_per_shard(lab, proof, tmp_path):
    per_step = sql(
        proof, "SELECT method, seed, step, count(*) AS n FROM trajectories WHERE split = 'train' GROUP BY ALL", tmp_path
    )
    got = {(r["method"], int(r["seed"]), int(r["step"])): int(r["n"]) for r in per_step}
    want = {(m, s, step): n for m, n in TRAIN_ROWS_PER_STEP.items() for s in STUDY["seeds"] for step in (1, 2)}
    assert got == want  # grpo: 64 rows in all, fixed_critic: 128
    dupes = sql(
        proof,
        "SELECT run_id, split, protocol, step, problem_id, sample_idx, feedback_idx, round, count(*) AS n "
        "FROM trajectories GROUP BY ALL HAVING count(*) > 1",
        tmp_path,
    )
    assert dupes == []
    shards = sql(proof, "SELECT DISTINCT run_id, split, protocol, step FROM trajectories", tmp_path)
    assert {r["split"] for r in shards} == {"train", "eval"}
    name = lambda r: "train" if r["split"] == "train" else f"eval-{r['protocol']}"  # noqa: E731 - write_shard's
    want_keys = sorted(
        f"{PREFIX}/trajectories/{r['run_id']}/{name(r)}-step{int(r['step']):05d}.parquet" for r in shards
    )
    got_keys = sorted(k for k in s3_keys(lab["store"], "trajectories") if "/_schema/" not in k)
    assert got_keys == want_keys
    local = (Path(proof["env"]["BINAC_HOME"]) / "trajectories").glob("*/*.parquet")
    assert [p.parent.name for p in local] == ["_schema"], "no shard on the submitter's disk, only the empty schema"


def mlflow_runs(lab: dict):
    """The study's parent run and its children, from the MLflow server."""
    from mlflow.tracking import MlflowClient

    c = MlflowClient(lab["values"]["MLFLOW_TRACKING_URI"])
    exp = c.get_experiment_by_name("binac").experiment_id
    runs = c.search_runs([exp])
    [parent] = [r for r in runs if r.data.tags.get("kind") == "study"]
    return c, parent, [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]


def test_every_child_run_is_finished_with_its_adapters_in_the_store_and_one_metric_point_per_step(lab, proof):
    c, parent, children = mlflow_runs(lab)
    assert parent.info.status == "FINISHED" and len(children) == RUNS
    artifacts = s3_keys(lab["store"], "mlartifacts")
    for run in children:
        assert run.info.status == "FINISHED", run.info
        assert {a.path for a in c.list_artifacts(run.info.run_id, "adapters")} == {"adapters/actor", "adapters/critic"}
        for role in ("actor", "critic"):
            assert any(f"/{run.info.run_id}/artifacts/adapters/{role}/" in k for k in artifacts), (run.info, role)
        for name in run.data.metrics:
            steps = [m.step for m in c.get_metric_history(run.info.run_id, name)]
            assert len(steps) == len(set(steps)), (run.data.tags["method"], name, steps)
        assert sorted(m.step for m in c.get_metric_history(run.info.run_id, "train/actor_samples")) == [0, 1, 2]


def test_the_report_and_the_archive_read_every_row_and_metric_from_the_servers_and_the_store(lab, proof, tmp_path):
    import pandas as pd

    archive = tmp_path / "archive"
    done = binac(proof["env"], "study", str(proof["file"]), "--report-only", "--archive", str(archive))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"{RUNS}/{RUNS} runs finished" in done.stdout and f"archived {RUNS} more finished run(s)" in done.stdout
    [report] = (Path(proof["env"]["BINAC_HOME"]) / "reports").glob("study-*/report.md")
    assert report.read_text() == proof["report"], "the same report, the hosts gone"
    c, _, children = mlflow_runs(lab)
    by_key = {r.data.tags["binac.run_key"]: r for r in children}
    for folder in (archive / "runs").iterdir():
        run = by_key[folder.name]
        rows = pd.read_parquet(folder / "trajectories.parquet")
        train = rows[rows["split"] == "train"]
        assert len(train) == 2 * TRAIN_ROWS_PER_STEP[run.data.tags["method"]]
        points = sum(len(c.get_metric_history(run.info.run_id, k)) for k in run.data.metrics)
        assert len(pd.read_parquet(folder / "metrics.parquet")) == points
    assert sorted(p.name for p in (archive / "runs").iterdir()) == sorted(by_key)
    assert sorted(p.name for p in (proof["archive"] / "runs").iterdir()) == sorted(by_key), "archived as they ended"


def test_running_the_study_again_starts_no_flow_run(lab, proof):
    before = len(train_flow_runs(lab))
    again = binac(proof["env"], "study", str(proof["file"]))
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert f"{RUNS}/{RUNS} runs done: {RUNS} done" in again.stdout
    assert len(train_flow_runs(lab)) == before
