"""MATH grader: every MATH-500 gold scores 1 (both through `grade` and through math-verify itself), perturbed golds
score 0, extraction edge cases, and failures (timeout, dead worker) score 0 and are counted, never raised."""

from __future__ import annotations

import logging
import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from binac_core.benchmarks.data import load_benchmark
from binac_core.benchmarks.grade import grade, grade_batch
from binac_core.errors import BinacError
from binac_core.grading import math as math_grader
from binac_core.grading.counters import grader_counts, reset_grader_counts
from binac_core.grading.extract import last_boxed
from binac_core.grading.math import GraderTimeout, normalise, verify_equal


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return [dict(r) for r in load_benchmark("math500", "eval")]


def boxed(answer: str) -> str:
    return f"Adding the pieces gives the result.\n\nThe final answer is $\\boxed{{{answer}}}$."


def test_every_math500_gold_answer_scores_one(rows):
    scores = grade_batch("math500", rows, [boxed(r["answer"]) for r in rows])
    assert [r["id"] for r, s in zip(rows, scores, strict=True) if s != 1.0] == []


def test_math_verify_itself_accepts_every_math500_gold_against_itself(rows):
    # `grade` settles exact matches before math-verify; this checks that the worker path parses every gold.
    with ThreadPoolExecutor(max_workers=math_grader.POOL_SIZE) as pool:
        same = list(pool.map(lambda r: verify_equal(r["answer"], r["answer"]), rows))
    assert [r["id"] for r, ok in zip(rows, same, strict=True) if not ok] == []


def _another_answer(rows: list[dict], i: int) -> str:
    """The next problem's answer that differs from row i's, also once a leading `x=` is dropped (math-verify
    rightly equates `x=5` and `5`)."""
    mine = normalise(rows[i]["answer"])
    for k in range(1, len(rows)):
        other = rows[(i + k) % len(rows)]["answer"]
        if normalise(other) != mine and normalise(re.sub(r"^\s*[a-z]\s*=", "", other)) != mine:
            return other
    raise AssertionError("no different answer")


def test_another_problems_answer_scores_zero(rows):
    sample = range(0, len(rows), 4)
    scores = grade_batch("math500", [rows[i] for i in sample], [boxed(_another_answer(rows, i)) for i in sample])
    assert [rows[i]["id"] for i, s in zip(sample, scores, strict=True) if s != 0.0] == []


def _change_first_digit(answer: str) -> str | None:
    digit = re.search(r"\d", answer)
    if digit is None:
        return None
    return answer[: digit.start()] + str((int(digit.group()) + 1) % 10) + answer[digit.end() :]


def test_gold_with_a_changed_digit_scores_zero(rows):
    changed = [(r, _change_first_digit(r["answer"])) for r in rows[1::4]]
    changed = [(r, c) for r, c in changed if c is not None]
    assert len(changed) > 100
    scores = grade_batch("math500", [r for r, _ in changed], [boxed(c) for _, c in changed])
    assert [r["id"] for (r, _), s in zip(changed, scores, strict=True) if s != 0.0] == []


@pytest.mark.parametrize(
    ("gold", "pred"),
    [
        ("\\frac{1}{2}", "0.5"),
        ("\\dfrac{\\sqrt{3}}{2}", "\\frac{\\sqrt 3}{2}"),
        ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\pi/2)"),
        ("10\\%", "10"),
        ("x^2+2x+1", "(x+1)^2"),
        ("\\{1,2\\}", "\\{2,1\\}"),
        ("2\\sqrt{2}", "\\sqrt{8}"),
    ],
)
def test_equivalent_forms_score_one(gold, pred):
    assert grade("math", {"id": "t", "answer": gold}, boxed(pred)) == 1.0


@pytest.mark.parametrize(
    ("gold", "pred"),
    [
        ("52_8", "52_9"),
        (".0000672", ".0000673"),
        ("3.14", "3.14159"),
        ("\\frac{1}{2}", "\\frac{1}{3}"),
        ("(3,4)", "(4,3)"),
        ("x^2+1", "x^2-1"),
    ],
)
def test_different_values_score_zero(gold, pred):
    assert grade("math", {"id": "t", "answer": gold}, boxed(pred)) == 0.0


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("no box at all, the answer is 5", 0.0),
        ("$\\boxed{}$", 0.0),
        ("$\\boxed{5}$ hmm, no: $\\boxed{7}$", 0.0),
        ("$\\boxed{7}$ hmm, no: $\\boxed{5}$", 1.0),
        ("$\\boxed{5}$ then a cut-off $\\boxed{5", 0.0),
        ("so \\boxed 5.", 1.0),
        ("\\fbox{5}", 1.0),
    ],
)
def test_only_the_last_complete_box_counts(response, expected):
    assert grade("math", {"id": "t", "answer": "5"}, response) == expected


def test_last_boxed_matches_nested_braces():
    assert last_boxed("a \\boxed{\\frac{1}{2}} b \\boxed{\\{1,\\{2\\}\\}}") == "\\{1,\\{2\\}\\}"


def test_worker_timeout_scores_zero_is_counted_and_logged_then_recovers(monkeypatch, caplog):
    reset_grader_counts()
    row = {"id": "timeout-row", "answer": "\\frac{3}{7}"}
    monkeypatch.setattr(math_grader, "VERIFY_TIMEOUT_S", 1e-6)
    with caplog.at_level(logging.WARNING, logger="binac.grading"):
        assert grade("math", row, boxed("\\frac{6}{14}")) == 0.0
    assert grader_counts()["timeouts"] == 1
    assert "timeout-row" in caplog.text and "GraderTimeout" in caplog.text
    monkeypatch.setattr(math_grader, "VERIFY_TIMEOUT_S", 30.0)
    assert grade("math", row, boxed("\\frac{6}{14}")) == 1.0  # a fresh worker replaced the killed one


def test_verify_timeout_raises_grader_timeout_directly():
    with pytest.raises(GraderTimeout):
        verify_equal("\\frac{5}{11}", "\\frac{10}{22}", timeout_s=1e-6)


def test_worker_that_cannot_start_scores_zero_and_is_counted(monkeypatch, caplog):
    math_grader._pool().close()  # no idle worker left: the next request starts one
    monkeypatch.setattr(math_grader, "WORKER_MEMORY_BYTES", 16 << 20)  # too small to import sympy
    reset_grader_counts()
    with caplog.at_level(logging.WARNING, logger="binac.grading"):
        assert grade("math", {"id": "dead-worker", "answer": "\\frac{2}{9}"}, boxed("\\frac{4}{18}")) == 0.0
    assert grader_counts()["errors"] == 1 and "dead-worker" in caplog.text
    monkeypatch.undo()
    assert grade("math", {"id": "dead-worker", "answer": "\\frac{2}{9}"}, boxed("\\frac{4}{18}")) == 1.0


def test_unknown_benchmark_and_missing_answer_are_configuration_errors():
    with pytest.raises(BinacError, match="unknown benchmark 'maths'"):
        grade("maths", {"answer": "1"}, "\\boxed{1}")
    with pytest.raises(BinacError, match="no field 'answer'"):
        grade("math500", {"id": "x"}, "\\boxed{1}")
