"""GPQA Diamond (`gpqa_diamond`, eval only): simple-evals' multiple-choice prompt, a science-reviewer critic who never
names the right option, and the `Answer: X` grader (`binac_core.grading.gpqa`). The rows (options shuffled with a fixed
seed per question) come from `binac_core.benchmarks.data`."""

from __future__ import annotations

from binac_core.benchmarks.data import stored_benchmark
from binac_core.benchmarks.prompts import CHOICE_CRITIC, CHOICE_FORMAT, critic_instruction, second_turn, user
from binac_core.grading.gpqa import is_correct


def actor_messages(row: dict) -> list[dict]:
    return user(f"Answer the following multiple choice question. {CHOICE_FORMAT}\n\n{row['question']}")


def critic_messages(row: dict, attempt: str, execution_result: str | None = None, verdict: bool = False) -> list[dict]:
    """The question (with its options) and the answer; there is no execution result to show. `verdict`: ask for
    a verdict line (`binac_core.benchmarks.prompts.critic_instruction`)."""
    return user(
        f"{critic_instruction(CHOICE_CRITIC, verdict, 'answer')}\n\nQuestion:\n{row['question']}\n\nStudent answer:\n{attempt}\n\nReview:"
    )


def refine_messages(row: dict, attempt: str, feedback: str) -> list[dict]:
    return second_turn("Question", CHOICE_FORMAT, row["question"], attempt, feedback)


def grade(row: dict, response: str) -> tuple[bool, None]:
    return is_correct(row, response), None


BENCHMARK = stored_benchmark("gpqa_diamond", ("answer",), actor_messages, critic_messages, refine_messages, grade)
