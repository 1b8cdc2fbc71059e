"""The noisy teacher that writes the tiny base model's pretraining corpus (`binac_core.model.pretrain`).

On the synthetic task family (`binac_core.benchmarks.synthetic`, either modulus): solution traces whose steps go
wrong with some probability (later steps build on the wrong value), mediocre critiques (helpful, misleading or
vague), and the second answer a feedback-following student writes. Not a benchmark: nothing but pretraining
reads it.

The rules, which decide what a critic trained against this base can gain:
- **solve**: each step's result is wrong with prob `task.step_error_rate` (a value drawn uniformly from the
  other values of the modulus), later steps build on it; on top of that, with `task.carry_error_rate` > 0
  (modulus 100), a step whose ones digit carries or borrows slips with that probability (`synthetic.carry_slip`:
  the tens digit one too low, `37+5=32`, `32-5=17`): a systematic error on one identifiable kind of step, so that
  above 0.5 the most likely value there is the wrong one;
- **critique**: helpful (the oracle's feedback: `Looks correct.` on a step-correct attempt, else its first wrong
  step) with prob `task.critic_helpful_rate`; misleading with prob `task.critic_misleading_rate`, which on an
  attempt with a wrong step is *approval* (`Looks correct.`) with prob `task.critic_false_approval_rate` and
  otherwise names a step that is right, and on a step-correct attempt names a right step; vague otherwise; with
  `task.critic_checks` the helpful and misleading ones restate and mark the steps before their verdict
  (`synthetic.checked`);
- **refine** after approval: always a copy of the attempt, errors included (`task.approval_refinement`: every
  step, or the answer line alone); after a step hint: the steps before
  it kept, the named step redone (its right value when it was wrong; another value when it was right: the student
  trusts the critic), the steps after it with the same noise as a first attempt, or with `task.careful_after_hint`
  without carry slips (the student, told where to look, minds the carries from there on;
  `task.step_error_rate` still applies); after anything else: a fresh solve with first-attempt noise.
With `critic_false_approval_rate` > 0, approval is followed by a right answer only when the attempt was right, so
a base model learns "after approval, copy" and not "after approval, write a correct solution" (approval as a
shortcut to a correct second answer: docs/results-study-v2.md); the best critic against it approves right attempts and names the first wrong step of wrong
ones. At 0 (`tiny`, `micro`, the first study) approval is the helpful branch's alone and follows right attempts
only.
"""

from __future__ import annotations

import random

from binac_core.benchmarks.prompts import SELF_CORRECT_FEEDBACK
from binac_core.benchmarks.synthetic import (
    CHECK_YOUR_WORK,
    LOOKS_CORRECT,
    Step,
    apply_op,
    carries,
    carry_slip,
    checked,
    final_answer,
    make_row,
    name_step,
    named_step,
    oracle_feedback,
    parse_question,
    parse_steps,
    render_trace,
    width_of,
)


def _wrong_value(rng: random.Random, right: int, width: int) -> int:
    """A value other than `right`, uniform over the modulus 10 ** width."""
    return rng.choice([d for d in range(10**width) if d != right])


def _continue(
    value: int,
    ops: list[tuple[str, int]],
    rng: random.Random,
    error_rate: float,
    width: int,
    carry_error_rate: float = 0.0,
) -> list[Step]:
    """Steps from `value` on; a carrying step slips (`carry_slip`) with prob `carry_error_rate`, otherwise each
    result is wrong with prob `error_rate`; later steps build on it. At `carry_error_rate` 0 it draws exactly the
    random numbers it drew before that option existed."""
    steps = []
    for op, b in ops:
        right = apply_op(value, op, b, 10**width)
        if carry_error_rate > 0 and carries(value, op, b) and rng.random() < carry_error_rate:
            c = carry_slip(value, op, b, width)
        else:
            c = _wrong_value(rng, right, width) if rng.random() < error_rate else right
        steps.append(Step(value, op, b, c, width))
        value = c
    return steps


def teacher_solve(question: str, rng: random.Random, error_rate: float, carry_error_rate: float = 0.0) -> str:
    """A noisy solution trace: each step wrong with prob `error_rate`, a carrying step slipped with prob
    `carry_error_rate`; errors propagate consistently."""
    start, ops = parse_question(question)
    return render_trace(_continue(start, ops, rng, error_rate, width_of(question), carry_error_rate))


def teacher_critique(
    question: str,
    attempt: str,
    rng: random.Random,
    helpful_rate: float,
    misleading_rate: float,
    false_approval_rate: float = 0.0,
    checks: bool = False,
) -> str:
    """A mediocre critique of a teacher attempt: helpful, misleading or vague, in these proportions (the
    module's rules).

    Helpful is the oracle's feedback (the first wrong step, or `Looks correct.`); misleading, on an attempt with a
    wrong step, is `Looks correct.` with prob `false_approval_rate`, else (and on a step-correct attempt) it names
    a step whose result is right for its written operands (falls back to vague when there is none); vague is
    `SELF_CORRECT_FEEDBACK` or `Check your work.`. With `checks` (`task.critic_checks`) every critique but a vague
    one checks the steps before its verdict (`synthetic.checked`): the helpful one truly, up to the first wrong
    step; a misleading one marks the step it names `no` and every step before it `ok`, or, approving a wrong
    attempt, every step `ok`. Expects a well-formed attempt (teacher traces are). At `false_approval_rate` 0 it
    draws exactly the random numbers it drew before that option existed.
    """
    u = rng.random()
    width = width_of(question)
    helpful = oracle_feedback({**make_row(question), "checks": checks}, attempt)
    if u < helpful_rate:
        return helpful
    if u < helpful_rate + misleading_rate:
        if false_approval_rate > 0 and named_step(helpful) is not None and rng.random() < false_approval_rate:
            return checked(attempt, width, None, LOOKS_CORRECT) if checks else LOOKS_CORRECT
        pieces = parse_steps(attempt, width)
        fine = [k for k, p in enumerate(pieces, 1) if isinstance(p, Step) and p.locally_right]
        fine = [k for k in fine if k != named_step(helpful)]
        if fine:
            k = rng.choice(fine)
            return checked(attempt, width, k, name_step(k)) if checks else name_step(k)
    return rng.choice([SELF_CORRECT_FEEDBACK, CHECK_YOUR_WORK])


def teacher_refine(
    question: str,
    attempt: str,
    feedback: str,
    rng: random.Random,
    error_rate: float,
    approval_refinement: str = "copy",
    carry_error_rate: float = 0.0,
    careful_after_hint: bool = False,
) -> str:
    """The second answer a feedback-following student writes.

    `Looks correct.`: copy the attempt (`approval_refinement` `copy`), or only its answer line (`answer`: `A: 08`;
    an attempt without one is copied whole). `Step k is wrong`: keep steps before k, then change step k (its right
    value if the attempt's was wrong, otherwise any other value: the student trusts the critic), then go on with
    teacher noise (`careful_after_hint`: no carry slips). Anything else (vague): solve again from scratch,
    with first-attempt noise.
    """
    start, ops = parse_question(question)
    width = width_of(question)
    pieces = parse_steps(attempt, width)
    k = named_step(feedback)
    if LOOKS_CORRECT in feedback:
        answer = final_answer(attempt)
        return f"A: {answer}" if approval_refinement == "answer" and answer is not None else attempt.strip()
    if k is None or not 1 <= k <= min(len(ops), len(pieces)) or not all(isinstance(p, Step) for p in pieces):
        return teacher_solve(question, rng, error_rate, carry_error_rate)
    kept: list[Step] = pieces[: k - 1]  # type: ignore[assignment]
    value = kept[-1].c if kept else start
    op, b = ops[k - 1]
    right = apply_op(value, op, b, 10**width)
    old = pieces[k - 1].c  # type: ignore[union-attr]
    redone = Step(value, op, b, right if old != right else _wrong_value(rng, old, width), width)
    later = _continue(redone.c, ops[k:], rng, error_rate, width, 0.0 if careful_after_hint else carry_error_rate)
    return render_trace(kept + [redone] + later)
