"""Exclusivity across hosts: a training run (by its run key) is computed by at most one process at a time on any
host, through a Prefect global concurrency limit of one slot per run key.

Prefect's concurrency leases (https://docs.prefect.io/v3/how-to-guides/workflows/global-concurrency-limits;
`prefect.concurrency.sync.concurrency`): taking the slot creates a lease of `lease_s` seconds on the server; a
thread of the holder renews it every 75 % of `lease_s` (up to 3 attempts each time) and releases the slot when the
body ends, however it ends in Python. A holder that dies (SIGKILL, a lost host) renews nothing: its lease expires
`lease_s` seconds after its last renewal and the server's repossessor service (every
`PREFECT_SERVER_SERVICES_REPOSSESSOR_LOOP_SECONDS`, 15 s by default) frees the slot. A second process asking for
the run meanwhile says so once and waits, retrying as the server's `Retry-After` says (at most
`PREFECT_SERVER_CONCURRENCY_MAXIMUM_CONCURRENCY_SLOT_WAIT_SECONDS` on average), for as long as it takes, as the
local run lock does. A holder whose renewals all fail is cancelled (`raise_on_lease_renewal_failure`): its slot is
no longer its own, and computing on would let a second host start beside it.

flows/train.py takes the local run lock (`binac_core.runs.runlock.run_lock`) inside the slot, so processes of one
host sharing a `$BINAC_HOME` see each other as before; without `across_hosts` there is no slot and only that lock is
taken: one machine works as it always did. The limits, one per run key, stay on the server (a few bytes each): deleting one
while another process waits for it would let that process through without a slot.

Not covered: a restart of the Prefect server while a slot is held. The server keeps leases in its memory by
default (`PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE`; `prefect-redis` provides a shared one): the holder's next
renewal fails and cancels it, and the slot stays counted with no lease to expire, so the run waits until it is freed
by hand (`prefect gcl update binac-run-<key> --active-slots 0`)."""

from __future__ import annotations

import contextlib

LEASE_S = 120.0
"""Seconds a lease lives without a renewal: a dead holder's run is free this long (plus the repossessor's loop)
after its last renewal. The server accepts 60 s to a day."""
PREFIX = "binac-run-"


def across_hosts() -> bool:
    """Whether this process coordinates with other hosts: an object store is set (`BINAC_STORE`, the hosts share
    no disk) and Prefect talks to a server (`PREFECT_API_URL`; without one each process has its own)."""
    from prefect.settings import get_current_settings

    from binac_core.foundation.stage_objects import enabled

    return enabled() and bool(get_current_settings().api.url)


def limit_name(key: str) -> str:
    """The global concurrency limit of run `key`."""
    return f"{PREFIX}{key}"


@contextlib.contextmanager
def run_slot(key: str, flow_run_id: str | None, across_hosts: bool, wait_message=print, lease_s: float = LEASE_S):
    """Hold run `key`'s one slot while the body runs, under a renewed lease (the module docstring); waits, saying so
    once, while another process holds it. Without `across_hosts` it holds nothing and never waits."""
    if not across_hosts:
        yield
        return
    from prefect.concurrency.sync import concurrency

    name = ensure_limit(key)
    holder = _holder(flow_run_id)
    options = dict(occupy=1, lease_duration=lease_s, strict=True, holder=holder, raise_on_lease_renewal_failure=True)
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(concurrency(name, max_retries=0, **options))
        except Exception as exc:  # the public API raises a private class; its cause says why
            if not _locked(exc):
                raise
            wait_message(f"run {key} is being computed by another process (Prefect limit {name} is taken); waiting")
            stack.enter_context(concurrency(name, **options))
        yield


def ensure_limit(key: str) -> str:
    """Create the run's limit (one slot, active) unless it exists; a limit of that name with other settings is set
    back to one active slot. Returns its name."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate, GlobalConcurrencyLimitUpdate
    from prefect.exceptions import ObjectAlreadyExists

    name = limit_name(key)
    with get_client(sync_client=True) as client:
        try:
            client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=1))
        except ObjectAlreadyExists:
            found = client.read_global_concurrency_limit_by_name(name)
            if found.limit != 1 or not found.active:
                client.update_global_concurrency_limit(name, GlobalConcurrencyLimitUpdate(limit=1, active=True))
    return name


def _holder(flow_run_id: str | None):
    """The lease's holder: the flow run, when there is one (the server shows it with the lease)."""
    if not flow_run_id:
        return None
    from uuid import UUID

    from prefect.client.schemas.objects import ConcurrencyLeaseHolder

    return ConcurrencyLeaseHolder(type="flow_run", id=UUID(flow_run_id))


def _locked(exc: BaseException) -> bool:
    """Whether a failed acquisition was the server's 423 (the slot is taken), not a missing limit or an error."""
    cause = exc.__cause__
    response = getattr(cause, "response", None)
    return response is not None and response.status_code == 423
