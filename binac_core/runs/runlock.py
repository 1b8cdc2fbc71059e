"""One process at a time per training run, and a way to tell a killed run from a live one, without timeouts.

A training run holds an exclusive `flock` on `$BINAC_HOME/locks/<run key>.lock` for as long as it computes, and
writes into that file who holds it (pid, host, Prefect flow run id) and `"state": "running"`; it writes
`"state": "exited"` before letting go, whether it finished or failed. The kernel drops the lock when the process
dies, however it dies, so

- a second process asked for the same run (the same command twice, or a study re-submitting a run that is in
  fact alive) waits for the first instead of writing beside it;
- `probe` tells a study that a run whose Prefect flow run still says RUNNING is dead: the lock is free while the
  file still says `running` for that flow run (killed before it could write `exited`).

A run's key is known only once its config is planned, so a flow run also holds a *claim* on
`$BINAC_HOME/locks/flow-runs/<flow run id>.lock` from the first line of its flow function to its last
(`flow_run_claim`, the same file protocol; the file is removed when the function returns or raises): a process that
dies between the two (planning, or waiting for another process's run lock) leaves a claim that `probe_claim` finds
free and `running`. Not covered: a process that dies in Prefect's engine after the flow run turned RUNNING and
before the flow function starts (its flow run stays RUNNING and is not detected), and file systems without working
`flock` (local disks and NFSv4 have it).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path


def lock_path(home: Path, key: str) -> Path:
    return Path(home) / "locks" / f"{key}.lock"


@contextlib.contextmanager
def run_lock(home: Path, key: str, flow_run_id: str | None, wait_message=print):
    """Hold the run's lock while the body runs; waits (saying so once) while another process holds it."""

    def busy(owner: dict) -> None:
        wait_message(f"run {key} is being computed by another process ({owner}); waiting for it")

    with _holding(lock_path(home, key), flow_run_id, busy):
        yield


def claim_path(home: Path, flow_run_id: str) -> Path:
    return Path(home) / "locks" / "flow-runs" / f"{flow_run_id}.lock"


@contextlib.contextmanager
def flow_run_claim(home: Path, flow_run_id: str | None):
    """Hold the flow run's claim while the body runs (nothing to hold outside a flow run: `flow_run_id` None).
    Only the flow run's own process takes it, so it never waits."""
    if not flow_run_id:
        yield
        return
    with _holding(claim_path(home, flow_run_id), flow_run_id, remove=True):
        yield


@contextlib.contextmanager
def _holding(path: Path, flow_run_id: str | None, busy=None, remove: bool = False):
    """The file protocol of the module docstring: an exclusive `flock` on `path` (`busy(owner)` called once when
    another process holds it, then waited for), `running` written on taking it and `exited` before letting go;
    `remove`: the file is deleted after `exited` is written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if busy is not None:
                busy(_read(path))
            fcntl.flock(fd, fcntl.LOCK_EX)
        _write(fd, {"pid": os.getpid(), "host": socket.gethostname(), "flow_run_id": flow_run_id, "state": "running"})
        try:
            yield
        finally:
            _write(fd, {**_read(path), "state": "exited"})
            if remove:
                path.unlink(missing_ok=True)
    finally:
        os.close(fd)  # closing the descriptor releases the lock


@dataclass(frozen=True)
class LockProbe:
    held: bool
    """Some live process holds the lock now."""
    owner: dict
    """What the file says: pid, host, flow_run_id, state ({} when there is no file)."""

    def dead(self, flow_run_id: str) -> bool:
        """The flow run took this lock (or claim) and died while holding it: nobody holds it, it never wrote
        `exited`."""
        return not self.held and self.owner.get("flow_run_id") == flow_run_id and self.owner.get("state") == "running"


def probe(home: Path, key: str) -> LockProbe:
    """Whether the run's lock is held, and by whom it was last taken. A shared lock is tried and dropped at once:
    a run starting in that instant waits for it instead of failing."""
    return _probe(lock_path(home, key))


def probe_claim(home: Path, flow_run_id: str) -> LockProbe:
    """The same for a flow run's claim (`flow_run_claim`); no file: the flow function has not started or returned."""
    return _probe(claim_path(home, flow_run_id))


def _probe(path: Path) -> LockProbe:
    if not path.exists():
        return LockProbe(False, {})
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            held = False
        except BlockingIOError:
            held = True
        return LockProbe(held, _read(path))
    finally:
        os.close(fd)


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return {}


def _write(fd: int, data: dict) -> None:
    blob = json.dumps(data).encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, blob, 0)
    os.fsync(fd)
