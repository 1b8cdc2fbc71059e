"""The noisy teacher that writes the tiny base model's pretraining corpus (`binac_core.pretrain`).

On the synthetic task family (`binac_core.benchmarks.synthetic`): solution traces whose steps go wrong with some
probability (later steps build on the wrong value), mediocre critiques (helpful, misleading or vague), and the
second answer a feedback-following student writes. Not a benchmark: nothing but pretraining reads it.
"""

from __future__ import annotations

import random

from binac_core.benchmarks.synthetic import (
    CHECK_YOUR_WORK,
    LOOKS_CORRECT,
    MOD,
    Step,
    apply_op,
    name_step,
    named_step,
    oracle_feedback,
    parse_question,
    parse_steps,
    render_trace,
    solve_steps,
)
from binac_core.prompts import SELF_CORRECT_FEEDBACK


def _wrong_digit(rng: random.Random, right: int) -> int:
    return rng.choice([d for d in range(MOD) if d != right])


def _continue(value: int, ops: list[tuple[str, int]], rng: random.Random, error_rate: float) -> list[Step]:
    """Steps from `value` on; each result is wrong with prob `error_rate` and later steps build on it."""
    steps = []
    for op, b in ops:
        right = apply_op(value, op, b)
        step = Step(value, op, b, _wrong_digit(rng, right) if rng.random() < error_rate else right)
        steps.append(step)
        value = step.c
    return steps


def teacher_solve(question: str, rng: random.Random, error_rate: float) -> str:
    """A noisy solution trace: each step wrong with prob `error_rate`, errors propagate consistently."""
    start, ops = parse_question(question)
    return render_trace(_continue(start, ops, rng, error_rate))


def teacher_critique(
    question: str, attempt: str, rng: random.Random, helpful_rate: float, misleading_rate: float
) -> str:
    """A mediocre critique of a teacher attempt: helpful, misleading or vague, in these proportions.

    Helpful is the oracle's feedback (the first wrong step, or `Looks correct.`); misleading names a step
    whose result is right for its written operands (falls back to vague when there is none); vague is
    `SELF_CORRECT_FEEDBACK` or `Check your work.`. Expects a well-formed attempt (teacher traces are).
    """
    u = rng.random()
    helpful = oracle_feedback({"question": question, "answer": str(solve_steps(question)[-1].c)}, attempt)
    if u < helpful_rate:
        return helpful
    if u < helpful_rate + misleading_rate:
        pieces = parse_steps(attempt)
        fine = [k for k, p in enumerate(pieces, 1) if isinstance(p, Step) and p.locally_right]
        fine = [k for k in fine if k != named_step(helpful)]
        if fine:
            return name_step(rng.choice(fine))
    return rng.choice([SELF_CORRECT_FEEDBACK, CHECK_YOUR_WORK])


def teacher_refine(question: str, attempt: str, feedback: str, rng: random.Random, error_rate: float) -> str:
    """The second answer a feedback-following student writes.

    `Looks correct.`: copy the attempt. `Step k is wrong`: keep steps before k, then change step k (its right
    value if the attempt's was wrong, otherwise any other digit: the student trusts the critic), then go on with
    teacher noise. Anything else (vague): solve again from scratch, with noise.
    """
    start, ops = parse_question(question)
    pieces = parse_steps(attempt)
    k = named_step(feedback)
    if LOOKS_CORRECT in feedback:
        return attempt.strip()
    if k is None or not 1 <= k <= min(len(ops), len(pieces)) or not all(isinstance(p, Step) for p in pieces):
        return teacher_solve(question, rng, error_rate)
    kept: list[Step] = pieces[: k - 1]  # type: ignore[assignment]
    value = kept[-1].c if kept else start
    op, b = ops[k - 1]
    right = apply_op(value, op, b)
    old = pieces[k - 1].c  # type: ignore[union-attr]
    redone = Step(value, op, b, right if old != right else _wrong_digit(rng, old))
    return render_trace(kept + [redone] + _continue(redone.c, ops[k:], rng, error_rate))
