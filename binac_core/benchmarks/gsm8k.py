"""GSM8K: posed like MATH (`binac_core.benchmarks.math`'s prompts), graded by its final number
(`binac_core.grading.gsm8k`); the rows come from `binac_core.benchmarks.data`."""

from __future__ import annotations

from binac_core.benchmarks.data import stored_benchmark
from binac_core.benchmarks.math import actor_messages, critic_messages, refine_messages
from binac_core.grading.gsm8k import is_correct


def grade(row: dict, response: str) -> tuple[bool, None]:
    return is_correct(row, response), None


BENCHMARK = stored_benchmark("gsm8k", ("answer",), actor_messages, critic_messages, refine_messages, grade)
