"""MBPP grader: every reference program passes its own asserts in the sandbox (bar the known failures below),
perturbed programs and tests fail, and the code block is extracted as documented."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from binac_core.benchmarks.data import load_benchmark
from binac_core.benchmarks.grade import grade, grade_batch, grade_batch_with_reasons, grade_with_reason
from binac_core.grading.code import check_response, extract_program
from binac_core.grading.sandbox import run_python

# Reference programs that do not pass their own tests in the sandbox, with the reason (checked by hand) and a
# piece of the reason the grader gives. At least 99.5 % of the 874 must pass.
KNOWN_FAILING_REFERENCES = {
    "126": (
        "the program defines its own `sum(a, b)` and the test calls `sum(10,15)`: a test's pure builtins "
        "are always the builtins (else a program could redefine `sorted` to choose an expected value), so "
        "the grader evaluates the builtin sum(10, 15)",
        "TypeError: 'int' object is not iterable",
    ),
}
# Slow enough that a loaded machine may hit the 10 s limit: allowed to fail by timing out only.
SLOW_REFERENCES = {
    "123": "amicable_numbers_sum(9999) sums divisors in O(n^2) pure Python, several seconds of CPU",
}


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return [dict(r) for split in ("train", "eval") for r in load_benchmark("mbpp", split)]


def fenced(code: str) -> str:
    return f"Here is my solution.\n\n```python\n{code}\n```\n\nIt handles the edge cases."


def test_every_reference_program_passes_its_own_tests(rows):
    assert len(rows) == 874
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda r: check_response(r, fenced(r["answer"])), rows))
    failed = {r["id"]: res.reason for r, res in zip(rows, results, strict=True) if not res.passed}
    unexpected = {
        i: reason
        for i, reason in failed.items()
        if i not in KNOWN_FAILING_REFERENCES and not (i in SLOW_REFERENCES and reason.startswith("timed out"))
    }
    assert unexpected == {}
    for i, (_, expected) in KNOWN_FAILING_REFERENCES.items():
        assert expected in failed[i]
    assert 1 - len(failed) / len(rows) >= 0.995


def test_known_failures_are_real_task_ids(rows):
    assert set(KNOWN_FAILING_REFERENCES) | set(SLOW_REFERENCES) <= {r["id"] for r in rows}


def _break_one_assert(tests: list[str], k: int) -> list[str]:
    broken = list(tests)
    broken[k] = "assert not (" + tests[k].removeprefix("assert").strip() + ")"
    return broken


def test_reference_with_one_assert_broken_scores_zero(rows):
    sample = rows[::25]
    broken = [dict(r, tests=_break_one_assert(r["tests"], i % 3)) for i, r in enumerate(sample)]
    scores = grade_batch("mbpp", broken, [fenced(r["answer"]) for r in sample], workers=4)
    assert [r["id"] for r, s in zip(sample, scores, strict=True) if s != 0.0] == []


def test_another_tasks_reference_scores_zero(rows):
    sample = rows[::25]
    others = [rows[(rows.index(r) + 1) % len(rows)]["answer"] for r in sample]
    scores = grade_batch("mbpp", sample, [fenced(code) for code in others], workers=4)
    assert [r["id"] for r, s in zip(sample, scores, strict=True) if s != 0.0] == []


def test_broken_assert_is_named_in_the_reason(rows):
    row = next(r for r in rows if r["id"] == "11")
    result = check_response(dict(row, tests=_break_one_assert(row["tests"], 1)), fenced(row["answer"]))
    assert not result.passed
    assert result.reason.startswith("test 2 failed: assert not (") and "AssertionError" in result.reason


def test_gold_scores_one_through_grade(rows):
    row = next(r for r in rows if r["id"] == "601")
    assert grade("mbpp", row, fenced(row["answer"])) == 1.0


def test_reward_and_execution_error_come_from_one_sandbox_run(rows, monkeypatch):
    import binac_core.grading.code as code

    calls = []
    real = code.run_python
    monkeypatch.setattr(code, "run_python", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    row = next(r for r in rows if r["id"] == "11")
    broken = dict(row, tests=_break_one_assert(row["tests"], 1))
    got = grade_batch_with_reasons("mbpp", [row, broken], [fenced(row["answer"])] * 2)
    assert len(calls) == 2
    assert got[0] == (1.0, None)
    assert got[1][0] == 0.0 and got[1][1].startswith("test 2 failed: assert not (")
    assert grade_with_reason("gsm8k", {"id": "g", "answer": "4"}, "#### 5") == (0.0, None)  # no reason outside code
    from binac_core.model.stage_io import Attempt
    from binac_core.rl.episodes import score_with_errors

    records = [Attempt(p, 0, "", [], fenced(row["answer"]), [], []) for p in ("ok", "broken")]
    scores = score_with_errors("mbpp", {"ok": row, "broken": broken}, records)
    rewards, shown = scores.rewards, scores.execution_results
    assert rewards == [1.0, 0.0] and shown[0] == "All tests passed." and shown[1] == got[1][1]


def test_setup_runs_after_the_program():
    program = "class Box:\n    def __init__(self, v):\n        self.v = v\n"
    result = run_python(program, ["assert b.v == 3"], setup="b = Box(3)")
    assert result.passed, result.reason


@pytest.mark.parametrize(
    ("response", "program"),
    [
        ("```python\nx = 1\n```\ntext\n```python\nx = 2\n```", "x = 2\n"),
        ("```python\nx = 1\n```\nthen a shell line\n```bash\nls\n```", "x = 1\n"),
        ("only a plain fence\n```\nx = 3\n```", "x = 3\n"),
        ("```py\nx = 4\n```", "x = 4\n"),
        ("x = 5\nprint(x)", "x = 5\nprint(x)"),
        ("cut off:\n```python\ndef f():\n    return 6", "def f():\n    return 6"),
    ],
)
def test_extract_program_takes_the_last_python_block(response, program):
    assert extract_program(response) == program
