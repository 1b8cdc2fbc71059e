"""A base is its weights (`binac_core/model/weights.py`), on hand-computed cases: the hash is the sha256 of the
weights file's bytes (for shards, of their bytes in name order), whatever else the folder holds; it is cached by
file identity; a base is found by its hash or a prefix of it, and refused in one line when missing, ambiguous or
changed since its record."""

from __future__ import annotations

import json

import pytest

from binac_core.errors import BinacError
from binac_core.model import weights

ABC = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
"""sha256 of b"abc" (the FIPS 180-2 test vector)."""
EMPTY = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
"""sha256 of no bytes."""


@pytest.fixture(autouse=True)
def fresh_memo(monkeypatch):
    """Each test hashes afresh: the in-process cache is emptied (a new process's)."""
    monkeypatch.setattr(weights, "_MEMO", {})
    monkeypatch.delenv(weights.SEARCH_PATH_ENV, raising=False)


def _model(folder, data: bytes = b"abc", name: str = "model.safetensors", **extra):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(data)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", **extra}))
    return folder


def test_the_hash_is_sha256sum_of_the_weights_file_and_nothing_else(tmp_path):
    folder = _model(tmp_path / "m")
    assert weights.weights_sha256(folder) == ABC
    (folder / "tokenizer.json").write_text("{}")
    (folder / "config.json").write_text('{"model_type": "qwen2"}')
    (folder / weights.META).write_text(json.dumps({"seconds": 12.5}))
    weights._MEMO.clear()
    assert weights.weights_sha256(folder) == ABC  # config, tokenizer and metadata are not the base's identity
    assert weights.weights_sha256(_model(tmp_path / "empty", b"")) == EMPTY


def test_shards_are_hashed_as_their_bytes_in_name_order(tmp_path):
    folder = tmp_path / "sharded"
    folder.mkdir()
    (folder / "model-00002-of-00002.safetensors").write_bytes(b"bc")
    (folder / "model-00001-of-00002.safetensors").write_bytes(b"a")
    index = {"weight_map": {"lm_head": "model-00002-of-00002.safetensors", "embed": "model-00001-of-00002.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    assert [f.name for f in weights.weight_files(folder)] == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ]
    assert weights.weights_sha256(folder) == ABC  # cat shard1 shard2 | sha256sum: "a" + "bc"


def test_safetensors_before_pytorch_bin_as_transformers_loads_them(tmp_path):
    folder = _model(tmp_path / "both", b"abc")
    (folder / "pytorch_model.bin").write_bytes(b"")
    assert weights.weight_files(folder) == [folder / "model.safetensors"]
    only_bin = _model(tmp_path / "bin", b"", name="pytorch_model.bin")
    assert weights.weights_sha256(only_bin) == EMPTY


def test_no_weights_or_a_missing_shard_is_one_line_naming_the_folder(tmp_path):
    folder = tmp_path / "none"
    folder.mkdir()
    with pytest.raises(BinacError, match=r"none: no weights file") as err:
        weights.weight_files(folder)
    assert "\n" not in str(err.value)
    (folder / "model.safetensors.index.json").write_text('{"weight_map": {"a": "model-00001-of-00001.safetensors"}}')
    with pytest.raises(BinacError, match=r"names shards that are missing: model-00001-of-00001\.safetensors"):
        weights.weight_files(folder)


def test_hashes_are_cached_by_file_identity_in_the_process_and_the_cache_file(tmp_path):
    folder, cache = _model(tmp_path / "m"), tmp_path / "cache.json"
    assert weights.weights_sha256(folder, cache) == ABC
    [(key, value)] = json.loads(cache.read_text()).items()
    assert value == ABC
    weights._MEMO.clear()  # a new process: the cache file answers without reading the weights
    cache.write_text(json.dumps({key: "cached"}))
    assert weights.weights_sha256(folder, cache) == "cached"
    weights._MEMO.clear()
    (folder / "model.safetensors").write_bytes(b"")  # new bytes, new size and time: a new identity
    assert weights.weights_sha256(folder, cache) == EMPTY
    assert set(json.loads(cache.read_text()).values()) == {"cached", EMPTY}


def test_a_record_that_disagrees_with_the_weights_refuses_naming_both(tmp_path):
    folder = _model(tmp_path / "m")
    assert weights.recorded(folder) is None and weights.verified(folder) == ABC
    (folder / weights.META).write_text(json.dumps({weights.RECORD: ABC}))
    assert weights.recorded(folder) == ABC and weights.verified(folder) == ABC
    (folder / weights.META).write_text(json.dumps({weights.RECORD: EMPTY}))
    with pytest.raises(BinacError) as err:
        weights.verified(folder)
    assert f"records weights sha256 {EMPTY} but its weights hash to {ABC}" in str(err.value)


def test_a_base_is_found_by_its_hash_or_a_prefix_of_it(tmp_path, monkeypatch):
    models, archive = tmp_path / "models", tmp_path / "archive"
    abc = _model(models / "base-1111")
    _model(models / "base-2222", b"")
    _model(models / ".base-3333.tmp-7", b"abc")  # a build in progress is no base
    copy = _model(archive / "models" / "base-4444")  # the same weights in an archive: the same base
    where = [models, archive]
    assert weights.find_base(ABC, where) == (abc, ABC)
    assert weights.find_base(ABC[:8], where) == (abc, ABC)
    assert weights.find_base(ABC[:8], [archive, models]) == (copy, ABC)  # the first found, in search order
    assert weights.find_base(EMPTY[:12], where) == (models / "base-2222", EMPTY)
    assert weights.find_base(ABC[:8], [abc]) == (abc, ABC)  # an entry may be a model folder itself
    monkeypatch.setenv(weights.SEARCH_PATH_ENV, str(archive))
    shipped = weights.SHIPPED.resolve()  # the bases the package ships: searched last
    assert weights.search_path(tmp_path / "elsewhere") == [tmp_path / "elsewhere", archive.resolve(), shipped]


def test_a_missing_base_names_where_it_looked(tmp_path):
    models = tmp_path / "models"
    _model(models / "a", b"abc")
    with pytest.raises(BinacError) as err:
        weights.find_base("deadbeef", [models, tmp_path / "nowhere"])
    line = str(err.value)
    assert "\n" not in line and "no base model with weights sha256 deadbeef in " in line
    assert str(models) in line and str(tmp_path / "nowhere") in line and weights.SEARCH_PATH_ENV in line


def test_an_ambiguous_prefix_refuses_naming_both_hashes(tmp_path, monkeypatch):
    models = tmp_path / "models"
    _model(models / "a", b"abc")
    _model(models / "b", b"")
    # Two bases whose hashes share the first 8 digits cannot be built by hand; the hashes are given instead.
    fake = {str(models / "a"): "c0ffee00" + "1" * 56, str(models / "b"): "c0ffee00" + "2" * 56}
    monkeypatch.setattr(weights, "weights_sha256", lambda folder, cache=None: fake[str(folder)])
    with pytest.raises(BinacError) as err:
        weights.find_base("c0ffee00", [models])
    assert "c0ffee00" + "1" * 56 in str(err.value) and "c0ffee00" + "2" * 56 in str(err.value)
    assert "give more digits" in str(err.value)


def test_check_same_names_both_hashes_and_passes_what_recorded_nothing():
    weights.check_same(None, ABC, "run x")
    weights.check_same(ABC, ABC, "run x")
    with pytest.raises(BinacError) as err:
        weights.check_same(EMPTY, ABC, "run x (k1)", "do y")
    assert str(err.value) == f"run x (k1) ran on base weights sha256 {EMPTY}, but this base's weights are {ABC}; do y"
