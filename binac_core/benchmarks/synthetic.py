"""Synthetic task family: chains of modular arithmetic with a verifiable answer, in two answer spaces.

A problem is a start value and `difficulty` additions or subtractions of a digit 1-9, everything modulo
`task.modulus`:
- modulus 10 (`tiny`, `micro`, the first study): one-digit values, e.g. question `7+5-3+4`, trace
  `7+5=2 2-3=9 9+4=3 A: 3`;
- modulus 100 (the second study, `study2`): two-digit values written with a leading zero, so every value has the
  same width, e.g. question `07+5-9`, trace `07+5=12 12-9=03 A: 03`. A guess is right 1 % of the time instead
  of 10 %, and two wrong steps cancel out ~1 % of the time instead of ~11 %.
The width of the question's start value says which (`modulus_of`), so every function of a question or an
attempt knows its modulus without a config. The solution trace writes one step per operation, each restating its
left operand, then the answer. A step can go wrong (a wrong result) and later steps then build on the wrong
value; since adding or subtracting is a bijection modulo m, an error reaches the answer unless a later error
cancels it, and "step k is wrong" is a short hint that fixes an attempt. (Multiplication was left out on purpose:
`*5` or `*2` can erase an earlier error, which would blur what a critique is worth.)

This module holds the problems (seeded generation, disjoint train/eval splits), the chat prompts of the three
roles (actor, critic, refinement), the grader, the rule-based oracle critic and the analysis of a feedback
against the first wrong step: the `synthetic` benchmark. The noisy teacher whose solutions, critiques and
refinements make the pretraining corpus lives with pretraining (`binac_core.model.pretrain_teacher`). It does not
tokenize or touch models.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass

from binac_core.benchmarks.interface import Benchmark, FeedbackAnalysis
from binac_core.benchmarks.verdict import VerdictSyntax
from binac_core.errors import BinacError

MOD = 10
"""The one-digit family's modulus (the default `task.modulus`)."""
MODULI = (10, 100)
"""The answer spaces the family has (`task.modulus`)."""
OPS = "+-"
SPLITS = ("train", "eval", "val")
EVAL_PERCENT = 20
"""Share (in %) of the question space reserved for evaluation; the split is a hash of the question text."""
VAL_PERCENT = 10
"""Share (in %) of the question space carved out of the training side for validation (`val`): the choices made
before a study's main runs (regimes, gates, a pilot, a control's tuning) read it, never the `eval` split its
results are reported on. Pretraining and the `train` rows see none of it."""
LOOKS_CORRECT = "Looks correct."
CHECK_YOUR_WORK = "Check your work."
CHECK_OK, CHECK_NO = "ok", "no"
"""A step check's marks (`checked`): right for its written operands, or not."""
_OP_RE = re.compile(r"([+-])(\d)")
_START_RE = re.compile(r"^(\d+)")
_NAMED_RE = re.compile(r"Step (\d+) is wrong")
VERDICT_SYNTAX = VerdictSyntax(
    correct=re.compile(re.escape(LOOKS_CORRECT)),
    incorrect=re.compile(rf"{_NAMED_RE.pattern}|{re.escape(CHECK_YOUR_WORK)}"),
)
"""The synthetic feedback's verdict (`binac_core.benchmarks.verdict`): `Looks correct.` is `correct`; a named step
(`Step k is wrong.`) or `Check your work.` (the oracle's words for right steps under a wrong or missing answer)
is `incorrect`; anything else, or both, is `none`. The critic prompt is unchanged by `critic.verdict`."""
_ANSWER_RE = re.compile(r"A:\s*([^\s.]*)")


@dataclass(frozen=True)
class Step:
    """One written step `a op b = c`; `c` may be wrong, which is what the critic looks for."""

    a: int
    op: str
    b: int
    c: int
    width: int = 1
    """Digits of every value: 1 (modulus 10) or 2 (modulus 100, leading zero)."""

    @property
    def text(self) -> str:
        w = self.width
        return f"{self.a:0{w}d}{self.op}{self.b}={self.c:0{w}d}"

    @property
    def locally_right(self) -> bool:
        """True when `c` is the right result for the written operands (ignores whether `a` was right)."""
        return self.c == apply_op(self.a, self.op, self.b, 10**self.width)


def apply_op(a: int, op: str, b: int, mod: int = MOD) -> int:
    return (a + b) % mod if op == "+" else (a - b) % mod


def width_of(question: str) -> int:
    """Digits of the question's start value: its modulus is 10 ** width (`modulus_of`)."""
    m = _START_RE.match(question)
    if m is None:
        raise BinacError(f"not a synthetic question: {question!r}")
    return len(m[1])


def modulus_of(question: str) -> int:
    return 10 ** width_of(question)


def render_value(value: int, width: int) -> str:
    return f"{value:0{width}d}"


# --------------------------------------------------------------------------- problems


def parse_question(question: str) -> tuple[int, list[tuple[str, int]]]:
    """`"7+5-3"` -> `(7, [("+", 5), ("-", 3)])`; `"07+5"` -> `(7, [("+", 5)])`."""
    w = width_of(question)
    return int(question[:w]), [(op, int(b)) for op, b in _OP_RE.findall(question[w:])]


def solve_steps(question: str) -> list[Step]:
    """The correct steps of a question."""
    value, ops = parse_question(question)
    w = width_of(question)
    steps = []
    for op, b in ops:
        step = Step(value, op, b, apply_op(value, op, b, 10**w), w)
        steps.append(step)
        value = step.c
    return steps


def render_trace(steps: list[Step]) -> str:
    """Steps -> `"7+5=2 2-3=9 A: 9"`; the answer is the last step's result, as wide as the steps' values."""
    return " ".join(s.text for s in steps) + f" A: {render_value(steps[-1].c, steps[-1].width)}"


def carries(a: int, op: str, b: int) -> bool:
    """Whether the step's ones digit carries (`+`) or borrows (`-`) into the tens: `37+5`, `32-5` (modulus 100;
    every wrap of the one-digit family, where there is no tens digit to forget, counts as one too)."""
    ones = a % 10
    return ones + b >= 10 if op == "+" else ones < b


def carry_slip(a: int, op: str, b: int, width: int) -> int:
    """The result of a carrying step with its tens digit one too low: the carry forgotten (`37+5` -> 32 instead of
    42) or the borrow taken twice (`32-5` -> 17 instead of 27). Always 10 below the right value, so slips at two
    steps never cancel (a forgotten borrow, 10 above, would undo a forgotten carry). Modulus 100 only: the
    one-digit family has no tens digit."""
    if width != 2:
        raise BinacError("a carry slip needs two-digit values (task.modulus 100)")
    return (apply_op(a, op, b, 100) - 10) % 100


def split_of(question: str) -> str:
    """`eval`, `val` or `train`, by a seed-independent hash: no seed's train/pretraining data meets any seed's
    eval or val set."""
    bucket = int(hashlib.sha256(question.encode()).hexdigest()[:8], 16) % 100
    return "eval" if bucket < EVAL_PERCENT else "val" if bucket < EVAL_PERCENT + VAL_PERCENT else "train"


def random_question(rng: random.Random, difficulty: int, modulus: int = MOD) -> str:
    """A uniformly drawn question: a start value 0..modulus-1 (with leading zeros to the modulus's width), then
    `difficulty` times `+b` or `-b` with b in 1-9."""
    if modulus not in MODULI:
        raise BinacError(f"task.modulus must be one of {', '.join(map(str, MODULI))} (got {modulus})")
    start = render_value(rng.randrange(modulus), len(str(modulus - 1)))
    return start + "".join(f"{rng.choice(OPS)}{rng.randrange(1, 10)}" for _ in range(difficulty))


def make_row(question: str) -> dict:
    steps = solve_steps(question)
    return {
        "id": "syn-" + hashlib.sha1(question.encode()).hexdigest()[:12],
        "question": question,
        "answer": render_value(steps[-1].c, steps[-1].width),
        "solution": render_trace(steps),
        "difficulty": len(steps),
    }


def sample_questions(seed: int, difficulty: int, split: str, n: int, modulus: int = MOD) -> list[str]:
    """`n` distinct questions of one split, deterministic in `seed`; raises when the question space is too small."""
    rng = random.Random(f"{seed}:{split}:{difficulty}" + ("" if modulus == MOD else f":m{modulus}"))
    out: dict[str, None] = {}
    tries = 0
    while len(out) < n:
        tries += 1
        if tries > 50 * n + 1000:
            raise BinacError(
                f"difficulty {difficulty} has too few distinct {split} problems for {n} rows (found {len(out)})"
            )
        q = random_question(rng, difficulty, modulus)
        if q not in out and split_of(q) == split:
            out[q] = None
    return list(out)


def make_split(task_cfg, split: str) -> list[dict]:
    """Rows of the `train` (`n_train`), `eval` (`n_test`) or `val` (`n_val`) split, from `task_cfg.data_seed` and
    `difficulty`."""
    if split not in SPLITS:
        raise BinacError(f"unknown split {split!r} (known: {', '.join(SPLITS)})")
    if task_cfg.prompt_style == "instruct" and task_cfg.modulus != MOD:
        raise BinacError(
            f"task.prompt_style instruct states the rules of modulus {MOD} only (task.modulus is {task_cfg.modulus})"
        )
    n = {"train": task_cfg.n_train, "eval": task_cfg.n_test, "val": task_cfg.n_val}[split]
    questions = sample_questions(task_cfg.data_seed, task_cfg.difficulty, split, n, task_cfg.modulus)
    return [posed(task_cfg, make_row(q)) for q in questions]


def posed(task_cfg, row: dict) -> dict:
    """`row` marked with how the task config poses it: its prompt style and the critic's form."""
    if task_cfg.prompt_style == "instruct":  # the row says how it is posed; the prompts below read it
        row = {**row, "style": "instruct"}
    if task_cfg.critic_checks:  # the oracle writes the critic's form (`oracle_feedback`)
        row = {**row, "checks": True}
    return row


def bank_rows(task_cfg, split: str, seed: int, n: int, exclude: frozenset[str] = frozenset()) -> list[dict]:
    """`n` distinct rows of the `eval` or `val` question split at `task_cfg`'s difficulty and modulus for the
    critic's attempt bank (`binac_core.rl.bank`), deterministic in `seed`, from a random stream of their own (not
    `sample_questions`'), leaving out the questions in `exclude` (the run's held-out rows); a split's first `n`
    rows are the first `n` of any larger `n`. Raises when the question space is too small."""
    if split not in ("eval", "val"):
        raise BinacError(f"a bank split is eval or val (got {split!r})")
    rng = random.Random(f"bank:{seed}:{split}:{task_cfg.difficulty}:m{task_cfg.modulus}")
    out: dict[str, None] = {}
    for _ in range(50 * n + 1000):
        if len(out) == n:
            break
        q = random_question(rng, task_cfg.difficulty, task_cfg.modulus)
        if q not in out and q not in exclude and split_of(q) == split:
            out[q] = None
    if len(out) < n:
        raise BinacError(
            f"difficulty {task_cfg.difficulty} has too few {split} problems for a bank of {n} (found {len(out)})"
        )
    return [posed(task_cfg, make_row(q)) for q in out]


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


def critic_messages(row: dict, attempt: str, execution_result: str | None = None, verdict: bool = False) -> list[dict]:
    """The problem and the attempt only: never the reference answer or the correct trace (nothing is executed).
    `verdict` changes nothing: the synthetic feedback is a verdict already (`VERDICT_SYNTAX`)."""
    if row.get("style") == "instruct":
        return [{"role": "user", "content": INSTRUCT_CRITIC.format(q=row["question"], attempt=attempt.strip())}]
    return [{"role": "user", "content": f"Check: {row['question']}\nAttempt: {attempt.strip()}"}]


def refine_messages(row: dict, attempt: str, feedback: str) -> list[dict]:
    """The first turn as a conversation, then the feedback and the question again as the next user turn.

    Repeating the question at the end gives the second answer the same prompt suffix as the first one, so a
    tiny model reuses what it learned for solving instead of having to find the question further back.
    """
    again = INSTRUCT_TASK.format(q=row["question"]) if row.get("style") == "instruct" else f"Solve: {row['question']}"
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


def _step_re(width: int) -> re.Pattern:
    return re.compile(rf"^(\d{{{width}}})([+-])(\d)=(\d{{{width}}})$")


_STEP_RES = {len(str(m - 1)): _step_re(len(str(m - 1))) for m in MODULI}
"""The step pattern of each value width."""


def parse_steps(attempt: str, width: int = 1) -> list[Step | str]:
    """Each whitespace-separated piece before the first `A:`: a `Step` when well-formed (values exactly `width`
    digits wide), else the raw text."""
    body = attempt.split("A:")[0]
    pattern = _STEP_RES[width]
    out: list[Step | str] = []
    for piece in body.split():
        m = pattern.match(piece)
        out.append(Step(int(m[1]), m[2], int(m[3]), int(m[4]), width) if m else piece)
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
    On a row posed with step checks (`checks`, `task.critic_checks`) the verdict follows the checks of the steps
    up to the first wrong one (`checked`), the form the critic is pretrained to write.
    """
    question = row["question"]
    k = first_wrong_step(question, attempt)
    if k is not None:
        verdict = name_step(k)
    elif len(parse_steps(attempt, width_of(question))) == len(solve_steps(question)) and grade_response(row, attempt):
        verdict = LOOKS_CORRECT
    else:
        verdict = CHECK_YOUR_WORK
    return checked(attempt, width_of(question), k, verdict) if row.get("checks") else verdict


def checked(attempt: str, width: int, flagged: int | None, verdict: str) -> str:
    """A critique that checks the attempt's steps in order before its verdict: each written step restated with
    `ok`, up to step `flagged` restated with `no` (None: every step `ok`), then the verdict:
    `07+5=12 ok 12-9=13 no. Step 2 is wrong.` A malformed piece is restated as written. The check of a step is a
    local computation (its operands are restated beside its result), which a tiny model can learn where naming the
    first wrong step's number in one token it could not (docs/results-testbed.md)."""
    pieces = parse_steps(attempt, width)
    last = len(pieces) if flagged is None else min(flagged, len(pieces))
    marks = [
        f"{p.text if isinstance(p, Step) else p} {CHECK_NO if k == flagged else CHECK_OK}"
        for k, p in enumerate(pieces[:last], 1)
    ]
    return (" ".join(marks) + ". " if marks else "") + verdict


def first_wrong_step(question: str, attempt: str) -> int | None:
    """The 1-based number of the first written step that differs from the correct one (a missing or malformed
    step counts as wrong), or None when every step is right (the answer line may still be wrong or missing)."""
    pieces = parse_steps(attempt, width_of(question))
    for k, want in enumerate(solve_steps(question), start=1):
        if (pieces[k - 1] if k <= len(pieces) else "") != want:
            return k
    return None


def locally_right_steps(question: str, attempt: str) -> list[int]:
    """The 1-based numbers of the attempt's well-formed steps whose result is right for their written operands."""
    pieces = parse_steps(attempt, width_of(question))
    return [k for k, p in enumerate(pieces, 1) if isinstance(p, Step) and p.locally_right]


def critique(row: dict, attempt: str, step: int | None) -> str:
    """A feedback in the critic's form for `row` (with its step checks when the row has `checks`) that names `step`
    as wrong, or approves the attempt when `step` is None, whatever the attempt's steps are."""
    verdict = LOOKS_CORRECT if step is None else name_step(step)
    return checked(attempt, width_of(row["question"]), step, verdict) if row.get("checks") else verdict


def approves(feedback: str) -> bool:
    """Whether a feedback approves the attempt (`Looks correct.`, the verdict "correct")."""
    return LOOKS_CORRECT in feedback


BENCHMARK = Benchmark(
    name="synthetic",
    required_fields=("answer",),
    load_rows=make_split,
    actor_messages=actor_messages,
    critic_messages=critic_messages,
    refine_messages=refine_messages,
    grade=grade,
    oracle_feedback=oracle_feedback,
    verdict_syntax=VERDICT_SYNTAX,
    feedback_analysis=FeedbackAnalysis(
        first_wrong_step=first_wrong_step,
        named_step=named_step,
        approves=approves,
        approval=LOOKS_CORRECT,
        right_steps=locally_right_steps,
        critique=critique,
    ),
)
