"""The critic's attempt banks travel through the object store by their key (tasks/bank.py,
`binac_core.foundation.shared_files`), on a real S3 endpoint (`moto_server`): a bank written under one home is
used under another, empty one without sampling; a corrupted object is refused in one line; a bank a home holds that
the store lacks is put there."""

from __future__ import annotations

import hashlib
import io
import json

import pytest
from fake_bases import H1, use_store

import tasks.bank
from binac_core.errors import BinacError
from binac_core.foundation.config import load_config
from binac_core.foundation.files import StageFile, write_json
from binac_core.foundation.workspace import Workspace
from binac_core.rl.bank import bank_key, bank_name

CFG = load_config("micro", {"bank.enabled": True})
BANK = {"splits": "a fake bank: build_bank does not read a bank it finds"}


@pytest.fixture
def store(object_store, monkeypatch):
    return use_store(object_store, monkeypatch)


@pytest.fixture
def no_sampling(monkeypatch):
    def loaded(*args, **kwargs):
        raise AssertionError("sampled a bank the store holds")

    monkeypatch.setattr(tasks.bank, "loaded", loaded)


def _bank_path(ws: Workspace):
    return ws.bank_file(bank_name(H1, bank_key(CFG, H1)))


def _build(home, monkeypatch) -> StageFile:
    monkeypatch.setenv("BINAC_HOME", str(home))
    return tasks.bank.build_bank.fn(CFG.model_dump(mode="json"), StageFile("base", "0"), H1, 0)


def test_a_bank_written_under_one_home_is_used_under_another(store, tmp_path, monkeypatch, no_sampling):
    monkeypatch.setenv("BINAC_HOME", str(tmp_path / "a"))
    written = write_json(_bank_path(Workspace(tmp_path / "a")), BANK)  # as build_bank writes what it sampled
    key = f"models/banks/{bank_name(H1, bank_key(CFG, H1))}.json"
    assert written.key == key and store.keys("models/banks") == [key]

    got = _build(tmp_path / "b", monkeypatch)
    assert got == StageFile(str(_bank_path(Workspace(tmp_path / "b"))), written.digest, key=key)
    assert json.loads((tmp_path / "b" / "models" / "banks" / f"{key.rsplit('/', 1)[1]}").read_text()) == BANK


def test_a_corrupted_bank_object_is_refused_in_one_line(store, tmp_path, monkeypatch, no_sampling):
    monkeypatch.setenv("BINAC_HOME", str(tmp_path / "a"))
    written = write_json(_bank_path(Workspace(tmp_path / "a")), BANK)
    recorded = store.digest(written.key)
    bad = b'{"splits": "other attempts"}'
    store._client().put_object(
        Bucket=store.bucket, Key=written.key, Body=io.BytesIO(bad), Metadata={"sha256": recorded}
    )
    with pytest.raises(BinacError) as err:
        _build(tmp_path / "c", monkeypatch)
    assert str(err.value) == (
        f"store object s3://{store.bucket}/{written.key} has sha256 {hashlib.sha256(bad).hexdigest()}, "
        f"expected {recorded}"
    )
    assert not _bank_path(Workspace(tmp_path / "c")).exists()


def test_a_bank_here_that_the_store_lacks_is_put(store, tmp_path, monkeypatch, no_sampling):
    path = _bank_path(Workspace(tmp_path / "d"))
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(BANK))  # sampled before this host had a store
    got = _build(tmp_path / "d", monkeypatch)
    assert store.digest(got.key) == hashlib.sha256(path.read_bytes()).hexdigest()


def test_without_a_store_a_bank_here_is_what_it_was(tmp_path, monkeypatch, no_sampling):
    monkeypatch.delenv("BINAC_STORE", raising=False)
    path = _bank_path(Workspace(tmp_path / "e"))
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(BANK))
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    assert _build(tmp_path / "e", monkeypatch) == StageFile(str(path), digest)
