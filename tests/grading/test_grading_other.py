"""GSM8K and GPQA graders: golds score 1, perturbed golds score 0, and the extraction edge cases.

GPQA rows come from $BINAC_DATA_DIR at run time; assertions compare ids and letters only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from binac_core.benchmarks.data import load_benchmark
from binac_core.benchmarks.grade import grade
from binac_core.grading.gpqa import answer_letter
from binac_core.grading.gsm8k import final_number

DATA = Path(os.environ["BINAC_DATA_DIR"])


# --------------------------------------------------------------------------- GSM8K


@pytest.fixture(scope="module")
def gsm8k() -> list[tuple[dict, str]]:
    """(row, the original worked solution ending in `#### N`) for every train and test problem."""
    pairs = []
    for split, file in (("train", "train"), ("eval", "test")):
        with (DATA / "gsm8k" / f"{file}.jsonl").open() as fh:
            solutions = [json.loads(line)["answer"] for line in fh]
        pairs += list(zip(load_benchmark("gsm8k", split), solutions, strict=True))
    return pairs


def test_every_gsm8k_reference_solution_scores_one(gsm8k):
    assert [row["id"] for row, solution in gsm8k if grade("gsm8k", row, solution) != 1.0] == []


@pytest.mark.parametrize("form", ["The answer is {}.", "So the total is $\\boxed{{{}}}$.", "Step 1... #### {}"])
def test_every_gsm8k_gold_number_scores_one_in_each_answer_form(gsm8k, form):
    rows = [row for row, _ in gsm8k[::3]]
    assert [r["id"] for r in rows if grade("gsm8k", r, "Working it out. " + form.format(r["answer"])) != 1.0] == []


def test_another_problems_answer_scores_zero(gsm8k):
    rows = [row for row, _ in gsm8k]
    wrong = []
    for i, row in enumerate(rows[::3]):
        other = next(r["answer"] for r in rows[3 * i + 1 :] + rows if r["answer"] != row["answer"])
        if grade("gsm8k", row, f"The answer is {other}.") != 0.0:
            wrong.append(row["id"])
    assert wrong == []


def test_gold_plus_one_scores_zero(gsm8k):
    rows = [row for row, _ in gsm8k[::3]]
    assert [r["id"] for r in rows if grade("gsm8k", r, f"#### {int(r['answer']) + 1}") != 0.0] == []


@pytest.mark.parametrize(
    ("response", "number"),
    [
        ("She pays $1,000 in total. #### 1,000", "1,000"),
        ("The answer is: $18.", "18"),
        ("The answer is 18.00", "18.00"),
        ("It drops by 10-5 = 5 degrees, to -5. The answer is -5", "-5"),
        ("#### 5\nWait, I made an error. The answer is 6.", "6"),
        ("The answer is 6. Checking: \\boxed{\\$7}", "7"),
        ("No marker: 3 apples and 4 pears make 7", "7"),
        ("no number at all", None),
    ],
)
def test_gsm8k_final_number_extraction(response, number):
    assert final_number(response) == number


@pytest.mark.parametrize(
    ("gold", "response", "score"),
    [
        ("1000", "#### 1,000", 1.0),
        ("18", "The answer is 18.00", 1.0),
        ("18", "The answer is $18", 1.0),
        ("-5", "The answer is -5", 1.0),
        ("5", "The answer is -5", 0.0),
        ("18", "The answer is 18.5", 0.0),
        ("18", "I cannot tell.", 0.0),
        ("7", "#### 7\n#### 8", 0.0),
    ],
)
def test_gsm8k_numeric_comparison(gold, response, score):
    assert grade("gsm8k", {"id": "t", "answer": gold}, response) == score


# --------------------------------------------------------------------------- GPQA


@pytest.fixture(scope="module")
def gpqa() -> list[dict]:
    return [dict(r) for r in load_benchmark("gpqa_diamond", "eval")]


def test_every_gpqa_correct_letter_scores_one(gpqa):
    response = "Considering each option in turn, the evidence points one way.\nAnswer: {}"
    assert [r["id"] for r in gpqa if grade("gpqa_diamond", r, response.format(r["answer"])) != 1.0] == []


def test_every_wrong_gpqa_letter_scores_zero(gpqa):
    wrong = [
        (r["id"], letter)
        for r in gpqa
        for letter in "ABCD"
        if letter != r["answer"] and grade("gpqa_diamond", r, f"Answer: {letter}") != 0.0
    ]
    assert wrong == []


@pytest.mark.parametrize(
    ("response", "letter"),
    [
        ("Answer: b", "B"),
        ("answer:C", "C"),
        ("Answer: A\nOn reflection that is wrong.\nAnswer: D", "D"),
        ("Answer: $B$", "B"),
        ("**Answer:** C", "C"),
        ("Final Answer: D", "D"),
        ("The answer must be E. Answer: E", None),
        ("I choose option B.", None),
    ],
)
def test_gpqa_answer_extraction(response, letter):
    assert answer_letter(response) == letter


def test_gpqa_without_an_answer_line_scores_zero():
    assert grade("gpqa_diamond", {"id": "t", "answer": "B"}, "It is clearly option B.") == 0.0


# --------------------------------------------------------------------------- synthetic dispatch


def test_synthetic_is_graded_by_the_synthetic_module():
    from binac_core import benchmarks
    from binac_core.benchmarks import synthetic

    assert benchmarks.get("synthetic").grade is synthetic.grade
    assert grade("synthetic", {"id": "s", "answer": "7"}, "A: 7") == 1.0
    assert grade("synthetic", {"id": "s", "answer": "7"}, "A: 3") == 0.0
