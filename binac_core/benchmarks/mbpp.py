"""MBPP: lm-eval's prompt, a programming-mentor critic who is shown the execution result of the attempt on the
benchmark's asserts, and the sandbox grader (`binac_core.grading.code`). The rows come from
`binac_core.benchmarks.data`."""

from __future__ import annotations

from binac_core.benchmarks.data import stored_benchmark
from binac_core.benchmarks.prompts import CODE_CRITIC, CODE_FORMAT, critic_instruction, second_turn, user
from binac_core.grading.code import extract_program, verdict


def actor_messages(row: dict) -> list[dict]:
    return user(f"You are an expert Python programmer, and here is your task: {row['question']}\n\n{CODE_FORMAT}")


def critic_messages(row: dict, attempt: str, execution_result: str | None = None, verdict: bool = False) -> list[dict]:
    """The task, the program extracted from the attempt, and its execution result (`(not run)` without one).
    `verdict`: ask for a verdict line (`binac_core.benchmarks.prompts.critic_instruction`)."""
    result = execution_result or "(not run)"
    return user(
        f"{critic_instruction(CODE_CRITIC, verdict, 'solution')}\n\nTask:\n{row['question']}\n\nSolution:\n```python\n{extract_program(attempt).strip()}\n```"
        f"\n\nExecution result:\n{result}\n\nInstruction:"
    )


def refine_messages(row: dict, attempt: str, feedback: str) -> list[dict]:
    return second_turn("Task", CODE_FORMAT, row["question"], attempt, feedback)


BENCHMARK = stored_benchmark(
    "mbpp",
    ("tests",),
    actor_messages,
    critic_messages,
    refine_messages,
    verdict,
    critic_sees_execution=True,
    runs_code=True,
)
