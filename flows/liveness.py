"""Liveness across hosts: a study's flow run whose process died is marked CRASHED by the Prefect server itself.

This follows Prefect's "How to detect and respond to zombie flows" (https://docs.prefect.io/v3/advanced/
detect-zombie-flows): the flow run's process emits a `prefect.flow-run.heartbeat` event every
`PREFECT_FLOWS_HEARTBEAT_FREQUENCY` seconds (a thread of Prefect's flow engine, at least every 30 s), and an
automation with a proactive trigger expects, after each heartbeat of a flow run, another heartbeat or a terminal
state event (Completed, Failed, Cancelled, Crashed) of the same flow run within `within_s` seconds; when none comes,
its action sets the flow run CRASHED with `CRASH_MESSAGE`. The server's triggers service evaluates proactive
triggers every few seconds (`PREFECT_SERVER_EVENTS_PROACTIVE_GRANULARITY`), so a dead run reads CRASHED about
`within_s` seconds after its last heartbeat, whatever host it ran on.

Unlike the documented automation, this one matches only flow runs tagged `TAG`: Prefect 3.7 emits heartbeats every
180 s by default, so a flow run started without `heartbeat_env()` (a `binac train` on the command line, a manual
`prefect deployment run`) would be marked CRASHED while alive after 90 s of its default silence. A study in lab mode
submits each run with the tag and with `job_variables()` (the heartbeat frequency in the flow run's environment), so
every tagged flow run heartbeats at `HEARTBEAT_S`. The action does not force the state: a flow run that already
reached a terminal state keeps it.

Not covered: a flow run that dies before its engine emitted a first heartbeat (the trigger starts at a heartbeat;
such a run stays PENDING or RUNNING), and a live process whose heartbeats stop reaching the server for `within_s`
seconds (a network partition): it is marked CRASHED while it still computes, and the study's resubmission waits
for its run's concurrency lease (flows/exclusive.py) instead of computing beside it."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from uuid import UUID

HEARTBEAT_S = 30
"""Seconds between a flow run's heartbeats: the smallest Prefect accepts (`prefect.flow_engine.
MINIMUM_HEARTBEAT_INTERVAL`; `PREFECT_FLOWS_HEARTBEAT_FREQUENCY` is validated `ge=30`)."""
WITHIN_S = 3 * HEARTBEAT_S
"""Seconds without a heartbeat before a flow run is marked CRASHED: three missed heartbeats, as documented."""
TAG = "binac-liveness"
"""The tag of the flow runs the automation watches (the module docstring says why not every flow run)."""
AUTOMATION = "binac: crash flow runs whose heartbeats stopped"
CRASH_MESSAGE = "Flow run marked as crashed due to missing heartbeats."
"""The CRASHED state's message, the documented automation's: how a study tells this automation's verdict."""
TERMINAL_EVENTS = ("Completed", "Failed", "Cancelled", "Crashed")


def heartbeat_env() -> dict[str, str]:
    """The environment that makes a flow run's process emit heartbeats every `HEARTBEAT_S` seconds (for a worker:
    a process worker passes its environment on to its flow runs)."""
    return {"PREFECT_FLOWS_HEARTBEAT_FREQUENCY": str(HEARTBEAT_S)}


def job_variables() -> dict:
    """Job variables of a submitted flow run that turn its heartbeats on; a worker merges their `env` into the
    deployment's."""
    return {"env": heartbeat_env()}


def crash_automation(within_s: float = WITHIN_S):
    """The automation of the module docstring (an `AutomationCore`, not yet on any server)."""
    from prefect.client.schemas.objects import StateType
    from prefect.events.actions import ChangeFlowRunState
    from prefect.events.schemas.automations import AutomationCore, EventTrigger, Posture
    from prefect.events.schemas.events import ResourceSpecification

    return AutomationCore(
        name=AUTOMATION,
        description=f"Marks a flow run tagged {TAG!r} CRASHED when its heartbeats stop for {within_s:g} s.",
        trigger=EventTrigger(
            after={"prefect.flow-run.heartbeat"},
            expect={"prefect.flow-run.heartbeat", *(f"prefect.flow-run.{s}" for s in TERMINAL_EVENTS)},
            match=ResourceSpecification({"prefect.resource.id": ["prefect.flow-run.*"]}),
            match_related=ResourceSpecification(
                {"prefect.resource.role": "tag", "prefect.resource.id": f"prefect.tag.{TAG}"}
            ),
            for_each={"prefect.resource.id"},
            posture=Posture.Proactive,
            threshold=1,
            within=timedelta(seconds=within_s),
        ),
        actions=[ChangeFlowRunState(state=StateType.CRASHED, message=CRASH_MESSAGE)],
    )


def ensure_crash_automation(within_s: float = WITHIN_S, env: Mapping[str, str] | None = None) -> UUID:
    """Create the automation on the Prefect server, or bring the one of that name up to date; returns its id.
    Idempotent: a second call changes nothing, and copies of it (two callers at once) are deleted but one.
    `env`: the server's `PREFECT_API_URL` (and `PREFECT_API_AUTH_STRING`) when this process's settings lack them."""
    from prefect.client.orchestration import get_client

    wanted = crash_automation(within_s)
    with _api_settings(env), get_client(sync_client=True) as client:
        found = client.read_automations_by_name(AUTOMATION)
        if not found:
            return client.create_automation(wanted)
        keep, *extra = sorted(found, key=lambda a: str(a.id))
        if _essence(keep) != _essence(wanted):
            client.update_automation(keep.id, wanted)
        for copy in extra:
            client.delete_automation(copy.id)
        return keep.id


def crashed_by_automation(state) -> bool:
    """Whether a flow run's state is this automation's CRASHED (a Prefect `State`, or None)."""
    return bool(state is not None and state.type.value == "CRASHED" and state.message == CRASH_MESSAGE)


def _essence(automation) -> dict:
    """What makes two automations the same one: name, description, enabled, trigger (but its generated id)."""
    out = automation.model_dump(mode="json", include={"name", "description", "enabled", "trigger", "actions"})
    out["trigger"].pop("id", None)
    for field in ("after", "expect", "for_each"):  # sets: any order on the wire
        out["trigger"][field] = sorted(out["trigger"].get(field) or [])
    return out


def _api_settings(env: Mapping[str, str] | None):
    """Prefect's API settings taken from `env` for the duration (nothing changed when `env` is None)."""
    import contextlib

    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

    if not env:
        return contextlib.nullcontext()
    updates = {PREFECT_API_URL: env.get("PREFECT_API_URL")}
    if env.get("PREFECT_API_AUTH_STRING"):
        updates[PREFECT_API_AUTH_STRING] = env["PREFECT_API_AUTH_STRING"]
    return temporary_settings(updates=updates)
