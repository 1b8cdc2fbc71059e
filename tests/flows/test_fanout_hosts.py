"""flows/fanout.py with workers on other hosts (`BINAC_STORE` set), without a server: the local lock files are not
looked at, each run is submitted with the liveness tag and heartbeats on (flows/liveness.py), the automation is
made sure of once, and a flow run the automation marked CRASHED is resubmitted without spending a retry. With a
real server: tests/integration/test_liveness.py."""

import contextlib
import json
from types import SimpleNamespace

import pytest

from binac_core.runs.runlock import claim_path
from flows import fanout, liveness


def flow_run(id_: str, state: str, message: str | None = None) -> SimpleNamespace:
    return SimpleNamespace(
        id=id_,
        state_type=SimpleNamespace(value=state),
        state=SimpleNamespace(type=SimpleNamespace(value=state), message=message),
        total_run_time=None,
    )


def dead_claim(home, flow_run_id: str) -> None:
    """What a flow run killed before its run lock leaves: its claim free and saying running."""
    claim = claim_path(home, flow_run_id)
    claim.parent.mkdir(parents=True)
    claim.write_text(json.dumps({"pid": 1, "host": "h", "flow_run_id": flow_run_id, "state": "running"}))


def fan_out(monkeypatch, tmp_path, looks: list[dict], submitted_before: int = 2):
    """`fan_out` of one run (retries 1, submitted `submitted_before` times already: by default its retries are spent)
    over scripted looks, one per submission (the last one repeats); the run is finished once its newest flow run is
    COMPLETED. Returns (run, submissions, crashed, said, automations made sure of)."""
    submitted, crashed, said, ensured = [], [], [], []

    class Client:
        def set_flow_run_state(self, flow_run_id, state, force):
            crashed.append(flow_run_id)

    def flow_runs_by_key(client, study_tag):
        return looks[min(len(submitted), len(looks) - 1)]

    def is_finished(key):
        runs = flow_runs_by_key(None, "tag").get(key)
        return bool(runs) and runs[-1].state_type.value == "COMPLETED"

    monkeypatch.setattr(fanout, "get_client", lambda sync_client: contextlib.nullcontext(Client()))
    monkeypatch.setattr(fanout, "_flow_runs_by_key", flow_runs_by_key)
    monkeypatch.setattr(fanout, "run_deployment", lambda deployment, **kw: submitted.append(kw))
    monkeypatch.setattr(fanout, "_online_workers", lambda client, pool: 1)
    monkeypatch.setattr(liveness, "ensure_crash_automation", lambda: ensured.append(1))
    run = fanout.Tracked("grpo-s0", "k1", {}, "grpo", submitted=submitted_before)
    fanout.fan_out("train/study", "pool", [run], "tag", tmp_path, is_finished, retries=1, poll_s=0, say=said.append)
    return run, submitted, crashed, said, ensured


@pytest.fixture
def store(monkeypatch):
    monkeypatch.setenv("BINAC_STORE", "s3://bucket/lab")  # nothing here reaches it


def test_a_run_crashed_by_the_automation_is_resubmitted_with_the_tag_and_heartbeats(monkeypatch, tmp_path, store):
    crashed_run = flow_run("fr-1", "CRASHED", liveness.CRASH_MESSAGE)
    looks = [{"k1": [crashed_run]}, {"k1": [crashed_run, flow_run("fr-2", "COMPLETED")]}]
    run, submitted, crashed, said, ensured = fan_out(monkeypatch, tmp_path, looks)
    assert run.state == "done" and crashed == [] and ensured == [1]
    assert [kw["idempotency_key"] for kw in submitted] == ["k1-1"]  # resubmitted although its retries are spent
    assert liveness.TAG in submitted[0]["tags"] and submitted[0]["job_variables"] == liveness.job_variables()
    assert any("stopped sending heartbeats" in s for s in said)


@pytest.mark.parametrize("with_store", [True, False])
def test_with_a_store_the_local_claim_is_not_looked_at(monkeypatch, tmp_path, with_store):
    """A RUNNING flow run whose claim on this disk looks dead: crashed by the probe on one machine, waited on (the
    server decides) with a store."""
    if with_store:
        monkeypatch.setenv("BINAC_STORE", "s3://bucket/lab")
    else:
        monkeypatch.delenv("BINAC_STORE", raising=False)
    dead_claim(tmp_path, "fr-1")
    crashed, submitted = [], []
    client = SimpleNamespace(set_flow_run_state=lambda flow_run_id, state, force: crashed.append(flow_run_id))
    monkeypatch.setattr(fanout, "run_deployment", lambda deployment, **kw: submitted.append(kw))
    run = fanout.Tracked("grpo-s0", "k1", {}, "grpo", submitted=1)
    progress = fanout.Progress(lambda line: None)
    looked = [flow_run("fr-1", "RUNNING")]
    fanout._advance(client, run, looked, "train/study", "tag", tmp_path, lambda key: False, 1, progress, print)
    if with_store:
        assert crashed == [] and submitted == [] and run.state == "running"
    else:
        assert crashed == ["fr-1"] and len(submitted) == 1 and run.state == "queued"


def test_a_crash_with_another_message_spends_a_retry(monkeypatch, tmp_path, store):
    looks = [{"k1": [flow_run("fr-1", "CRASHED", "the worker's process exited")]}]
    run, submitted, crashed, said, _ = fan_out(monkeypatch, tmp_path, looks)
    assert run.state == "failed" and submitted == []


def test_without_a_store_runs_are_submitted_as_before(monkeypatch, tmp_path):
    monkeypatch.delenv("BINAC_STORE", raising=False)
    looks = [{"k1": [flow_run("fr-1", "FAILED")]}, {"k1": [flow_run("fr-2", "COMPLETED")]}]
    run, submitted, crashed, said, ensured = fan_out(monkeypatch, tmp_path, looks, submitted_before=1)
    assert run.state == "done" and ensured == []
    assert submitted[0]["tags"] == ["tag", "binac-run:k1"] and "job_variables" not in submitted[0]


def test_the_automation_watches_tagged_flow_runs_heartbeats_and_crashes_without_force():
    automation = liveness.crash_automation()
    trigger = automation.trigger
    assert trigger.posture == "Proactive" and trigger.within.total_seconds() == liveness.WITHIN_S
    assert trigger.after == {"prefect.flow-run.heartbeat"}
    assert trigger.expect >= {"prefect.flow-run.heartbeat", "prefect.flow-run.Completed", "prefect.flow-run.Crashed"}
    assert trigger.match_related.get("prefect.resource.id") == [f"prefect.tag.{liveness.TAG}"]
    (action,) = automation.actions
    assert action.state.value == "CRASHED" and not action.force and action.message == liveness.CRASH_MESSAGE
    assert (
        liveness.WITHIN_S > liveness.HEARTBEAT_S == int(liveness.heartbeat_env()["PREFECT_FLOWS_HEARTBEAT_FREQUENCY"])
    )


def test_a_failed_flow_run_is_said_with_its_message_and_submitted_again(monkeypatch, tmp_path, store):
    failed = flow_run("fr-1", "FAILED", "FileNotFoundError: adapters/critic")
    looks = [{"k1": [failed]}, {"k1": [failed, flow_run("fr-2", "COMPLETED")]}]
    run, submitted, _, said, _ = fan_out(monkeypatch, tmp_path, looks, submitted_before=0)
    assert run.state == "done" and [kw["idempotency_key"] for kw in submitted] == ["k1-1"]
    assert (
        "[study] grpo-s0: flow run fr-1 ended FAILED: FileNotFoundError: adapters/critic; submitting it again" in said
    )
