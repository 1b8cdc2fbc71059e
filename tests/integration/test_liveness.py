"""Liveness and exclusivity across hosts over a real Prefect server (flows/liveness.py, flows/exclusive.py).

A server of this module's own (`prefect server start` on a free 127.0.0.1 port), with its services looping every
second so that the waits below are the mechanisms' own (heartbeat window, lease), not the services' polling:

- a flow run whose process is SIGKILLed is marked CRASHED by Prefect's automation (its message is the
  automation's; no study, no binac probe runs here), while a flow run that keeps sending heartbeats for longer than
  the window stays RUNNING and one that completed stays COMPLETED;
- two processes with separate homes (two hosts: no shared lock file) asking for one run key: the second waits
  while the first holds it, longer than a lease (the holder renews it), and takes it once the first is SIGKILLed
  (its lease expires).

Every wait polls a state with a deadline; the processes started here are stopped by their process group."""

import contextlib
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest
from conftest import REPO, _free_port, server_process, until

from flows import liveness
from flows.exclusive import limit_name

WITHIN_S = 40
"""The automation's window here: longer than a heartbeat (30 s), shorter than the 60 s a live run is kept."""
LEASE_S = 60
"""The shortest lease the server accepts."""


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> dict:
    """The environment of a client of this module's Prefect server."""
    home = tmp_path_factory.mktemp("prefect-liveness")
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "BINAC_STORE"))}
    env.update(
        PREFECT_HOME=str(home),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_SERVER_EVENTS_PROACTIVE_GRANULARITY="PT1S",
        PREFECT_SERVER_SERVICES_REPOSSESSOR_LOOP_SECONDS="1",
        PREFECT_SERVER_CONCURRENCY_MAXIMUM_CONCURRENCY_SLOT_WAIT_SECONDS="1",
    )
    argv = [str(Path(sys.executable).parent / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    with server_process(argv, f"http://127.0.0.1:{port}/api/health", home / "server.log", env):
        yield {**env, "PREFECT_API_URL": f"http://127.0.0.1:{port}/api"}


class Child:
    """A Python program in its own process group, its stdout lines read by a thread (`line` waits for one)."""

    def __init__(self, code: str, env: dict):
        self.proc = subprocess.Popen(
            [sys.executable, "-u", "-c", textwrap.dedent(code)],
            cwd=REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for raw in self.proc.stdout:
            self.lines.put(raw.rstrip("\n"))

    def line(self, starts: str, timeout: float) -> str | None:
        """The first line starting with `starts` within `timeout` s (None if none came, or the process ended)."""
        deadline = time.time() + timeout
        while (left := deadline - time.time()) > 0:
            try:
                got = self.lines.get(timeout=min(left, 1.0))
            except queue.Empty:
                if self.proc.poll() is not None and self.lines.empty():
                    return None
                continue
            self.seen.append(got)
            if got.startswith(starts):
                return got
        return None

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)


@contextlib.contextmanager
def children():
    started: list[Child] = []
    try:
        yield started
    finally:
        for child in started:
            child.kill()


FLOW = """
    import sys
    from prefect import flow, tags
    from prefect.runtime import flow_run

    @flow
    def held(mode: str) -> None:
        print("flow-run", flow_run.get_id(), flush=True)
        if mode == "hold":
            sys.stdin.readline()  # until killed

    with tags({tag!r}):
        held({mode!r})
"""


def start_flow(started: list, server: dict, mode: str) -> tuple[Child, str]:
    child = Child(FLOW.format(tag=liveness.TAG, mode=mode), {**server, **liveness.heartbeat_env()})
    started.append(child)
    line = child.line("flow-run ", timeout=300)
    assert line, f"the flow did not start: {child.seen}"
    return child, line.split()[1]


def heartbeats(server: dict, flow_run_id: str) -> int:
    body = {
        "filter": {
            "event": {"name": ["prefect.flow-run.heartbeat"]},
            "resource": {"id": [f"prefect.flow-run.{flow_run_id}"]},
        },
        "limit": 50,
    }
    r = httpx.post(f"{server['PREFECT_API_URL']}/events/filter", json=body, timeout=30)
    r.raise_for_status()
    return len(r.json()["events"])


def flow_run(server: dict, flow_run_id: str) -> dict:
    r = httpx.get(f"{server['PREFECT_API_URL']}/flow_runs/{flow_run_id}", timeout=30)
    r.raise_for_status()
    return r.json()


def test_the_automation_is_created_once_and_updated_in_place(server):
    first = liveness.ensure_crash_automation(within_s=WITHIN_S + 5, env=server)
    assert liveness.ensure_crash_automation(within_s=WITHIN_S, env=server) == first  # updated in place
    assert liveness.ensure_crash_automation(within_s=WITHIN_S, env=server) == first  # unchanged
    r = httpx.post(f"{server['PREFECT_API_URL']}/automations/filter", json={}, timeout=30)
    mine = [a for a in r.json() if a["name"] == liveness.AUTOMATION]
    assert [a["id"] for a in mine] == [str(first)]
    assert mine[0]["trigger"]["within"] == WITHIN_S and mine[0]["trigger"]["posture"] == "Proactive"


def test_a_killed_flow_run_is_marked_crashed_by_the_automation_a_live_or_finished_one_is_not(server):
    liveness.ensure_crash_automation(within_s=WITHIN_S, env=server)
    with children() as started:
        done, done_id = start_flow(started, server, "quick")
        assert done.proc.wait(300) == 0
        held, held_id = start_flow(started, server, "hold")
        until("a first heartbeat of the held flow run", lambda: heartbeats(server, held_id) >= 1, 120)
        # alive for longer than the window: two more heartbeats (about 60 s), still RUNNING
        until("three heartbeats", lambda: heartbeats(server, held_id) >= 3, 3 * liveness.HEARTBEAT_S + 60)
        assert flow_run(server, held_id)["state"]["type"] == "RUNNING"
        held.kill()
        killed_at = time.time()
        crashed = until(
            "the killed flow run CRASHED",
            lambda: (s := flow_run(server, held_id)["state"])["type"] == "CRASHED" and s,
            WITHIN_S + 120,
        )
    assert crashed["message"] == liveness.CRASH_MESSAGE
    assert time.time() - killed_at >= WITHIN_S - liveness.HEARTBEAT_S  # after the window, not at the kill
    assert flow_run(server, done_id)["state"]["type"] == "COMPLETED"  # its heartbeats ended with Completed


HOLDER = """
    import sys
    from pathlib import Path
    from binac_core.runs.runlock import run_lock
    from flows.exclusive import run_slot

    say = lambda message: print("waiting", message, flush=True)
    with run_slot({key!r}, None, True, wait_message=say, lease_s={lease}), run_lock(Path({home!r}), {key!r}, None):
        print("held", flush=True)
        sys.stdin.readline()
    print("released", flush=True)
"""


def active_slots(server: dict, key: str) -> int:
    r = httpx.get(f"{server['PREFECT_API_URL']}/v2/concurrency_limits/{limit_name(key)}", timeout=30)
    r.raise_for_status()
    return r.json()["active_slots"]


def test_a_run_key_is_held_by_one_process_the_second_waits_and_takes_it_when_the_first_is_killed(server, tmp_path):
    key = f"k{uuid.uuid4().hex[:12]}"

    def holder(host: str) -> Child:
        code = HOLDER.format(home=str(tmp_path / host), key=key, lease=LEASE_S)
        return Child(code, server)

    with children() as started:
        first = holder("host-a")
        started.append(first)
        assert first.line("held", timeout=300), first.seen
        held_at = time.time()
        second = holder("host-b")
        started.append(second)
        assert second.line("waiting", timeout=300), second.seen
        # the first renews its lease: the second is still waiting a lease and more after the first took it
        assert second.line("held", timeout=held_at + LEASE_S + 15 - time.time()) is None, second.seen
        assert active_slots(server, key) == 1
        first.kill()
        assert second.line("held", timeout=LEASE_S + 60), second.seen
        second.proc.stdin.write("\n")
        second.proc.stdin.flush()
        assert second.line("released", timeout=60), second.seen
        assert second.proc.wait(60) == 0
    assert active_slots(server, key) == 0
