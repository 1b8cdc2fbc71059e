"""The base the package ships (binac_core/presets/bases/, the `demo` preset's): found by its weights hash in an
empty workspace, checked against its record on load, and a corrupt copy refused in one line naming both hashes.
Nothing is built or loaded here (the weights are only hashed)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from binac_core.errors import BinacError
from binac_core.foundation.config import load_config
from binac_core.foundation.workspace import Workspace
from binac_core.model import weights
from binac_core.model.base_model import base_model

TESTBED = "3ba757d641b20b8a220d7cee5bbd5a06cbd61931b97542a0cc6f804689006165"
"""The third study's `testbed` base (studies/archive/models/weights.json)."""


@pytest.fixture
def ws(tmp_path, monkeypatch):
    monkeypatch.delenv(weights.SEARCH_PATH_ENV, raising=False)
    monkeypatch.setattr(weights, "_MEMO", {})
    (tmp_path / "home").mkdir()
    return Workspace(tmp_path / "home")


def test_the_demo_runs_on_the_shipped_testbed_base_found_by_its_weights(ws):
    cfg = load_config("demo")
    assert TESTBED.startswith(cfg.model.base_weights)
    base = base_model(cfg, ws)
    assert base.digest == TESTBED and weights.SHIPPED.resolve() in Path(base.path).parents
    assert weights.recorded(base.path) == TESTBED  # the record the load checks against
    assert not ws.models_root.exists()  # nothing was built


def test_a_corrupt_copy_of_the_shipped_base_is_refused_in_one_line(ws, tmp_path, monkeypatch):
    [shipped] = [f for f in weights.model_folders(weights.SHIPPED) if weights.recorded(f) == TESTBED]
    copy = tmp_path / "bases" / shipped.name
    shutil.copytree(shipped, copy)
    data = bytearray((copy / "model.safetensors").read_bytes())
    data[-1] ^= 0xFF  # one byte of the last weight flipped
    (copy / "model.safetensors").write_bytes(bytes(data))
    monkeypatch.setenv(weights.SEARCH_PATH_ENV, str(tmp_path / "bases"))  # searched before the shipped copy
    with pytest.raises(BinacError) as err:
        base_model(load_config("demo"), ws)
    line = str(err.value)
    assert "\n" not in line and str(copy.resolve()) in line
    assert f"records weights sha256 {TESTBED} but its weights hash to " in line and "corrupt" in line
