"""Grading by benchmark: `grade(benchmark, row, response) -> 1.0 | 0.0`, the one function both RL rewards and
evaluation use. It runs the benchmark's `grade` (its `Benchmark`), which calls the graders of `binac_core.grading`.

A grader failure (an exception, a math-verify timeout, a sandbox that cannot start) scores 0.0, is counted in
`grader_counts()` and logged at WARNING; it never raises, bar one setup fault: a sandbox refusing to run without
the isolation the run requires (`IsolationRequired`, `grading.sandbox`) stops the run. An unknown benchmark or a row lacking a field its
grader needs (the benchmark's `required_fields`) is a configuration error and raises `BinacError`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from binac_core.benchmarks import get
from binac_core.errors import BinacError
from binac_core.grading.counters import count_graded, record_failure
from binac_core.grading.math import GraderTimeout
from binac_core.grading.sandbox import IsolationRequired


def grade(benchmark: str, row: dict, response: str) -> float:
    """1.0 when `response` answers `row` correctly, else 0.0; failures are counted and logged, never raised."""
    return grade_with_reason(benchmark, row, response)[0]


def grade_with_reason(benchmark: str, row: dict, response: str) -> tuple[float, str | None]:
    """`grade`, and for `mbpp` the sandbox's failure reason of a failing answer (the execution error the critic
    is shown), from the same single sandbox run; the reason is None for a passing answer, for a grader failure
    and for every other benchmark."""
    bench = get(benchmark)
    for field in bench.required_fields:
        if field not in row:
            raise BinacError(f"{benchmark} row {row.get('id')!r} has no field {field!r}: cannot grade it")
    count_graded()
    try:
        correct, reason = bench.grade(row, response)  # a non-str response fails in the grader: counted
        return (1.0, None) if correct else (0.0, reason)
    except IsolationRequired:  # the run's setup, not this answer: scoring it 0 would train on a broken grader
        raise
    except GraderTimeout as exc:
        record_failure("timeouts", benchmark, row.get("id"), exc)
    except Exception as exc:  # a grader bug or a broken sandbox must not stop a run: count it and go on
        record_failure("errors", benchmark, row.get("id"), exc)
    return 0.0, None


def grade_batch(
    benchmark: str, rows: Sequence[dict], responses: Sequence[str], workers: int | None = None
) -> list[float]:
    """`grade` over pairs, in threads (math-verify workers and sandboxes run in parallel); order kept."""
    return [score for score, _ in grade_batch_with_reasons(benchmark, rows, responses, workers)]


def grade_batch_with_reasons(
    benchmark: str, rows: Sequence[dict], responses: Sequence[str], workers: int | None = None
) -> list[tuple[float, str | None]]:
    """`grade_with_reason` over pairs, in threads; order kept."""
    if len(rows) != len(responses):
        raise BinacError(f"grade_batch: {len(rows)} rows but {len(responses)} responses")
    workers = workers or max(2, os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda pair: grade_with_reason(benchmark, *pair), zip(rows, responses, strict=True)))
