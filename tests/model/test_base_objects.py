"""Bases travel by their weights hash (`binac_core.model.base_objects`, `binac_core.model.base_model`): the keys by
hand; a fake base folder put and fetched on a real S3 endpoint (`moto_server`, the `object_store` fixture), a
corrupted object and an object holding other weights refused in one line; a real micro base built under one home
used under a second, empty one without pretraining (the pretraining function raises there)."""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path

import pytest
from fake_bases import H1, H2, W1, W2, fake_base, use_store

from binac_core.errors import BinacError
from binac_core.foundation.config import load_config
from binac_core.foundation.files import file_digest
from binac_core.foundation.workspace import Workspace
from binac_core.model import base_model, base_objects, pretrain

TINIEST = {"model.pretrain_steps": 2, "model.pretrain_examples": 100}


@pytest.fixture
def store(object_store, monkeypatch):
    return use_store(object_store, monkeypatch)


def test_keys_by_hand():
    assert base_objects.object_key("ab" * 32) == "models/base/" + "ab" * 32 + ".tar"
    assert base_objects.index_key("0123456789abcdef") == "models/base-by-config/0123456789abcdef.json"
    with pytest.raises(BinacError) as err:
        base_objects.object_key("abcd1234")  # a prefix names no object
    assert str(err.value) == "not a base's weights sha256: 'abcd1234' (64 lower-case hex digits)"


def test_equal_folders_make_equal_objects(tmp_path):
    a, b = fake_base(tmp_path / "a"), fake_base(tmp_path / "b")
    os.utime(b / "model.safetensors", (0, 12345))  # owners and times are no part of the object
    base_objects._write_tar(a, tmp_path / "a.tar")
    base_objects._write_tar(b, tmp_path / "b.tar")
    assert (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes()


def test_a_base_is_put_once_by_its_hash_and_fetched_checked(store, tmp_path):
    folder = fake_base(tmp_path / "a" / "base-x")
    assert base_objects.publish(folder, H1, "0123456789abcdef") is True
    assert store.keys("models") == ["models/base-by-config/0123456789abcdef.json", f"models/base/{H1}.tar"]
    assert base_objects.indexed("0123456789abcdef") == H1 and base_objects.indexed("fedcba9876543210") is None
    assert base_objects.stored(H1[:8]) == [H1] and base_objects.stored(H2[:8]) == []

    other = fake_base(tmp_path / "other", W1)  # the same weights, another base_meta.json: the first writer's stays
    (other / "base_meta.json").write_text(json.dumps({"weights_sha256": H1, "seconds": 3}))
    assert base_objects.publish(other, H1, "0123456789abcdef") is False

    got = base_objects.fetch(H1, tmp_path / "b" / "base-x")
    assert got == tmp_path / "b" / "base-x" and file_digest(got) == file_digest(folder)
    assert sorted(p.name for p in got.iterdir()) == ["base_meta.json", "config.json", "model.safetensors"]


def test_a_missing_base_is_one_line(store, tmp_path):
    with pytest.raises(BinacError) as err:
        base_objects.fetch(H2, tmp_path / "b" / "base-x")
    assert str(err.value) == (
        f"the store holds no base with weights sha256 {H2} (s3://{store.bucket}/models/base/{H2}.tar is missing): "
        "the study that names it puts it there before submitting runs"
    )
    assert not (tmp_path / "b" / "base-x").exists()


def test_a_corrupted_object_is_refused_in_one_line(store, tmp_path):
    base_objects.publish(fake_base(tmp_path / "a"), H1)
    key = base_objects.object_key(H1)
    good = store.digest(key)
    # Other bytes under the key, the writer's recorded sha256 kept (a corrupted upload or a tampered object).
    bad = b"not a tar"
    store._client().put_object(Bucket=store.bucket, Key=key, Body=io.BytesIO(bad), Metadata={"sha256": good})
    with pytest.raises(BinacError) as err:
        base_objects.fetch(H1, tmp_path / "b" / "base-x")
    assert str(err.value) == (
        f"store object s3://{store.bucket}/{key} has sha256 {hashlib.sha256(bad).hexdigest()}, expected {good}"
    )
    assert not (tmp_path / "b" / "base-x").exists() and not list((tmp_path / "b").iterdir())


def test_an_object_holding_other_weights_is_refused_naming_both_hashes(store, tmp_path):
    base_objects._write_tar(fake_base(tmp_path / "w2", W2), tmp_path / "w2.tar")
    key = base_objects.object_key(H1)
    store.put_file(key, tmp_path / "w2.tar")  # a whole, well-formed object under another base's hash
    with pytest.raises(BinacError) as err:
        base_objects.fetch(H1, tmp_path / "b" / "base-x")
    assert (
        str(err.value) == f"store object s3://{store.bucket}/{key} holds a base with weights sha256 {H2}, expected {H1}"
    )
    assert not (tmp_path / "b" / "base-x").exists()


def test_a_base_built_under_one_home_is_used_under_an_empty_one_without_pretraining(store, tmp_path, monkeypatch):
    cfg = load_config("micro", TINIEST)
    home_a, home_b = Workspace(tmp_path / "a"), Workspace(tmp_path / "b")
    built = base_model.base_model(cfg, home_a)  # pretrained here, then put with the config's index entry
    weights = base_model.base_weights(built, home_a)
    assert store.keys("models") == [
        f"models/base-by-config/{cfg.base_digest()}.json",
        f"models/base/{weights}.tar",
    ]

    def no_pretraining(*args, **kwargs):
        raise AssertionError("pretrained a base the store holds")

    monkeypatch.setattr(pretrain, "build_base_model", no_pretraining)
    got = base_model.base_model(cfg, home_b)
    assert got.path == str(home_b.base_model_dir(cfg.base_digest()))
    assert got.digest == built.digest, "the same folder, byte for byte: the stages downstream are keyed alike"
    assert base_model.base_weights(got, home_b) == weights
    for f in Path(built.path).iterdir():
        assert (Path(got.path) / f.name).read_bytes() == f.read_bytes()


def test_a_named_base_is_fetched_by_its_prefix(store, tmp_path):
    base_objects.publish(fake_base(tmp_path / "elsewhere"), H1)
    home = Workspace(tmp_path / "b")
    folder = base_model.fetch_named(H1[:8], [home.models_root], home)
    assert folder == home.models_root / f"base-weights-{H1[:16]}" and (folder / "model.safetensors").read_bytes() == W1
    assert base_model.fetch_named(H1[:8], [home.models_root], home) is None, "held here now: not fetched again"
    assert base_model.fetch_named(H2[:8], [home.models_root], home) is None, "not stored: find_base refuses it"
