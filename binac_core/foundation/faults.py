"""Deterministic fault points for crash and concurrency tests: the code itself dies or waits where a test says.

`BINAC_FAULT` lists points, comma-separated, each `NAME@STEP:ACTION`, for example
`BINAC_FAULT=shard:train@2:kill` (SIGKILL this process right after iteration 2's training rows are stored).
Actions:
- `kill`: the process sends itself SIGKILL (no cleanup, no atexit: a power cut, as far as the store can tell).
- `pause`: the process creates `$BINAC_FAULT_DIR/NAME@STEP.paused` and waits until a test creates
  `NAME@STEP.resume` beside it, so a test can act at an exact point of a run (query the store, start a rival).
Points in the code: `shard:<protocol>` after a trajectory shard is in place (`storage.write_shard`, STEP is the
iteration); `adapter-written:<name>` after an adapter is written to its temporary folder, before it is moved
into place (`Policy.save`, STEP is always 0: every save of that adapter; a pause resumed once stays resumed);
`pretrain` before a tiny base is pretrained (`binac_core.model.base_model`, STEP is always 0). Unset (the default), `fault_point` costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

ENV, DIR_ENV = "BINAC_FAULT", "BINAC_FAULT_DIR"
ACTIONS = ("kill", "pause")


def fault_point(name: str, step: int) -> None:
    """Die or wait here if `BINAC_FAULT` names `name@step`; otherwise return at once."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    for item in spec.split(","):
        point, _, action = item.strip().rpartition(":")
        if point != f"{name}@{step}":
            continue
        if action not in ACTIONS:
            raise ValueError(f"{ENV}: unknown action {action!r} in {item!r} (one of {', '.join(ACTIONS)})")
        if action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        _pause(point)


def _pause(point: str) -> None:
    folder = Path(os.environ.get(DIR_ENV) or ".")
    (folder / f"{point}.paused").touch()
    resume = folder / f"{point}.resume"
    while not resume.exists():  # the test decides when: no deadline here, pytest's timeout guards a hang
        time.sleep(0.02)
