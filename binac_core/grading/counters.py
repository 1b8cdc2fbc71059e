"""Grader-failure accounting: every error or timeout inside a grader is counted and logged, never silent.

A failure scores 0.0 (the run goes on) and logs one WARNING line naming the benchmark, the row id and the
exception; the message never quotes the problem text (GPQA questions must not reach logs).

The counts are per process and only grow (why they are process-wide: `binac_core/model/runtime.py`). `grader_counts()`
reads the totals; a reader that wants the counts of a stretch of work (one training iteration) takes a
`GraderCounts` snapshot before it and asks it `since()` afterwards.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter

log = logging.getLogger("binac.grading")
_lock = threading.Lock()
_counts: Counter[str] = Counter()
KINDS = ("graded", "errors", "timeouts")


def grader_counts() -> dict[str, int]:
    """Counts since the process started (or the last reset): `graded` (calls), `errors` (exceptions, sandbox
    failures), `timeouts`."""
    with _lock:
        return {kind: _counts[kind] for kind in KINDS}


def reset_grader_counts() -> None:
    """Zero the totals (for tests: a `GraderCounts` that spans a reset undercounts)."""
    with _lock:
        _counts.clear()


class GraderCounts:
    """A snapshot of the totals; `since()` gives the counts added after it (`grader_counts()`'s keys)."""

    def __init__(self):
        self.start = grader_counts()

    def since(self) -> dict[str, int]:
        now = grader_counts()
        return {kind: max(0, now[kind] - self.start[kind]) for kind in KINDS}


def count_graded() -> None:
    with _lock:
        _counts["graded"] += 1


def record_failure(kind: str, benchmark: str, row_id: object, exc: BaseException) -> None:
    """Count one failure (`errors` or `timeouts`) and log it at WARNING, without the problem text."""
    with _lock:
        _counts[kind] += 1
    detail = f"{type(exc).__name__}: {exc}"[:300]
    log.warning("grader %s on %s row %s scored 0: %s", kind.rstrip("s"), benchmark, row_id, detail)
