"""Stage files and adapter folders travel by content (`binac_core.foundation.stage_objects`) on a real S3 endpoint,
`moto_server` (the `object_store` fixture): written under one `$BINAC_HOME`, read under a second, empty one through
the store, digest checked; a corrupted object is refused in one line."""

from __future__ import annotations

import hashlib
import json
import shutil
import uuid

import pytest

from binac_core.errors import BinacError
from binac_core.foundation import stage_objects
from binac_core.foundation.files import StageFile, file_digest, read_json, write_json
from binac_core.foundation.objects import store_from_env
from binac_core.foundation.store_keys import portable
from binac_core.foundation.workspace import Workspace


@pytest.fixture
def store(object_store, monkeypatch):
    """`BINAC_STORE` naming a fresh bucket on the session's moto_server, set in this process."""
    for name, value in object_store.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("BINAC_MODEL_CACHE", raising=False)
    monkeypatch.setenv("BINAC_STORE", f"s3://s-{uuid.uuid4().hex[:12]}")
    s = store_from_env()
    s.ensure_bucket()
    return s


def test_a_stage_file_written_under_one_home_is_read_under_another(store, tmp_path, monkeypatch):
    monkeypatch.setenv("BINAC_HOME", str(tmp_path / "a"))
    written = write_json(tmp_path / "a" / "runs" / "r" / "step-00001" / "attempts.json", [{"y": "42"}])
    data = json.dumps([{"y": "42"}], sort_keys=True).encode()
    assert written.digest == hashlib.sha256(data).hexdigest()[:16]
    assert written.key == "runs/r/step-00001/attempts.json"
    assert store.digest(written.key) == hashlib.sha256(data).hexdigest(), "in the store when write_json returns"

    shutil.rmtree(tmp_path / "a")  # host a is gone
    monkeypatch.setenv("BINAC_HOME", str(tmp_path / "b"))
    assert read_json(written) == [{"y": "42"}]
    assert (tmp_path / "b" / "runs" / "r" / "step-00001" / "attempts.json").read_bytes() == data

    store.put_bytes(written.key, b"[]")  # corrupted in the store; a third home fetches it
    monkeypatch.setenv("BINAC_HOME", str(tmp_path / "c"))
    with pytest.raises(BinacError) as err:
        read_json(written)
    got = hashlib.sha256(b"[]").hexdigest()
    assert str(err.value) == (
        f"store object s3://{store.bucket}/runs/r/step-00001/attempts.json has sha256 {got}, expected {written.digest}"
    )
    assert not (tmp_path / "c" / "runs" / "r" / "step-00001" / "attempts.json").exists()


def test_the_key_is_no_part_of_a_cache_key(tmp_path):
    ws = Workspace(tmp_path / "h")
    path = str(ws.home / "runs" / "r" / "x.json")
    assert portable(StageFile(path, "00ff", key="runs/r/x.json"), ws) == portable(StageFile(path, "00ff"), ws)


def test_an_adapter_folder_travels_as_one_object_and_is_checked_by_content(store, tmp_path, monkeypatch):
    monkeypatch.setenv("BINAC_HOME", str(tmp_path / "a"))
    folder = tmp_path / "a" / "runs" / "r" / "step-00001" / "actor"
    folder.mkdir(parents=True)
    (folder / "adapter_model.safetensors").write_bytes(b"\x00weights" * 100)
    (folder / "adapter_config.json").write_text('{"r": 8}')
    digest = file_digest(folder)
    key = stage_objects.put_folder(folder)
    assert key == "runs/r/step-00001/actor" and store.keys("runs") == ["runs/r/step-00001/actor.tar"]
    assert stage_objects.put_folder(folder) == key and store.keys("runs") == [key + ".tar"], "replaced whole"

    shutil.rmtree(tmp_path / "a")  # host a is gone
    monkeypatch.setenv("BINAC_HOME", str(tmp_path / "b"))
    got = stage_objects.get_folder(str(folder), key, digest)
    assert got == tmp_path / "b" / "runs" / "r" / "step-00001" / "actor" and file_digest(got) == digest
    assert sorted(p.name for p in got.iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]

    (got / "adapter_config.json").write_text('{"r": 16}')  # another folder under the same key
    store.put_bytes(key + ".tar", stage_objects._tar(got))
    monkeypatch.setenv("BINAC_HOME", str(tmp_path / "c"))
    with pytest.raises(BinacError) as err:
        stage_objects.get_folder(str(folder), key, digest)
    assert str(err.value) == (
        f"store object s3://{store.bucket}/{key}.tar holds a folder of digest {file_digest(got)}, expected {digest}"
    )
    assert not (tmp_path / "c" / "runs" / "r" / "step-00001").exists() or not any(
        (tmp_path / "c" / "runs" / "r" / "step-00001").iterdir()
    ), "nothing left where the check failed"


def test_without_a_store_a_missing_file_is_the_one_line_it_was(tmp_path, monkeypatch):
    monkeypatch.delenv("BINAC_STORE", raising=False)
    written = write_json(tmp_path / "x.json", {"a": 1})
    assert written.key is None
    (tmp_path / "x.json").unlink()
    with pytest.raises(BinacError, match="^stage output missing: "):
        read_json(written)
