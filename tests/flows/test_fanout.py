"""flows/fanout.py without a server: a Prefect API that fails a look with a server error is looked at again (the
SQLite-backed server answers 503 "database is locked" under load), any other error stops the study, and so do
too many failed looks in a row. The real server and workers: tests/integration/test_study.py."""

import contextlib
from types import SimpleNamespace

import httpx
import pytest
from prefect.exceptions import PrefectHTTPStatusError

from flows import fanout


def http_error(status: int) -> PrefectHTTPStatusError:
    request = httpx.Request("POST", "http://127.0.0.1:4200/api/deployments/x/create_flow_run")
    response = httpx.Response(status, request=request, json={"exception_message": "Service Unavailable"})
    return PrefectHTTPStatusError.from_httpx_error(httpx.HTTPStatusError("", request=request, response=response))


def test_transient_is_a_server_error_or_a_lost_connection_only():
    assert fanout.transient(http_error(503)) and fanout.transient(http_error(500))
    assert not fanout.transient(http_error(404)) and not fanout.transient(http_error(409))
    assert fanout.transient(httpx.ConnectError("refused")) and fanout.transient(httpx.ReadTimeout("slow"))
    assert not fanout.transient(ValueError("a bug")) and not fanout.transient(KeyError("x"))


class FakePrefect:
    """Listing flow runs fails with the scripted errors first, then shows the run as submitted and completed."""

    def __init__(self, errors: list[BaseException]):
        self.errors, self.submitted = list(errors), []

    def flow_runs_by_key(self, client, study_tag):
        if self.errors:
            raise self.errors.pop(0)
        done = SimpleNamespace(id="fr-1", state_type=SimpleNamespace(value="COMPLETED"), total_run_time=None)
        return {"k1": [done]} if self.submitted else {}

    def run_deployment(self, deployment, **kw):
        self.submitted.append(kw["idempotency_key"])


def fan_out_with(monkeypatch, fake: FakePrefect, said: list[str], on_done=None):
    monkeypatch.setattr(fanout, "get_client", lambda sync_client: contextlib.nullcontext(None))
    monkeypatch.setattr(fanout, "_flow_runs_by_key", fake.flow_runs_by_key)
    monkeypatch.setattr(fanout, "run_deployment", fake.run_deployment)
    monkeypatch.setattr(fanout, "_online_workers", lambda client, pool: 1)
    run = fanout.Tracked("grpo-s0", "k1", {}, "grpo")
    fanout.fan_out(
        "train/study",
        "pool",
        [run],
        "binac-study:x",
        "/nowhere",
        lambda key: bool(fake.submitted),
        poll_s=0,
        say=said.append,
        on_done=on_done,
    )
    return run


def test_a_look_failed_by_the_server_is_taken_again_and_the_run_submitted_once(monkeypatch):
    fake, said = FakePrefect([http_error(503), httpx.ConnectError("refused")]), []
    run = fan_out_with(monkeypatch, fake, said)
    assert run.state == "done" and fake.submitted == ["k1-0"]
    retried = [s for s in said if "failed a request" in s]
    assert len(retried) == 2 and "PrefectHTTPStatusError" in retried[0] and "(1/60)" in retried[0]


def test_another_error_or_too_many_failed_looks_stop_the_study(monkeypatch):
    with pytest.raises(ValueError):
        fan_out_with(monkeypatch, FakePrefect([ValueError("a bug")]), [])
    said: list[str] = []
    with pytest.raises(PrefectHTTPStatusError):
        fan_out_with(monkeypatch, FakePrefect([http_error(503)] * (fanout.TRANSIENT_LOOKS + 1)), said)
    assert len([s for s in said if "failed a request" in s]) == fanout.TRANSIENT_LOOKS


def test_on_done_is_called_once_for_a_run_seen_finishing(monkeypatch):
    seen: list[str] = []
    run = fan_out_with(monkeypatch, FakePrefect([http_error(503)]), [], on_done=lambda t: seen.append(t.key))
    assert run.state == "done" and seen == ["k1"]


def test_a_running_flow_run_whose_process_died_before_its_run_lock_is_crashed_and_resubmitted(monkeypatch, tmp_path):
    """Its claim (binac_core/runs/runlock.py `flow_run_claim`) is free and says running; there is no run lock."""
    import json

    from binac_core.runs.runlock import claim_path

    claim = claim_path(tmp_path, "fr-1")
    claim.parent.mkdir(parents=True)
    claim.write_text(json.dumps({"pid": 1, "host": "h", "flow_run_id": "fr-1", "state": "running"}))
    crashed, submitted = [], []

    class Client:
        def set_flow_run_state(self, flow_run_id, state, force):
            crashed.append((flow_run_id, state.type.value, force))

    def flow_runs_by_key(client, study_tag):
        if not submitted:  # the stale flow run an earlier invocation left RUNNING
            return {"k1": [SimpleNamespace(id="fr-1", state_type=SimpleNamespace(value="RUNNING"))]}
        return {"k1": [SimpleNamespace(id="fr-2", state_type=SimpleNamespace(value="COMPLETED"), total_run_time=None)]}

    monkeypatch.setattr(fanout, "get_client", lambda sync_client: contextlib.nullcontext(Client()))
    monkeypatch.setattr(fanout, "_flow_runs_by_key", flow_runs_by_key)
    monkeypatch.setattr(fanout, "run_deployment", lambda deployment, **kw: submitted.append(kw["idempotency_key"]))
    monkeypatch.setattr(fanout, "_online_workers", lambda client, pool: 1)
    run = fanout.Tracked("grpo-s0", "k1", {}, "grpo")
    said: list[str] = []
    fanout.fan_out(
        "train/study", "pool", [run], "binac-study:x", tmp_path, lambda key: bool(submitted), poll_s=0, say=said.append
    )
    assert crashed == [("fr-1", "CRASHED", True)] and submitted == ["k1-1"] and run.state == "done"
    assert any("died while running" in s for s in said)


def test_a_running_flow_run_whose_claim_is_held_or_absent_is_waited_on(tmp_path):
    from binac_core.runs.runlock import flow_run_claim

    assert not fanout._dead(tmp_path, "k1", "fr-1")  # no lock, no claim: not started, or Prefect's engine only
    with flow_run_claim(tmp_path, "fr-1"):  # another open file description: held, as from another process
        assert not fanout._dead(tmp_path, "k1", "fr-1")
