"""Child processes in a process group of their own, and stopping that whole group.

A child started by `start_in_group` leads a new session, so its process group holds it and whatever it starts
(Prefect's temporary API server for the bench's children, vLLM's engine processes for `scripts/gpu_check.py`'s)
and nothing else; `stop_group` then reaches all of them, even after the child itself has exited. Shared by
`bench/common.py` (which stops at once) and `scripts/gpu_check.py` (which asks politely first: vLLM shuts its
engine down on SIGTERM).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time


def start_in_group(cmd: list[str], **popen) -> subprocess.Popen:
    """`subprocess.Popen(cmd, **popen)` as the leader of a session (and process group) of its own."""
    return subprocess.Popen(cmd, start_new_session=True, **popen)


def stop_group(proc: subprocess.Popen, term_grace_s: float = 0.0) -> None:
    """Stop the process group of `proc` (started by `start_in_group`) and reap `proc`.

    With `term_grace_s` > 0: SIGTERM to the group, up to `term_grace_s` for `proc` to exit and then 0.5 s for the
    group's other members to go down, then SIGKILL to whatever is left. Without: SIGKILL at once. A group that is
    already gone (every member exited) is no error."""
    steps = ((signal.SIGTERM, term_grace_s), (signal.SIGKILL, 5.0)) if term_grace_s > 0 else ((signal.SIGKILL, 5.0),)
    for sig, wait in steps:
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            break
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        if sig == signal.SIGTERM:
            time.sleep(0.5)  # the group's other members (engine processes) may still be going down
    if proc.poll() is None:
        proc.wait()
