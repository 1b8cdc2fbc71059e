"""Grader counts per stretch of work: the process's totals only grow, and a `GraderCounts` snapshot gives the
counts added after it, what `flows/train.py` logs as one iteration's `grader/*`."""

from binac_core.benchmarks.grade import grade
from binac_core.grading.counters import GraderCounts, grader_counts


def test_a_snapshot_counts_only_the_grading_after_it():
    grade("gsm8k", {"id": "a", "answer": "3"}, "The answer is 3")
    before_total = grader_counts()["graded"]
    step = GraderCounts()
    assert step.since() == {"graded": 0, "errors": 0, "timeouts": 0}
    grade("gsm8k", {"id": "b", "answer": "4"}, "The answer is 4")
    grade("gsm8k", {"id": "c", "answer": "5"}, "no number")
    assert step.since() == {"graded": 2, "errors": 0, "timeouts": 0}
    assert grader_counts()["graded"] == before_total + 2  # the totals are left alone
    assert GraderCounts().since()["graded"] == 0  # the next iteration starts from zero
