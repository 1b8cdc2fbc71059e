"""Grader-failure accounting: every error or timeout inside a grader is counted and logged, never silent.

A failure scores 0.0 (the run goes on) and logs one WARNING line naming the benchmark, the row id and the
exception; the message never quotes the problem text (GPQA questions must not reach logs). Counts are per process
(each Prefect task process or RL worker keeps its own); callers log `grader_stats()` to MLflow if they want totals.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter

log = logging.getLogger("binac.grading")
_lock = threading.Lock()
_counts: Counter[str] = Counter()
KINDS = ("graded", "errors", "timeouts")


def grader_stats() -> dict[str, int]:
    """Counts since the last reset: `graded` (calls), `errors` (exceptions, sandbox failures), `timeouts`."""
    with _lock:
        return {kind: _counts[kind] for kind in KINDS}


def reset_grader_stats() -> None:
    with _lock:
        _counts.clear()


def count_graded() -> None:
    with _lock:
        _counts["graded"] += 1


def record_failure(kind: str, benchmark: str, row_id: object, exc: BaseException) -> None:
    """Count one failure (`errors` or `timeouts`) and log it at WARNING, without the problem text."""
    with _lock:
        _counts[kind] += 1
    detail = f"{type(exc).__name__}: {exc}"[:300]
    log.warning("grader %s on %s row %s scored 0: %s", kind.rstrip("s"), benchmark, row_id, detail)
