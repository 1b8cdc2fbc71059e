"""Synthetic task family: chains of single-digit modular arithmetic with a verifiable answer.

A problem is a start digit and `difficulty` additions or subtractions of a digit 1-9, everything mod 10, e.g.
question `7+5-3+4`. The solution trace writes one step per operation, each restating its left operand, then
the answer: `7+5=2 2-3=9 9+4=3 A: 3`. A step can go wrong (a wrong result digit) and later steps then build on
the wrong value; since adding or subtracting is a bijection mod 10, an error always reaches the answer, and
"step k is wrong" is a short hint that fixes an attempt. (Multiplication was left out on purpose: `*5` or
`*2` can erase an earlier error, which would blur what a critique is worth.)

This module holds the problems (seeded generation, disjoint train/eval splits), the chat prompts of the three
roles (actor, critic, refinement), the grader, the rule-based oracle critic and the analysis of a feedback
against the first wrong step: the `synthetic` benchmark. The noisy teacher whose solutions, critiques and
refinements make the pretraining corpus lives with pretraining (`binac_core.pretrain_teacher`). It does not
tokenize or touch models.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass

from binac_core.benchmarks.interface import Benchmark, FeedbackAnalysis
from binac_core.errors import BinacError

MOD = 10
OPS = "+-"
EVAL_PERCENT = 20
"""Share (in %) of the question space reserved for evaluation; the split is a hash of the question text."""
LOOKS_CORRECT = "Looks correct."
CHECK_YOUR_WORK = "Check your work."
_STEP_RE = re.compile(r"^(\d)([+-])(\d)=(\d)$")
_OP_RE = re.compile(r"([+-])(\d)")
_NAMED_RE = re.compile(r"Step (\d+) is wrong")
_ANSWER_RE = re.compile(r"A:\s*([^\s.]*)")


@dataclass(frozen=True)
class Step:
    """One written step `a op b = c`; `c` may be wrong, which is what the critic looks for."""

    a: int
    op: str
    b: int
    c: int

    @property
    def text(self) -> str:
        return f"{self.a}{self.op}{self.b}={self.c}"

    @property
    def locally_right(self) -> bool:
        """True when `c` is the right result for the written operands (ignores whether `a` was right)."""
        return self.c == apply_op(self.a, self.op, self.b)


def apply_op(a: int, op: str, b: int) -> int:
    return (a + b) % MOD if op == "+" else (a - b) % MOD


# --------------------------------------------------------------------------- problems


def parse_question(question: str) -> tuple[int, list[tuple[str, int]]]:
    """`"7+5-3"` -> `(7, [("+", 5), ("-", 3)])`."""
    return int(question[0]), [(op, int(b)) for op, b in _OP_RE.findall(question[1:])]


def solve_steps(question: str) -> list[Step]:
    """The correct steps of a question."""
    value, ops = parse_question(question)
    steps = []
    for op, b in ops:
        step = Step(value, op, b, apply_op(value, op, b))
        steps.append(step)
        value = step.c
    return steps


def render_trace(steps: list[Step]) -> str:
    """Steps -> `"7+5=2 2*3=6 A: 6"`; the answer is the last step's result."""
    return " ".join(s.text for s in steps) + f" A: {steps[-1].c}"


def split_of(question: str) -> str:
    """`eval` or `train`, by a seed-independent hash: no seed's train/pretraining data meets any seed's eval set."""
    bucket = int(hashlib.sha256(question.encode()).hexdigest()[:8], 16) % 100
    return "eval" if bucket < EVAL_PERCENT else "train"


def random_question(rng: random.Random, difficulty: int) -> str:
    """A uniformly drawn question: a start digit 0-9, then `difficulty` times `+b` or `-b` with b in 1-9."""
    return str(rng.randrange(MOD)) + "".join(f"{rng.choice(OPS)}{rng.randrange(1, MOD)}" for _ in range(difficulty))


def make_row(question: str) -> dict:
    steps = solve_steps(question)
    return {
        "id": "syn-" + hashlib.sha1(question.encode()).hexdigest()[:12],
        "question": question,
        "answer": str(steps[-1].c),
        "solution": render_trace(steps),
        "difficulty": len(steps),
    }


def sample_questions(seed: int, difficulty: int, split: str, n: int) -> list[str]:
    """`n` distinct questions of one split, deterministic in `seed`; raises when the question space is too small."""
    rng = random.Random(f"{seed}:{split}:{difficulty}")
    out: dict[str, None] = {}
    tries = 0
    while len(out) < n:
        tries += 1
        if tries > 50 * n + 1000:
            raise BinacError(
                f"difficulty {difficulty} has too few distinct {split} problems for {n} rows (found {len(out)})"
            )
        q = random_question(rng, difficulty)
        if q not in out and split_of(q) == split:
            out[q] = None
    return list(out)


def make_split(task_cfg, split: str) -> list[dict]:
    """Rows of the `train` (`n_train`) or `eval` (`n_test`) split, from `task_cfg.data_seed` and `difficulty`."""
    if split not in ("train", "eval"):
        raise BinacError(f"unknown split {split!r} (known: train, eval)")
    n = task_cfg.n_train if split == "train" else task_cfg.n_test
    questions = sample_questions(task_cfg.data_seed, task_cfg.difficulty, split, n)
    rows = [make_row(q) for q in questions]
    if task_cfg.prompt_style == "instruct":  # the row says how it is posed; the prompts below read it
        rows = [{**r, "style": "instruct"} for r in rows]
    return rows


# --------------------------------------------------------------------------- prompts


INSTRUCT_TASK = (
    "Add and subtract digits, keeping only the last digit of each result. Write one step per line, then the "
    "answer.\nExample: 7+5-3\n7+5=2\n2-3=9\nA: 9\nNow do: {q}"
)
INSTRUCT_CRITIC = (
    "Check a student's steps. Each step adds or subtracts a digit and keeps only the last digit of the result "
    "(7+5=2, 2-3=9).\nProblem: {q}\nSteps:\n{attempt}\nReply 'Step k is wrong.' for the first wrong step k, or "
    "'Looks correct.' if every step is right."
)
"""The `instruct` prompt style (task.prompt_style): the rules and formats of the compact prompts, in words, so an
instruction-tuned model that never saw the task can answer in the format the grader, the oracle and the critic
measures read (`A: <digit>`, `Step k is wrong.`, `Looks correct.`)."""


def actor_messages(row: dict) -> list[dict]:
    if row.get("style") == "instruct":
        return [{"role": "user", "content": INSTRUCT_TASK.format(q=row["question"])}]
    return [{"role": "user", "content": f"Solve: {row['question']}"}]


def critic_messages(row: dict, attempt: str, execution_result: str | None = None) -> list[dict]:
    """The problem and the attempt only: never the reference answer or the correct trace (nothing is executed)."""
    if row.get("style") == "instruct":
        return [{"role": "user", "content": INSTRUCT_CRITIC.format(q=row["question"], attempt=attempt.strip())}]
    return [{"role": "user", "content": f"Check: {row['question']}\nAttempt: {attempt.strip()}"}]


def refine_messages(row: dict, attempt: str, feedback: str) -> list[dict]:
    """The first turn as a conversation, then the feedback and the question again as the next user turn.

    Repeating the question at the end gives the second answer the same prompt suffix as the first one, so a
    tiny model reuses what it learned for solving instead of having to find the question further back.
    """
    again = (INSTRUCT_TASK.format(q=row["question"]) if row.get("style") == "instruct"
             else f"Solve: {row['question']}")
    return actor_messages(row) + [
        {"role": "assistant", "content": attempt.strip()},
        {"role": "user", "content": f"Feedback: {feedback.strip()}\n{again}"},
    ]


# --------------------------------------------------------------------------- grading and parsing


def final_answer(response: str) -> str | None:
    """The token after the last `A:`, without a trailing period; None when there is none."""
    found = _ANSWER_RE.findall(response)
    return found[-1] if found and found[-1] else None


def grade_response(row: dict, response: str) -> float:
    """1.0 iff the final answer after `A:` equals the reference answer, else 0.0 (junk and no answer included)."""
    return 1.0 if final_answer(response) == row["answer"] else 0.0


def grade(row: dict, response: str) -> tuple[bool, None]:
    """`grade_response` as the benchmark's grader: (correct, no failure reason)."""
    return grade_response(row, response) > 0, None


def parse_steps(attempt: str) -> list[Step | str]:
    """Each whitespace-separated piece before the first `A:`: a `Step` when well-formed, else the raw text."""
    body = attempt.split("A:")[0]
    out: list[Step | str] = []
    for piece in body.split():
        m = _STEP_RE.match(piece)
        out.append(Step(int(m[1]), m[2], int(m[3]), int(m[4])) if m else piece)
    return out


def named_step(feedback: str) -> int | None:
    """The step number a feedback names (`Step k is wrong`), or None."""
    m = _NAMED_RE.search(feedback)
    return int(m[1]) if m else None


def name_step(k: int) -> str:
    """The feedback that flags step `k` (1-based). It does not quote the step: copying a step chosen by its
    number is a skill a tiny critic would need many more pretraining steps for."""
    return f"Step {k} is wrong."


def oracle_feedback(row: dict, attempt: str) -> str:
    """Rule-based, error-aware critic: names the first step that differs from the correct one.

    Says `Looks correct.` when every step and the answer are right. When all steps are right but the
    answer line is missing or wrong there is no step to name, so it falls back to `Check your work.`.
    A missing or malformed step counts as wrong. Uses the reference (it is an oracle, not a critic prompt).
    """
    k = first_wrong_step(row["question"], attempt)
    if k is not None:
        return name_step(k)
    if len(parse_steps(attempt)) == len(solve_steps(row["question"])) and grade_response(row, attempt) == 1.0:
        return LOOKS_CORRECT
    return CHECK_YOUR_WORK


def first_wrong_step(question: str, attempt: str) -> int | None:
    """The 1-based number of the first written step that differs from the correct one (a missing or malformed
    step counts as wrong), or None when every step is right (the answer line may still be wrong or missing)."""
    pieces = parse_steps(attempt)
    for k, want in enumerate(solve_steps(question), start=1):
        if (pieces[k - 1] if k <= len(pieces) else "") != want:
            return k
    return None


BENCHMARK = Benchmark(
    name="synthetic", required_fields=("answer",), load_rows=make_split,
    actor_messages=actor_messages, critic_messages=critic_messages, refine_messages=refine_messages, grade=grade,
    oracle_feedback=oracle_feedback,
    feedback_analysis=FeedbackAnalysis(first_wrong_step=first_wrong_step, named_step=named_step),
)
