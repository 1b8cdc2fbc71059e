"""A run's base named by its weights (`model.base_weights`, binac_core/model/base_model.py): found among the
workspace's models and `BINAC_BASE_PATH`, never built, keyed by its full weights hash, checked against the model
section; the field is validated and leaves the built base's folder name alone. No model is built or loaded here."""

from __future__ import annotations

import json

import pytest

from binac_core.errors import BinacError
from binac_core.foundation.config import load_config
from binac_core.foundation.workspace import Workspace
from binac_core.model import weights
from binac_core.model.base_model import ARCHITECTURE, base_model, existing_base

ABC = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
"""sha256 of b"abc"."""


@pytest.fixture
def ws(tmp_path, monkeypatch):
    monkeypatch.delenv("BINAC_MODEL_CACHE", raising=False)
    monkeypatch.delenv(weights.SEARCH_PATH_ENV, raising=False)
    monkeypatch.setattr(weights, "_MEMO", {})
    (tmp_path / "home").mkdir()
    return Workspace(tmp_path / "home")


def _base(folder, cfg, data: bytes = b"abc", **changed):
    """A base folder whose config.json describes `cfg`'s model section (with `changed` keys replaced)."""
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(data)
    saved = {key: getattr(cfg.model, field) for field, key in ARCHITECTURE.items()}
    (folder / "config.json").write_text(json.dumps({**saved, **changed}))
    return folder


def test_the_field_takes_a_hash_or_a_prefix_of_eight_digits_or_more():
    assert load_config("micro", {"model.base_weights": ABC}).model.base_weights == ABC
    assert load_config("micro", {"model.base_weights": ABC[:8]}).model.base_weights == ABC[:8]
    for bad in (ABC[:7], ABC.upper(), ABC + "0", "not-hex!"):
        with pytest.raises(BinacError, match=r"invalid config micro: model\.base_weights: String should match"):
            load_config("micro", {"model.base_weights": bad})


def test_naming_a_base_moves_the_run_config_not_the_built_base():
    plain, named = load_config("micro"), load_config("micro", {"model.base_weights": ABC[:8]})
    assert plain.base_digest() == named.base_digest()  # it names a base; it does not change what would be built
    assert plain.digest() != named.digest()  # the runs are other runs (their keys include the config)
    assert named.flat()["model.base_weights"] == ABC[:8]


def test_a_tiny_base_named_by_weights_is_found_never_built_and_keyed_by_its_weights(ws, tmp_path, monkeypatch):
    cfg = load_config("micro", {"model.base_weights": ABC[:8]})
    folder = _base(tmp_path / "elsewhere" / "models" / "base-0ld", cfg)  # an archive's layout
    with pytest.raises(BinacError, match=f"no base model with weights sha256 {ABC[:8]} in {ws.models_root}"):
        base_model(cfg, ws)
    assert not ws.models_root.exists()  # nothing was built
    monkeypatch.setenv(weights.SEARCH_PATH_ENV, str(tmp_path / "elsewhere"))
    base = base_model(cfg, ws)
    assert (base.path, base.digest) == (str(folder.resolve()), ABC)  # the digest that keys the stages: the weights
    assert existing_base(cfg, ws) == (folder.resolve(), ABC)


def test_a_named_base_the_model_section_does_not_describe_is_refused(ws):
    cfg = load_config("micro", {"model.base_weights": ABC})
    _base(ws.models_root / "base-x", cfg, hidden_size=cfg.model.hidden_size * 2, model_type="qwen2")
    with pytest.raises(BinacError) as err:
        base_model(cfg, ws)
    line = str(err.value)
    assert "\n" not in line and "which the config does not describe" in line
    assert f"model.hidden_size {cfg.model.hidden_size} (the base's hidden_size is {2 * cfg.model.hidden_size})" in line
    assert "model.architecture llama (the base's model_type is qwen2)" in line


def test_a_hub_folder_named_by_weights_must_hash_to_them(ws, tmp_path):
    folder = tmp_path / "hubmodel"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"abc")
    (folder / "config.json").write_text("{}")
    right = load_config("micro", {"model.source": "hub", "model.hub_id": str(folder), "model.base_weights": ABC[:8]})
    assert base_model(right, ws).digest == ABC and existing_base(right, ws) == (folder, ABC)
    wrong = load_config("micro", {"model.source": "hub", "model.hub_id": str(folder), "model.base_weights": "0" * 8})
    with pytest.raises(
        BinacError, match=f"model.base_weights 00000000: the hub model {folder} has weights sha256 {ABC}"
    ):
        base_model(wrong, ws)


def test_an_unbuilt_base_is_not_there_before_any_compute(ws):
    assert existing_base(load_config("micro"), ws) is None  # nothing is built to answer
    assert not ws.models_root.exists()
    assert existing_base(load_config("micro", {"model.source": "hub"}), ws) is None  # no hub id: nothing to hash
    assert existing_base(load_config("llama1b-math"), ws) is None  # a hub id is not downloaded to answer
