"""A run's final adapters are logged to MLflow by the host that finishes it, also where another host wrote one of
them (`tasks.track.finalize_run` with an object store, `moto_server`): the initial critic a method never trains is
a cached stage's folder, often from another home; it is fetched from the store by its key, digest checked. A finish
that is re-run after one adapter was logged logs the other, and no second copy of the first."""

from __future__ import annotations

import shutil
import uuid

import pytest

from binac_core.foundation import stage_objects
from binac_core.foundation.files import file_digest
from binac_core.foundation.objects import store_from_env
from binac_core.foundation.workspace import Workspace
from binac_core.model.stage_io import AdapterRef, AdapterRole
from binac_core.store import tracking
from tasks.track import finalize_run


@pytest.fixture
def store(object_store, monkeypatch):
    """`BINAC_STORE` naming a fresh bucket on the session's moto_server; MLflow in each home's own SQLite file."""
    for name, value in object_store.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("BINAC_STORE", f"s3://f-{uuid.uuid4().hex[:12]}")
    s = store_from_env()
    s.ensure_bucket()
    return s


def adapter(home, role: AdapterRole) -> AdapterRef:
    """An adapter folder written under `home` and put into the store, as `Policy.save` leaves it."""
    folder = home / "runs" / "init-k-s0" / role.value
    folder.mkdir(parents=True)
    (folder / "adapter_model.safetensors").write_bytes(role.value.encode() * 100)
    (folder / "adapter_config.json").write_text('{"r": 4}')
    return AdapterRef(role, str(folder), file_digest(folder), key=stage_objects.put_folder(folder))


def logged(ws: Workspace, run_id: str) -> dict[str, int]:
    """The run's logged adapter files, by path: how many copies of each."""
    c = tracking.client(ws)
    out: dict[str, int] = {}
    for role in c.list_artifacts(run_id, "adapters"):
        for f in c.list_artifacts(run_id, role.path):
            out[f.path] = out.get(f.path, 0) + 1
    return out


def test_an_adapter_another_host_wrote_is_fetched_and_logged_and_a_rerun_logs_what_is_missing(
    store, tmp_path, monkeypatch
):
    monkeypatch.setenv("BINAC_HOME", str(tmp_path / "a"))
    critic = adapter(tmp_path / "a", AdapterRole.CRITIC)
    shutil.rmtree(tmp_path / "a")  # host a is gone
    monkeypatch.setenv("BINAC_HOME", str(tmp_path / "b"))
    ws = Workspace(tmp_path / "b")
    actor = adapter(tmp_path / "b", AdapterRole.ACTOR)
    run_id = tracking.find_or_create_run(ws, "k", "r", {}, {})
    tracking.log_path(ws, run_id, actor.path, "adapters/actor")  # a finish cut off after its first adapter
    finalize_run.fn(run_id, {"name": "micro"}, actor, critic)
    files = ("adapter_config.json", "adapter_model.safetensors")
    assert logged(ws, run_id) == {f"adapters/{role}/{f}": 1 for role in ("actor", "critic") for f in files}
    assert tracking.client(ws).get_run(run_id).info.status == "FINISHED"
