"""Run an untrusted Python program against assert tests: `run_python(program, tests, setup, timeout_s)`.

The program, then `setup`, then the program-dependent operands of the tests' asserts (the *leaves*) run in a
fresh `/usr/bin/python3 -I` process inside bubblewrap's namespaces with resource limits; the verdict is decided
here, in the grading process, on the plain values the leaves returned, so the program can only choose those
values, never turn a failing assert into a passing one. Without a working bwrap the sandbox refuses to run unless
the run accepts the weaker rlimits-only isolation (`grading.sandbox: rlimits`). What it protects against and what
not: docs/sandbox.md.

One module per concern: `plan` (splitting the asserts, the pure evaluator), `protocol` (the harness run inside,
the result records, the verdict), `isolation` (bwrap or rlimits, limits, uid, starting and killing a run).
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from dataclasses import dataclass

from binac_core.grading.sandbox.isolation import (
    ACCEPTED,
    IsolationRequired,
    SandboxError,
    _command,
    _execute,
    _limits,
    _run_uid,
    _WorkDir,
    accept,
    require_isolation,
)
from binac_core.grading.sandbox.plan import TestFormatError, _plan
from binac_core.grading.sandbox.protocol import RESULT_CAP, _assemble, _payload, _read, _Results, _verdict

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "ExecResult",
    "IsolationRequired",
    "SandboxError",
    "TestFormatError",
    "accept",
    "require_isolation",
    "run_python",
]

DEFAULT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class ExecResult:
    passed: bool
    """Every assert held (decided outside the sandbox on the values it returned), exit status 0, no timeout."""
    reason: str
    """One line: `passed`, `timed out after N s`, `test 2 failed: assert ... (AssertionError: got 5)`, ..."""
    returncode: int | None
    timed_out: bool
    stdout: str
    """The first OUTPUT_CAP bytes of stdout."""
    stderr: str
    """The first OUTPUT_CAP bytes of stderr."""
    duration_s: float
    isolation: str
    """`bwrap` or `rlimits` (the fallback)."""


def run_python(program: str, tests: list[str], setup: str = "", timeout_s: float = DEFAULT_TIMEOUT_S) -> ExecResult:
    """Run `program`, then `setup`, then the program-dependent operands of each assert of `tests` in the sandbox;
    decide here whether each assert holds. Never raises for program faults.

    Raises TestFormatError for a test it cannot grade safely, SandboxError when the sandbox cannot run at all,
    IsolationRequired when bwrap does not work and the process has not accepted rlimits (`accept`)."""
    plans, sources = _plan(list(tests))
    script, spans = _assemble(program, setup)
    payload = _payload(script, sources)
    mode = require_isolation(ACCEPTED["mode"])
    uid = _run_uid()
    with contextlib.ExitStack() as stack:
        src, out, err, res = (stack.enter_context(tempfile.TemporaryFile()) for _ in range(4))
        src.write(payload)
        src.seek(0)
        start = time.monotonic()
        with _WorkDir(mode, uid) as cwd:
            argv = _command(mode, src.fileno(), res.fileno(), _limits(timeout_s, uid, mode))
            timed_out, rc = _execute(argv, (src.fileno(), res.fileno()), out, err, uid, cwd, timeout_s)
        duration = time.monotonic() - start
        stdout, stderr = _read(out), _read(err)
        res.seek(0)
        results = _Results.parse(res.read(RESULT_CAP + 1), len(sources))
    # bwrap's own failures (before the program starts) print "bwrap: ..." and exit 1. A program that fakes this
    # line only turns its own failure into a counted grader error.
    if mode == "bwrap" and rc != 0 and stderr.startswith("bwrap: ") and not results.ready:
        raise SandboxError(f"bubblewrap failed: {stderr.splitlines()[0]}")
    passed, reason = _verdict(plans, results, timed_out, rc, stderr, spans, timeout_s)
    return ExecResult(passed, reason, rc, timed_out, stdout, stderr, duration, mode)
