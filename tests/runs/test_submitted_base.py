"""A run a study submits names the study's base by its weights hash (`binac_core.runs.bases.check_submitted`,
flows/train.py's `base_sha256`): with an object store (a real `moto_server`) a worker with an empty home fetches
that base; one holding another base for the config, or facing a store without the base, refuses in one line naming
the hashes, before any compute. Without a store the study's parameters are what they were."""

from __future__ import annotations

import hashlib

import pytest
from conftest import REPO
from fake_bases import H1, H2, W2, fake_base, use_store

import flows.train
from binac_core.errors import BinacError
from binac_core.foundation.config import load_config
from binac_core.foundation.workspace import Workspace
from binac_core.model import base_objects
from binac_core.runs.bases import SUBMITTED_HINT, check_submitted
from binac_core.studies.study import grid, load_study
from flows.study import run_key, train_parameters


@pytest.fixture
def store(object_store, monkeypatch):
    return use_store(object_store, monkeypatch)


def test_an_empty_home_fetches_the_study_base(store, tmp_path):
    cfg = load_config("micro")
    base_objects.publish(fake_base(tmp_path / "study-host"), H1)
    ws = Workspace(tmp_path / "worker")
    check_submitted(cfg, ws, H1)
    here = ws.base_model_dir(cfg.base_digest())
    assert (here / "model.safetensors").read_bytes() == (tmp_path / "study-host" / "model.safetensors").read_bytes()
    check_submitted(cfg, ws, H1)  # there now: nothing fetched, nothing said


def test_another_base_here_is_refused_naming_both_hashes(store, tmp_path):
    cfg = load_config("micro")
    base_objects.publish(fake_base(tmp_path / "study-host"), H1)
    ws = Workspace(tmp_path / "worker")
    here = fake_base(ws.base_model_dir(cfg.base_digest()), W2)  # this host built its own, other weights
    with pytest.raises(BinacError) as err:
        check_submitted(cfg, ws, H1)
    assert (
        str(err.value) == f"this worker's base {here} has weights sha256 {H2}, the study's has {H1}; {SUBMITTED_HINT}"
    )


def test_a_store_without_the_base_is_refused_in_one_line(store, tmp_path):
    with pytest.raises(BinacError, match=f"^the store holds no base with weights sha256 {H1} "):
        check_submitted(load_config("micro"), Workspace(tmp_path / "worker"), H1)


def test_the_train_flow_refuses_another_base_before_any_compute(store, tmp_path, monkeypatch):
    """`_train` with the study's hash on a worker holding another base: the refusal is the run's end, and nothing
    was built, locked or started (each of those fails this test if called)."""
    monkeypatch.setenv("BINAC_HOME", str(tmp_path / "worker"))
    cfg = load_config("micro")
    here = fake_base(Workspace(tmp_path / "worker").base_model_dir(cfg.base_digest()), W2)

    def computed(*args, **kwargs):
        raise AssertionError("computed something before checking the base")

    for name in ("check_train", "build_base_model", "run_lock", "start_run"):
        monkeypatch.setattr(flows.train, name, computed)
    monkeypatch.setattr(flows.train, "refuse", lambda exc: ("Failed", str(exc)))
    request = flows.train.TrainRequest(preset="micro", method="grpo", steps=1, seed=0, base_sha256=H1)
    line = f"this worker's base {here.resolve()} has weights sha256 {H2}, the study's has {H1}; {SUBMITTED_HINT}"
    assert flows.train._train(request) == ("Failed", line)


def test_without_a_store_the_study_sends_what_it_sent_and_keeps_its_run_keys():
    st = load_study(REPO / "studies" / "micro-smoke.yaml")
    [r, *_] = grid(st, {"easy": 2})
    before = train_parameters(st, r, "parent", "study-key", "code")
    assert "base_sha256" not in before and train_parameters(st, r, "parent", "study-key", "code", "") == before
    assert train_parameters(st, r, "parent", "study-key", "code", H1) == {**before, "base_sha256": H1}
    cfg = load_config(st.preset, r.overrides)
    blob = f"{cfg.digest()}|{r.method}|{r.seed}|{st.iterations}|study-key|code|"
    assert run_key(st, r, "study-key", "code") == hashlib.sha256(blob.encode()).hexdigest()[:12], "no hash in it"
