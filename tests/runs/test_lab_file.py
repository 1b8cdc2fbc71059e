"""The lab's pieces that need no server (scripts/lab.py, scripts/lab_env.py): the lab file holds the credentials
both servers require off loopback, is written 0600 even over a wider file, and reads back what was written; the
address other hosts are given; a lab without `BINAC_STORE` refuses in one line before anything starts; and the lab's
deployments are prefect.yaml's, each on the lab's pool."""

from __future__ import annotations

import stat
import sys

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import lab  # noqa: E402
import lab_env  # noqa: E402
import serve  # noqa: E402

ENVIRON = {
    "PREFECT_SERVER_API_AUTH_STRING": "lab:s3cret",
    "MLFLOW_TRACKING_USERNAME": "lab",
    "MLFLOW_TRACKING_PASSWORD": "m1flow-password",
    "BINAC_STORE": "s3://bucket/prefix",
    "BINAC_STORE_ENDPOINT": "http://store.lab:9000",
    "AWS_ACCESS_KEY_ID": "key id",
    "AWS_SECRET_ACCESS_KEY": "it's $ecret",
    "HOME": "/not/for/the/lab/file",
}


def test_off_loopback_the_lab_file_carries_both_servers_credentials_and_reads_back(tmp_path):
    values = lab_env.lab_values("http://lab:4200/api", "http://lab:5000", "s3-bucket/binac-results", True, ENVIRON)
    assert values["PREFECT_API_AUTH_STRING"] == "lab:s3cret"
    assert (values["MLFLOW_TRACKING_USERNAME"], values["MLFLOW_TRACKING_PASSWORD"]) == ("lab", "m1flow-password")
    assert "HOME" not in values and "PREFECT_SERVER_API_AUTH_STRING" not in values
    path = tmp_path / "lab.env"
    path.write_text("old\n")
    path.chmod(0o644)
    lab_env.write(path, values)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert lab_env.read(path) == values  # quoted for a shell: spaces, quotes and `$` come back as written


def test_on_loopback_without_auth_the_lab_file_has_no_server_credentials():
    values = lab_env.lab_values("http://127.0.0.1:1/api", "http://127.0.0.1:2", "s3-bucket/b", False, ENVIRON)
    assert not {"PREFECT_API_AUTH_STRING", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"} & set(values)
    assert values["AWS_SECRET_ACCESS_KEY"] == "it's $ecret"


def test_a_line_that_is_not_an_export_is_refused_naming_it(tmp_path):
    path = tmp_path / "lab.env"
    path.write_text("export A=1\nrm -rf /\n")
    with pytest.raises(SystemExit, match=r"lab.env:2 is not `export NAME=value`"):
        lab_env.read(path)
    with pytest.raises(SystemExit, match="no lab file"):
        lab_env.read(tmp_path / "missing.env")


def test_other_hosts_are_given_the_lab_host_or_the_bound_address(monkeypatch):
    monkeypatch.delenv("BINAC_LAB_HOST", raising=False)
    monkeypatch.setenv("BINAC_SERVE_HOST", "127.0.0.1")
    assert lab.lab_host() == "127.0.0.1"
    monkeypatch.setenv("BINAC_LAB_HOST", "lab.example.org")
    assert lab.lab_host() == "lab.example.org"
    hosts = lab.allowed_hosts(5000).split(",")
    assert {"lab.example.org", "lab.example.org:5000", "localhost:*", "10.*"} <= set(hosts)


def test_without_a_store_or_with_a_bad_one_the_lab_refuses_before_anything_starts(tmp_path, monkeypatch):
    monkeypatch.setenv("BINAC_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("BINAC_STORE", raising=False)
    monkeypatch.delenv("BINAC_SERVE_HOST", raising=False)
    monkeypatch.setattr(serve.subprocess, "Popen", lambda *a, **k: pytest.fail("something was started"))
    with pytest.raises(SystemExit, match="make lab needs BINAC_STORE"):
        lab.start(tmp_path / "lab.env")
    monkeypatch.setenv("BINAC_STORE", "/srv/store")
    with pytest.raises(SystemExit, match="BINAC_STORE must be an s3://bucket"):
        lab.start(tmp_path / "lab.env")
    assert not (tmp_path / "lab.env").exists() and not (tmp_path / "home").exists()


def test_the_lab_deploys_every_deployment_of_prefect_yaml_on_its_pool(tmp_path, monkeypatch):
    import yaml

    monkeypatch.setenv("BINAC_HOME", str(tmp_path / "home"))
    serve.state_dir().mkdir(parents=True)
    spec = yaml.safe_load(lab.lab_prefect_file().read_text())
    original = yaml.safe_load((REPO / "prefect.yaml").read_text())
    assert [(d["name"], d["entrypoint"]) for d in spec["deployments"]] == [
        (d["name"], d["entrypoint"]) for d in original["deployments"]
    ]
    assert {d["work_pool"]["name"] for d in spec["deployments"]} == {lab.POOL}
    assert all(
        d["work_pool"]["job_variables"] == {"env": {"TOKENIZERS_PARALLELISM": "false"}} for d in spec["deployments"]
    )
    assert spec["pull"] == original["pull"]


def test_a_workers_name_holds_its_hosts_name_so_workers_of_two_hosts_stay_apart(monkeypatch):
    names = {}
    for host in ("host-a", "host-b"):  # two hosts whose scripts have the same pid (each in its own pid namespace)
        monkeypatch.setattr(serve.socket, "gethostname", lambda host=host: host)
        monkeypatch.setattr(serve.os, "getpid", lambda: 2)
        names[host] = serve.worker_name("prefect-worker-1")
    assert names == {"host-a": "binac-host-a-2-1", "host-b": "binac-host-b-2-1"}
