"""`make lab` and a lab worker (scripts/lab.py) on one host, against `moto_server` (the `object_store` fixture), every
server on a free 127.0.0.1 port and stopped by the pids its start recorded (`scripts/serve.py stop` over this test's
own homes, never by name).

- The lab start writes the lab file with mode 0600, naming the servers, the store and the result block, and saves
  that block in Prefect as the server's default result storage: an S3 bucket block on the store's bucket and
  endpoint, holding no credentials.
- An artifact logged by a client whose environment has the lab file's MLflow settings and no store credentials
  lands in the store, under `mlartifacts/`: the MLflow server's proxy wrote it.
- The lab's deployments carry nothing of the deployer's host (no working directory, checkout, home or result path;
  the pull step's `{{ $BINAC_REPO }}` left for run time), and a flow run on them, taken by a worker started from the
  lab file alone with an empty home of its own and its own code copy elsewhere, runs in that copy, writes into
  that home (not the deployer's) and stores its Prefect results in the store."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import lab_env  # noqa: E402

BUCKET, PREFIX = "lab-test", "lab"
SHARED_VARS = ("PREFECT_API_URL", "MLFLOW_TRACKING_URI", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")


def bare_env(**extra: str) -> dict:
    """This process's environment less every address, credential and home a lab would give: what a fresh host
    has."""
    drop = {*SHARED_VARS, *lab_env.STORE_VARS, "AWS_ENDPOINT_URL", "MLFLOW_S3_ENDPOINT_URL", "BINAC_HOME"}
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("PREFECT_")}
    return {**env, "PREFECT_SERVER_ANALYTICS_ENABLED": "false", **extra}


def stop(scripts: Path, home: Path) -> None:
    subprocess.run([sys.executable, str(scripts / "serve.py"), "stop"], env=bare_env(BINAC_HOME=str(home)), timeout=180)


@pytest.fixture(scope="module")
def lab(tmp_path_factory, object_store) -> dict:
    tmp = tmp_path_factory.mktemp("lab")
    home, lab_file = tmp / "server-home", tmp / "lab.env"
    env = bare_env(
        **object_store,
        BINAC_STORE=f"s3://{BUCKET}/{PREFIX}",
        BINAC_HOME=str(home),
        BINAC_PREFECT_PORT="0",
        BINAC_MLFLOW_PORT="0",
    )
    try:
        proc = subprocess.run(
            [sys.executable, str(REPO / "scripts" / "lab.py"), "start", "--lab-file", str(lab_file)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        yield {"tmp": tmp, "home": home, "file": lab_file, "values": lab_env.read(lab_file), "store": object_store}
    finally:
        stop(REPO / "scripts", home)


def s3(store: dict):
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=store["BINAC_STORE_ENDPOINT"],
        aws_access_key_id=store["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=store["AWS_SECRET_ACCESS_KEY"],
        region_name="us-east-1",
    )


def keys(store: dict, under: str) -> list[str]:
    found = s3(store).list_objects_v2(Bucket=BUCKET, Prefix=f"{PREFIX}/{under}/")
    return [o["Key"] for o in found.get("Contents", [])]


def python(code: str, env: dict, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.strip()


def test_the_lab_file_is_private_and_names_the_servers_the_store_and_the_result_block(lab):
    assert stat.S_IMODE(lab["file"].stat().st_mode) == 0o600
    values = lab["values"]
    assert values["PREFECT_API_URL"].startswith("http://127.0.0.1:") and values["PREFECT_API_URL"].endswith("/api")
    assert values["MLFLOW_TRACKING_URI"].startswith("http://127.0.0.1:")
    assert values["BINAC_STORE"] == f"s3://{BUCKET}/{PREFIX}"
    for name in ("BINAC_STORE_ENDPOINT", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert values[name] == lab["store"][name]
    assert values["PREFECT_RESULTS_DEFAULT_STORAGE_BLOCK"] == "s3-bucket/binac-results"
    block = python(
        "from prefect.blocks.core import Block; from prefect.client.orchestration import get_client; import json; "
        "b = Block.load('s3-bucket/binac-results'); c = b.credentials; "
        "d = get_client(sync_client=True).__enter__().read_server_default_result_storage(); "
        "print(json.dumps([b.bucket_name, b.bucket_folder, c.aws_client_parameters.endpoint_url, "
        "c.aws_access_key_id, c.aws_secret_access_key, str(d.default_result_storage_block_id) == str(b._block_document_id)]))",
        bare_env(PREFECT_API_URL=values["PREFECT_API_URL"]),
    )
    endpoint = lab["store"]["BINAC_STORE_ENDPOINT"]
    assert json.loads(block) == [BUCKET, f"{PREFIX}/prefect-results", endpoint, None, None, True]


def test_an_artifact_goes_through_the_mlflow_proxy_into_the_store(lab, tmp_path):
    mlflow_only = {k: v for k, v in lab["values"].items() if k.startswith("MLFLOW_")}
    code = (
        "import sys; from pathlib import Path; from binac_core.foundation.workspace import Workspace; "
        "from binac_core.store import tracking; ws = Workspace(Path(sys.argv[1])); "
        "run = tracking.find_or_create_run(ws, 'lab-probe', 'lab-probe', {}, {}); c = tracking.client(ws); "
        "c.log_text(run, 'through the proxy', 'probe/hello.txt'); print(c.get_run(run).info.artifact_uri)"
    )
    uri = python(code, bare_env(**mlflow_only), str(tmp_path / "client-home"))
    assert uri.startswith("mlflow-artifacts:/"), uri
    [key] = [k for k in keys(lab["store"], "mlartifacts") if k.endswith("/probe/hello.txt")]
    assert s3(lab["store"]).get_object(Bucket=BUCKET, Key=key)["Body"].read() == b"through the proxy"
    assert not (tmp_path / "client-home" / "mlartifacts").exists()


def test_a_lab_worker_with_an_empty_home_runs_in_its_own_code_and_home_and_stores_results(lab):
    code, home = lab["tmp"] / "worker-code", lab["tmp"] / "worker-home"
    shutil.copytree(REPO / "scripts", code / "scripts")
    (code / "tests" / "integration").mkdir(parents=True)
    shutil.copy(Path(__file__).with_name("lab_probe.py"), code / "tests" / "integration" / "lab_probe.py")
    env = bare_env(BINAC_HOME=str(home), PREFECT_WORKER_QUERY_SECONDS="1")
    worker = [sys.executable, str(code / "scripts" / "lab.py"), "worker", "--lab-file", str(lab["file"])]
    try:
        proc = subprocess.run(worker, cwd=code, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        submitter = bare_env(**lab["values"])
        out = subprocess.run(
            [sys.executable, str(REPO / "tests" / "integration" / "lab_probe.py"), "t1"],
            cwd=REPO,
            env=submitter,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        seen = json.loads(out.stdout.strip().splitlines()[-1])
        assert seen["state"] == "COMPLETED", (seen, (home / "serve" / "prefect-worker-1.log").read_text()[-3000:])
    finally:
        stop(code / "scripts", home)
    assert seen["pool"] == "binac-lab"
    assert seen["pull_steps"] == [
        {"prefect.deployments.steps.set_working_directory": {"directory": "{{ $BINAC_REPO }}"}}
    ]
    assert seen["job_variables"] == {"env": {"TOKENIZERS_PARALLELISM": "false"}}
    note = json.loads((home / "lab-probe.json").read_text())
    assert Path(note["home"]) == home and Path(note["cwd"]).resolve() == code.resolve()
    assert Path(note["file"]) == (code / "tests" / "integration" / "lab_probe.py").resolve()
    assert not (lab["home"] / "lab-probe.json").exists() and not (lab["home"] / "prefect").exists()
    assert len(keys(lab["store"], "prefect-results")) >= 2  # the task's result and the flow's
    assert not (home / "prefect").exists()  # none on the worker's disk
