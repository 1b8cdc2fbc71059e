"""Code identity: a study passes its stage code digest with every run it submits, and a worker whose own digest
differs refuses the run in one line naming both, before any compute (binac_core/runs/plans.py `check_stage_code`,
flows/train.py); the study prints that line when it gives up on the run (flows/fanout.py)."""

from __future__ import annotations

import contextlib
import inspect
from types import SimpleNamespace

import pytest
from conftest import REPO

import flows.train
from binac_core.errors import BinacError
from binac_core.foundation.provenance import stage_code_digest
from binac_core.runs.plans import check_stage_code
from binac_core.studies.study import grid, load_study
from flows import fanout
from flows.study import train_parameters

STUDY_CODE, WORKER_CODE = "0123456789abcdef", "fedcba9876543210"
REFUSAL = (
    "this worker's stage code digest is fedcba9876543210, the study's is 0123456789abcdef: "
    "run the worker from the study's commit (no stage was computed)"
)


def test_a_worker_on_other_stage_code_refuses_in_one_line_naming_both_digests():
    with pytest.raises(BinacError) as err:
        check_stage_code(STUDY_CODE, WORKER_CODE)
    assert str(err.value) == REFUSAL
    check_stage_code(STUDY_CODE, STUDY_CODE)  # the same code: no word
    check_stage_code("", WORKER_CODE)  # no digest submitted (a run by hand, a comparison's own): no check


def test_the_train_flow_refuses_before_any_compute(monkeypatch):
    """`_train` with another digest than the worker's: the run ends with the refusal, and nothing was planned,
    built or computed (each of those fails this test if called)."""

    def computed(*args, **kwargs):
        raise AssertionError("computed something before checking the stage code")

    for name in ("plan", "check_train", "build_base_model", "run_lock", "start_run"):
        monkeypatch.setattr(flows.train, name, computed)
    monkeypatch.setattr(flows.train, "refuse", lambda exc: ("Failed", str(exc)))
    monkeypatch.setattr(flows.train, "stage_code_digest", lambda: WORKER_CODE)
    request = flows.train.TrainRequest(preset="micro", method="grpo", steps=1, seed=0, stage_code=STUDY_CODE)
    assert flows.train._train(request) == ("Failed", REFUSAL)


def test_a_study_submits_its_stage_code_digest_with_every_run():
    st = load_study(REPO / "studies" / "micro-smoke.yaml")
    runs = grid(st, {"easy": 2})
    params = [train_parameters(st, r, "parent-run", "study-key", stage_code_digest()) for r in runs]
    assert [p["stage_code"] for p in params] == [stage_code_digest()] * 2
    accepted = inspect.signature(flows.train.train.fn).parameters
    assert all(set(p) <= set(accepted) for p in params), "the train flow takes every parameter a study sends"


def test_the_study_prints_the_refusal_when_it_gives_up_on_the_run(monkeypatch):
    refused = SimpleNamespace(
        id="fr-1", state_type=SimpleNamespace(value="FAILED"), state=SimpleNamespace(message=f"error: {REFUSAL}")
    )
    monkeypatch.setattr(fanout, "get_client", lambda sync_client: contextlib.nullcontext(None))
    monkeypatch.setattr(fanout, "_flow_runs_by_key", lambda client, tag: {"k1": [refused]})
    monkeypatch.setattr(fanout, "_online_workers", lambda client, pool: 1)
    run = fanout.Tracked("grpo-s0", "k1", {}, "grpo", submitted=2)  # its retries spent
    said: list[str] = []
    fanout.fan_out("train/study", "pool", [run], "tag", "/nowhere", lambda key: False, poll_s=0, say=said.append)
    assert run.state == "failed"
    assert f"[study] grpo-s0: FAILED again; giving up on it (see flow run fr-1): error: {REFUSAL}" in said
