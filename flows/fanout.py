"""Fanning a study's runs out over a Prefect work pool, and waiting for them (used by flows/study.py).

Each run is submitted as a flow run of the study's `train` deployment (`run_deployment`, not waited on); every
worker attached to the deployment's pool takes runs as it has room (`prefect worker start --pool ... --limit 1`
per worker process). Prefect schedules; this module only decides what to submit and reports progress:

- a run whose MLflow run (found by its run key) is FINISHED is done: it is never submitted again;
- a run with a live flow run (scheduled, pending, running) is waited on, also one an earlier invocation
  submitted;
- a flow run that says RUNNING but whose process is gone (its run lock, or the claim it holds from its first line
  until it takes the lock, is free and was never released: `binac_core.runs.runlock`) is marked CRASHED and its
  run submitted again, so a killed worker costs only the stages its run had not finished (the stages are cached;
  trajectory shards are replaced, not appended). Those files are on this host's disk: with an object store
  (`BINAC_STORE`, workers on other hosts) they are not looked at; each run is submitted with heartbeats on and the
  tag that Prefect's automation watches (`flows/liveness.py`, which this module makes sure exists), and the server
  itself marks a flow run whose heartbeats stopped CRASHED;
- a flow run marked CRASHED by that automation is submitted again like one found dead above (not counted against
  the retries);
- a FAILED, CRASHED or CANCELLED flow run is submitted again (said in one line with its state's message), at
  most `retries` times per invocation; after that the run counts as failed and the study reports it;
- a look that the Prefect server answers with a server error (5xx: its SQLite database answers 503 "database is
  locked" on a loaded machine, seen while 80 runs were submitted beside a test run) or a dropped connection is
  said in one line and taken again at the next poll, up to `TRANSIENT_LOOKS` looks in a row; a submission cut
  off that way is safe to repeat (its idempotency key names the run and its earlier flow runs).
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field

from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterTags
from prefect.client.schemas.sorting import FlowRunSort
from prefect.deployments import run_deployment
from prefect.states import Crashed

from binac_core.errors import BinacError
from binac_core.foundation.stage_objects import enabled as store_set
from binac_core.runs.runlock import probe, probe_claim
from flows import liveness

LIVE = {"SCHEDULED", "PENDING", "RUNNING", "PAUSED", "CANCELLING"}
TRANSIENT_LOOKS = 60
"""Looks in a row the Prefect server may fail with a transient error before the study gives up (at the default
5 s poll, about five minutes plus the requests' own time)."""


@dataclass
class Tracked:
    """One run of the grid: what to submit, its run key, and what happened to it in this invocation."""

    name: str
    key: str
    parameters: dict
    method: str
    state: str = "queued"
    """queued | running | done | failed"""
    submitted: int = 0
    started: float | None = None
    notes: list[str] = field(default_factory=list)


def check_deployment(name: str, home) -> str:
    """The deployment's work pool; one line naming what is missing when the server, the deployment or its
    workers' `$BINAC_HOME` do not fit this invocation."""
    import os
    from pathlib import Path

    if not os.environ.get("PREFECT_API_URL"):
        raise BinacError(
            "a study submits its runs to a Prefect server: PREFECT_API_URL is not set (start the lab "
            "with `make serve`, then `source $BINAC_HOME/serve/env.sh`)"
        )
    with get_client(sync_client=True) as client:
        try:
            dep = client.read_deployment_by_name(name)
        except Exception as exc:  # ObjectNotFound, or no server at that URL
            raise BinacError(
                f"deployment {name!r} not found at {os.environ['PREFECT_API_URL']} "
                f"({type(exc).__name__}); `make serve` deploys prefect.yaml"
            ) from None
    env = (dep.job_variables or {}).get("env") or {}
    theirs = env.get("BINAC_HOME")
    if theirs and Path(theirs).resolve() != Path(home).resolve():
        raise BinacError(
            f"deployment {name!r} runs with BINAC_HOME={theirs}, this study uses {home}: export the "
            "same BINAC_HOME (the workers' results must be where the study reads them)"
        )
    if not dep.work_pool_name:
        raise BinacError(f"deployment {name!r} has no work pool")
    return dep.work_pool_name


def fan_out(
    deployment: str,
    pool: str,
    tracked: list[Tracked],
    study_tag: str,
    home,
    is_finished,
    retries: int = 1,
    poll_s: float = 5.0,
    say=None,
    on_done=None,
) -> list[Tracked]:
    """Submit and wait until every run is done or failed; `is_finished(key)` asks MLflow; `on_done(t)` is called
    once for each run seen finishing in this invocation (not for those done before it). Returns `tracked`."""
    say = say or functools.partial(print, flush=True)
    for t in tracked:
        if is_finished(t.key):
            t.state = "done"
    progress = Progress(say)
    failed_looks = 0
    if store_set():  # the runs' lock files are on other hosts: the server tells a dead run (flows/liveness.py)
        liveness.ensure_crash_automation()
    with get_client(sync_client=True) as client:
        while any(t.state in ("queued", "running") for t in tracked):
            try:
                by_key = _flow_runs_by_key(client, study_tag)
                for t in tracked:
                    if t.state not in ("done", "failed"):
                        _advance(
                            client,
                            t,
                            by_key.get(t.key, []),
                            deployment,
                            study_tag,
                            home,
                            is_finished,
                            retries,
                            progress,
                            say,
                        )
                        if t.state == "done" and on_done is not None:
                            on_done(t)
                progress.show(tracked, _online_workers(client, pool))
                failed_looks = 0
            except Exception as exc:
                if not transient(exc) or failed_looks >= TRANSIENT_LOOKS:
                    raise
                failed_looks += 1
                say(
                    f"[study] the Prefect server failed a request ({type(exc).__name__}: "
                    f"{str(exc).splitlines()[0][:160]}); looking again in {poll_s:g} s ({failed_looks}/"
                    f"{TRANSIENT_LOOKS})"
                )
            if any(t.state in ("queued", "running") for t in tracked):
                time.sleep(poll_s)
        progress.show(tracked, _online_workers(client, pool), force=True)
    return tracked


def transient(exc: BaseException) -> bool:
    """A Prefect API failure worth another look: a 5xx answer or a connection that failed or dropped."""
    import httpx
    from prefect.exceptions import PrefectHTTPStatusError

    if isinstance(exc, PrefectHTTPStatusError):
        return exc.response.status_code >= 500
    return isinstance(exc, httpx.TransportError)


def _advance(
    client, t: Tracked, flow_runs: list, deployment: str, study_tag: str, home, is_finished, retries: int, progress, say
) -> None:
    """One look at a run that is not done: follow its newest flow run (`flow_runs`, oldest first), or submit."""
    fr = flow_runs[-1] if flow_runs else None
    state = fr.state_type.value if fr and fr.state_type else None
    killed = bool(fr and state == "RUNNING" and not store_set() and _dead(home, t.key, str(fr.id)))
    if killed:
        client.set_flow_run_state(
            fr.id,
            Crashed(message="its process is gone (run lock released without exiting); resubmitted by the study"),
            force=True,
        )
        t.notes.append(f"flow run {fr.id} died while running; resubmitted")
        say(f"[study] {t.name}: flow run {fr.id} died while running (worker killed?); resubmitting")
        state = "CRASHED"
    elif fr and state == "CRASHED" and liveness.crashed_by_automation(getattr(fr, "state", None)):
        killed = True
        t.notes.append(f"flow run {fr.id} stopped sending heartbeats; resubmitted")
        say(f"[study] {t.name}: flow run {fr.id} stopped sending heartbeats (worker lost?); resubmitting")
    if state in LIVE:
        t.state = "running" if state == "RUNNING" else "queued"
        if state == "RUNNING" and t.started is None:
            t.started = time.time()
    elif state == "COMPLETED" and is_finished(t.key):
        t.state = "done"
        progress.finished(t, fr.total_run_time.total_seconds() if fr.total_run_time else None)
    elif fr is not None and t.submitted > retries and not killed:
        # ended badly, or completed without finishing its MLflow run: both count against the retries
        t.state = "failed"
        why = f": {fr.state.message}" if fr.state and fr.state.message else ""  # a refusal's one line, say
        t.notes.append(f"flow run {fr.id} ended {state}{why}; not resubmitted (retries spent)")
        say(f"[study] {t.name}: {state} again; giving up on it (see flow run {fr.id}){why}")
    else:
        if fr is not None and not killed:  # ended badly, or completed without finishing: said, then a retry
            why = f": {fr.state.message}" if fr.state and fr.state.message else ""
            say(f"[study] {t.name}: flow run {fr.id} ended {state}{why}; submitting it again")
        _submit(deployment, t, study_tag, n_before=len(flow_runs))


def _dead(home, key: str, flow_run_id: str) -> bool:
    """The flow run's process died holding the run's lock, or before taking it, holding its claim."""
    return probe(home, key).dead(flow_run_id) or probe_claim(home, flow_run_id).dead(flow_run_id)


def _submit(deployment: str, t: Tracked, study_tag: str, n_before: int) -> None:
    """`n_before` (the run's earlier flow runs) makes the idempotency key: two study processes submitting the
    same run at the same moment get one flow run."""
    watched = store_set()  # with workers on other hosts, the server watches the run's heartbeats
    run_deployment(
        deployment,
        parameters=t.parameters,
        timeout=0,
        flow_run_name=t.name,
        tags=[study_tag, f"binac-run:{t.key}", *([liveness.TAG] if watched else [])],
        idempotency_key=f"{t.key}-{n_before}",
        **({"job_variables": liveness.job_variables()} if watched else {}),
    )
    t.submitted += 1
    t.state, t.started = "queued", None


def _flow_runs_by_key(client, study_tag: str) -> dict[str, list]:
    """The study's flow runs grouped by run key, oldest first (one listing per look)."""
    out: dict[str, list] = {}
    for fr in _flow_runs(client, study_tag):
        for tag in fr.tags:
            if tag.startswith("binac-run:"):
                out.setdefault(tag.removeprefix("binac-run:"), []).append(fr)
    return out


def _flow_runs(client, tag: str, page: int = 200) -> list:
    """Every flow run carrying `tag`, oldest first (the API serves at most 200 per request)."""
    out: list = []
    while True:
        batch = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(tags=FlowRunFilterTags(all_=[tag])),
            sort=FlowRunSort.EXPECTED_START_TIME_ASC,
            limit=page,
            offset=len(out),
        )
        out += batch
        if len(batch) < page:
            return out


def _online_workers(client, pool: str) -> int:
    try:
        return sum(1 for w in client.read_workers_for_work_pool(pool) if str(w.status).upper().endswith("ONLINE"))
    except Exception:  # an older server without worker status: estimate with one
        return 1


class Progress:
    """Runs done / running / queued / failed and an ETA from the mean duration of finished runs of each method,
    split over the online workers. Printed when the counts change, and at least once a minute."""

    def __init__(self, say):
        self.say, self.durations, self.last, self.last_t = say, {}, None, 0.0

    def finished(self, t: Tracked, seconds: float | None) -> None:
        if seconds:
            self.durations.setdefault(t.method, []).append(seconds)

    def estimate(self, method: str) -> float | None:
        pool = self.durations.get(method) or [s for v in self.durations.values() for s in v]
        return sum(pool) / len(pool) if pool else None

    def eta(self, tracked: list[Tracked], workers: int) -> float | None:
        left = 0.0
        for t in tracked:
            if t.state not in ("queued", "running"):
                continue
            est = self.estimate(t.method)
            if est is None:
                return None
            left += max(est - (time.time() - t.started), 0.0) if t.state == "running" and t.started else est
        return left / max(workers, 1)

    def show(self, tracked: list[Tracked], workers: int, force: bool = False) -> None:
        counts = {s: sum(t.state == s for t in tracked) for s in ("done", "running", "queued", "failed")}
        line = ", ".join(f"{v} {k}" for k, v in counts.items())
        if not force and line == self.last and time.time() - self.last_t < 60:
            return
        eta = self.eta(tracked, workers)
        when = "after the first run finishes" if eta is None else _hms(eta)
        self.say(f"[study] {counts['done']}/{len(tracked)} runs done: {line}; {workers} worker(s) online; ETA {when}")
        self.last, self.last_t = line, time.time()


def _hms(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"
