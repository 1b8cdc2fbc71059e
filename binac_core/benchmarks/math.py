"""MATH (`math`) and MATH-500 (`math500`): the same prompts and grader; the rows come from `binac_core.benchmarks.data`.

Prompts: "solve step by step", final answer in `\\boxed{}`; the critic is a math tutor who gives hints and never
the answer (texts: `binac_core.benchmarks.prompts`). Grader: `binac_core.grading.math` (the last `\\boxed{}` against
`row["answer"]`). GSM8K is posed with these prompts too (`binac_core.benchmarks.gsm8k`).
"""

from __future__ import annotations

from binac_core.benchmarks.data import stored_benchmark
from binac_core.benchmarks.prompts import MATH_CRITIC, MATH_FORMAT, critic_instruction, second_turn, user
from binac_core.grading.math import is_correct


def actor_messages(row: dict) -> list[dict]:
    return user(f"Solve the following math problem step by step.\n\nProblem:\n{row['question']}\n\n{MATH_FORMAT}")


def critic_messages(row: dict, attempt: str, execution_result: str | None = None, verdict: bool = False) -> list[dict]:
    """The problem and the attempt; there is no execution result to show. `verdict`: ask for
    a verdict line (`binac_core.benchmarks.prompts.critic_instruction`)."""
    return user(
        f"{critic_instruction(MATH_CRITIC, verdict, 'attempt')}\n\nProblem:\n{row['question']}\n\nStudent attempt:\n{attempt}\n\nHints:"
    )


def refine_messages(row: dict, attempt: str, feedback: str) -> list[dict]:
    return second_turn("Problem", MATH_FORMAT, row["question"], attempt, feedback)


def grade(row: dict, response: str) -> tuple[bool, None]:
    return is_correct(row, response), None


MATH, MATH500 = (
    stored_benchmark(name, ("answer",), actor_messages, critic_messages, refine_messages, grade)
    for name in ("math", "math500")
)
