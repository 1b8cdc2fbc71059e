"""The credentials `scripts/serve.py` turns on off loopback, on the real servers: Prefect's server with its auth
string and MLflow's basic-auth app as `serve.mlflow_auth` configures it, each on a free 127.0.0.1 port (the servers
do not care where they bind; the rule that asks for credentials is tests/runs/test_serve_access.py): a request
without the credentials is refused (401), one with them answered."""

from __future__ import annotations

import base64
import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

from conftest import REPO, _free_port, server_process

sys.path.insert(0, str(REPO / "scripts"))
import serve  # noqa: E402

BIN = Path(sys.executable).parent


def status(url: str, auth: str | None = None, data: bytes | None = None) -> int:
    headers = {"Content-Type": "application/json"}
    if auth:
        headers["Authorization"] = "Basic " + base64.b64encode(auth.encode()).decode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers), timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_off_loopback_credentials_are_required_by_both_servers(tmp_path, monkeypatch):
    monkeypatch.setenv("BINAC_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("BINAC_SERVE_HOST", "0.0.0.0")
    for name, value in {
        "PREFECT_SERVER_API_AUTH_STRING": "lab:s3cret",
        "MLFLOW_TRACKING_USERNAME": "lab",
        "MLFLOW_TRACKING_PASSWORD": "m1flow-password",
    }.items():
        monkeypatch.setenv(name, value)
    env = serve.run_env(0, 0)
    serve.state_dir().mkdir(parents=True)
    args, extra = serve.mlflow_auth(env)
    mp, pp = _free_port(), _free_port()
    mlflow = [str(BIN / "mlflow"), "server", *args, "--host", "127.0.0.1", "--port", str(mp), "--workers", "1"]
    mlflow += ["--backend-store-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"]
    prefect_env = {k: v for k, v in env.items() if k != "PREFECT_API_URL"}
    prefect = [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(pp)]
    with (
        server_process(mlflow, f"http://127.0.0.1:{mp}/health", tmp_path / "mlflow.log", {**env, **extra}),
        server_process(prefect, f"http://127.0.0.1:{pp}/api/health", tmp_path / "prefect.log", prefect_env),
    ):
        search = f"http://127.0.0.1:{mp}/api/2.0/mlflow/experiments/search"
        body = json.dumps({"max_results": 1}).encode()
        assert status(search, data=body) == 401
        assert status(search, "lab:wrong", body) == 401
        assert status(search, "lab:m1flow-password", body) == 200
        flows = f"http://127.0.0.1:{pp}/api/flows/filter"
        assert status(flows, data=b"{}") == 401
        assert status(flows, env["PREFECT_API_AUTH_STRING"], b"{}") == 200
    assert os.environ["BINAC_SERVE_HOST"] == "0.0.0.0"
