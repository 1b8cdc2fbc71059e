"""A stage's Prefect cache key (tasks/_common.py `CACHED`) names its files by store-relative key and digest: the
same stage under two `$BINAC_HOME`s (and models folders) has one key; another input file, digest or output
folder gives another. The same across two checkout paths, in subprocesses: tests/integration/test_cache_keys.py."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from binac_core.foundation.config import load_config
from binac_core.foundation.files import StageFile
from binac_core.foundation.workspace import workspace
from binac_core.model.stage_io import AdapterRef, AdapterRole
from tasks.rollout import rollout_task


def rollout_key(home: Path, monkeypatch, models: Path | None = None, **change) -> str:
    """The cache key of the rollout stage of step 1 of a run `grpo-s0-k`, its files under `home` (and `models`)."""
    monkeypatch.setenv("BINAC_HOME", str(home))
    if models is None:
        monkeypatch.delenv("BINAC_MODEL_CACHE", raising=False)
    else:
        monkeypatch.setenv("BINAC_MODEL_CACHE", str(models))
    ws = workspace()
    inputs = {
        "cfg_d": load_config("micro").model_dump(mode="json"),
        "base": StageFile(str(ws.base_model_dir("0123abcd")), "5e1f00d5aa11b0b1"),
        "train": StageFile(str(ws.problems_dir("synthetic", "d1") / "train.json"), "77aa77aa77aa77aa"),
        "actor": AdapterRef(AdapterRole.ACTOR, str(ws.run_dir("init-k-s0") / "actor"), "c0ffee00c0ffee00"),
        "seed": 0,
        "step": 1,
        "out_dir": str(ws.run_dir("grpo-s0-k") / "step-00001"),
    }
    for name, value in change.items():
        inputs[name] = value(ws, inputs[name])
    key = rollout_task.cache_policy.compute_key(
        task_ctx=SimpleNamespace(task=rollout_task), inputs=inputs, flow_parameters={}
    )
    assert key
    return key


def test_the_same_stage_under_two_homes_has_one_cache_key(tmp_path, monkeypatch):
    first = rollout_key(tmp_path / "host-a" / "home", monkeypatch)
    assert rollout_key(tmp_path / "b" / ".binac", monkeypatch) == first
    assert rollout_key(tmp_path / "c" / "home", monkeypatch, models=tmp_path / "shared-models") == first


@pytest.mark.parametrize(
    "change",
    [
        {"train": lambda ws, f: StageFile(f.path, "77aa77aa77aa77ab")},  # other content
        {"train": lambda ws, f: StageFile(str(ws.problems_dir("synthetic", "d2") / "train.json"), f.digest)},
        {"actor": lambda ws, a: AdapterRef(a.name, a.path, "c0ffee00c0ffee01")},
        {"base": lambda ws, b: StageFile(b.path, "5e1f00d5aa11b0b2")},
        {"out_dir": lambda ws, d: str(ws.run_dir("grpo-s0-k") / "step-00002")},
        {"step": lambda ws, s: 2},
    ],
)
def test_another_input_file_digest_or_folder_gives_another_key(tmp_path, monkeypatch, change):
    assert rollout_key(tmp_path / "home", monkeypatch, **change) != rollout_key(tmp_path / "home", monkeypatch)


def test_a_base_outside_the_roots_is_keyed_by_its_content_alone(tmp_path, monkeypatch):
    """A base found in a `BINAC_BASE_PATH` folder, which each host keeps where it likes."""
    outside = {"base": lambda ws, b: StageFile(str(tmp_path / "lab-a" / "bases" / "testbed"), b.digest)}
    elsewhere = {"base": lambda ws, b: StageFile(str(tmp_path / "lab-b" / "testbed"), b.digest)}
    assert rollout_key(tmp_path / "a", monkeypatch, **outside) == rollout_key(tmp_path / "b", monkeypatch, **elsewhere)
