"""Store-relative keys (`binac_core.foundation.store_keys`): hand-written paths under each root, and the portable
form of stage inputs that cache keys hash."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from binac_core.foundation.files import StageFile
from binac_core.foundation.provenance import LIBRARY
from binac_core.foundation.store_keys import inputs_digest, portable, store_key
from binac_core.foundation.workspace import Workspace
from binac_core.model.stage_io import AdapterRef, AdapterRole, RewardsFile


@pytest.fixture
def ws(monkeypatch) -> Workspace:
    monkeypatch.delenv("BINAC_MODEL_CACHE", raising=False)
    return Workspace(Path("/h/one"))


def test_a_path_is_named_relative_to_the_first_root_that_holds_it(ws, monkeypatch):
    assert store_key("/h/one/runs/r/step-00001/attempts.json", ws) == "runs/r/step-00001/attempts.json"
    assert store_key("/h/one/data/synthetic-ab/train.json", ws) == "data/synthetic-ab/train.json"
    assert store_key("/h/one/models/base-12/config.json", ws) == "models/base-12/config.json"
    assert store_key(LIBRARY / "presets" / "bases" / "testbed", ws) == "package/presets/bases/testbed"
    assert store_key("/h/one", ws) == "."
    assert store_key("/h/onetwo/runs/x", ws) is None, "a sibling folder whose name starts alike is outside"
    assert store_key("/elsewhere/base", ws) is None and store_key("runs/x", ws) is None
    monkeypatch.setenv("BINAC_MODEL_CACHE", "/cache/models")
    assert store_key("/cache/models/base-12", ws) == "models/base-12"


def test_stage_files_are_named_by_key_and_digest_and_out_dirs_by_key(ws):
    inputs = {
        "cfg_d": {"name": "micro", "model": {"hub_id": None, "lr": 0.5}},
        "base": StageFile("/elsewhere/bases/testbed", "3ba757d6"),
        "split": StageFile("/h/one/data/synthetic-ab/train.json", "00ff"),
        "rewards": RewardsFile(
            "/h/one/runs/r/s/r0.rewards.json", "aa", StageFile("/h/one/runs/r/s/r0.errors.json", "bb")
        ),
        "actor": AdapterRef(AdapterRole.ACTOR, "/h/one/runs/init-k-s0/actor", "cc"),
        "hub": StageFile("org/model", "org/model"),
        "protocols": ("single", "feedback"),
        "out_dir": "/h/one/runs/r/step-00001",
        "step": 1,
    }
    assert portable(inputs, ws) == {
        "cfg_d": {"name": "micro", "model": {"hub_id": None, "lr": 0.5}},
        "base": {"__type__": "StageFile", "path": None, "digest": "3ba757d6"},
        "split": {"__type__": "StageFile", "path": "data/synthetic-ab/train.json", "digest": "00ff"},
        "rewards": {
            "__type__": "RewardsFile",
            "path": "runs/r/s/r0.rewards.json",
            "digest": "aa",
            "execution_results": {"__type__": "StageFile", "path": "runs/r/s/r0.errors.json", "digest": "bb"},
        },
        "actor": {"__type__": "AdapterRef", "name": "actor", "path": "runs/init-k-s0/actor", "digest": "cc"},
        "hub": {"__type__": "StageFile", "path": "org/model", "digest": "org/model"},
        "protocols": ["single", "feedback"],
        "out_dir": "runs/r/step-00001",
        "step": 1,
    }
    small = {"out_dir": "/h/one/runs/r", "n": 2}
    by_hand = hashlib.sha256(b'{"n":2,"out_dir":"runs/r"}').hexdigest()
    assert inputs_digest(small, ws) == by_hand
    assert inputs_digest({"out_dir": "/h/two/runs/r", "n": 2}, Workspace(Path("/h/two"))) == by_hand
    assert json.loads(json.dumps(portable(inputs, ws))) == portable(inputs, ws)


def test_a_value_of_an_unknown_type_needs_a_fallback(ws):
    with pytest.raises(TypeError, match="no portable form for a object"):
        portable({"x": object()}, ws)
    assert portable({"x": object()}, ws, other=lambda v: "hashed") == {"x": "hashed"}


def test_a_file_another_host_wrote_is_named_by_the_key_its_writer_recorded(ws):
    """A cached stage's output comes back with its writer's path (under that host's home) and the key it was put
    into the object store under: here it is named as it was there, so the stages downstream keep their keys."""
    there, here = Workspace(Path("/hosts/a/home")), ws
    written = AdapterRef(AdapterRole.ACTOR, "/hosts/a/home/runs/init-k-s0/actor", "cc", key="runs/init-k-s0/actor")
    local = AdapterRef(AdapterRole.ACTOR, "/h/one/runs/init-k-s0/actor", "cc")
    assert portable(written, here) == portable(written, there) == portable(local, here)
    problems = StageFile("/hosts/a/home/data/synthetic-ab/train.json", "00ff", key="data/synthetic-ab/train.json")
    assert inputs_digest({"train": problems, "step": 1}, here) == inputs_digest({"train": problems, "step": 1}, there)
    assert portable(StageFile("/hosts/a/home/x.json", "00ff"), here)["path"] is None, "no key: by its digest alone"
