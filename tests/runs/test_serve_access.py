"""Server access (`scripts/serve.py`): the servers bind to `BINAC_SERVE_HOST`; off loopback, `start` refuses in one
line before anything starts unless the credentials are set, and with them turns on Prefect's basic auth (the
clients sending it) and MLflow's basic-auth app."""

from __future__ import annotations

import sys

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import serve  # noqa: E402

CREDENTIALS = {
    "PREFECT_SERVER_API_AUTH_STRING": "lab:s3cret",
    "MLFLOW_TRACKING_USERNAME": "lab",
    "MLFLOW_TRACKING_PASSWORD": "m1flow-password",
}


@pytest.fixture
def serve_env(tmp_path, monkeypatch):
    """A fresh BINAC_HOME, no credentials and no bind address in the environment, and nothing can be started."""
    monkeypatch.setenv("BINAC_HOME", str(tmp_path / "home"))
    for name in (*serve.AUTH_VARS, "PREFECT_API_AUTH_STRING", "BINAC_SERVE_HOST"):
        monkeypatch.delenv(name, raising=False)

    def started(*args, **kwargs):
        raise AssertionError("something was started")

    monkeypatch.setattr(serve, "spawn", started)
    monkeypatch.setattr(serve.subprocess, "run", started)
    return tmp_path / "home"


@pytest.mark.parametrize(
    "host, expected",
    [
        ("127.0.0.1", True),
        ("127.8.0.1", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.5", False),
        ("lab-server", False),
    ],
)
def test_loopback_is_127_0_0_0_slash_8_and_colon_colon_1(host, expected):
    assert serve.loopback(host) is expected


def test_off_loopback_without_credentials_the_start_refuses_in_one_line_before_anything(serve_env, monkeypatch):
    monkeypatch.setenv("BINAC_SERVE_HOST", "0.0.0.0")
    with pytest.raises(SystemExit) as stop:
        serve.start()
    assert stop.value.code == (
        "error: BINAC_SERVE_HOST=0.0.0.0 is off loopback, where the servers require authentication: set "
        "PREFECT_SERVER_API_AUTH_STRING, MLFLOW_TRACKING_USERNAME, MLFLOW_TRACKING_PASSWORD (or bind to 127.0.0.1)"
    )
    assert not (serve_env / "serve").exists(), "nothing written"


def test_an_auth_string_without_a_password_is_named(serve_env, monkeypatch):
    monkeypatch.setenv("BINAC_SERVE_HOST", "10.0.0.5")
    monkeypatch.setenv("PREFECT_SERVER_API_AUTH_STRING", "lab")
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "lab")
    with pytest.raises(SystemExit) as stop:
        serve.start()
    assert stop.value.code.endswith(
        "set MLFLOW_TRACKING_PASSWORD, PREFECT_SERVER_API_AUTH_STRING in the form user:password (or bind to 127.0.0.1)"
    )


def test_a_password_mlflow_would_refuse_is_named(serve_env, monkeypatch):
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "short")
    monkeypatch.setenv("BINAC_SERVE_HOST", "10.0.0.5")
    with pytest.raises(SystemExit) as stop:
        serve.start()
    assert stop.value.code.endswith("set MLFLOW_TRACKING_PASSWORD of at least 12 characters (or bind to 127.0.0.1)")


def test_on_loopback_nothing_is_asked_and_no_auth_is_turned_on(serve_env, monkeypatch):
    assert serve.bind_host() == "127.0.0.1" and not serve.authenticated()
    env = serve.run_env(4200, 5000)
    assert "PREFECT_API_AUTH_STRING" not in env and env["PREFECT_API_URL"] == "http://127.0.0.1:4200/api"
    assert serve.mlflow_auth(env) == ([], {})


def test_off_loopback_with_credentials_both_servers_require_them(serve_env, monkeypatch):
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("BINAC_SERVE_HOST", "0.0.0.0")
    assert serve.authenticated()
    env = serve.run_env(4200, 5000)
    assert env["PREFECT_API_AUTH_STRING"] == "lab:s3cret", "the workers and deployments send Prefect's credentials"
    assert env["PREFECT_API_URL"] == "http://127.0.0.1:4200/api", "a wildcard bind is reached on 127.0.0.1 here"
    serve.state_dir().mkdir(parents=True)
    args, extra = serve.mlflow_auth(env)
    assert args == ["--app-name", "basic-auth"]
    assert extra["MLFLOW_AUTH_CONFIG_PATH"] == str(serve_env / "serve" / "mlflow-auth.ini")
    assert (
        extra["MLFLOW_AUTH_ADMIN_PASSWORD"] == "m1flow-password" and len(extra["MLFLOW_FLASK_SERVER_SECRET_KEY"]) == 64
    )
    ini = (serve_env / "serve" / "mlflow-auth.ini").read_text()
    assert "admin_username = lab\n" in ini and f"sqlite:///{serve_env / 'serve' / 'mlflow-auth.db'}" in ini
    assert "m1flow-password" not in ini, "the password stays out of the file"
    monkeypatch.setenv("BINAC_SERVE_HOST", "10.0.0.5")
    assert serve.run_env(4200, 5000)["MLFLOW_UI"] == "http://10.0.0.5:5000"
