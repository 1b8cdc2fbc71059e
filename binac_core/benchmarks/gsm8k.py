"""GSM8K: posed like MATH (`binac_core.benchmarks.math`'s prompts), graded by its final number
(`binac_core.grading.gsm8k`); the rows come from `binac_core.benchmarks.data`."""

from __future__ import annotations

from functools import partial

from binac_core.benchmarks.data import load_benchmark, problem_rows
from binac_core.benchmarks.interface import Benchmark
from binac_core.benchmarks.math import actor_messages, critic_messages, refine_messages
from binac_core.grading.gsm8k import is_correct


def grade(row: dict, response: str) -> tuple[bool, None]:
    return is_correct(row, response), None


BENCHMARK = Benchmark(
    name="gsm8k",
    required_fields=("answer",),
    load_rows=partial(problem_rows, "gsm8k"),
    actor_messages=actor_messages,
    critic_messages=critic_messages,
    refine_messages=refine_messages,
    grade=grade,
    check_data=partial(load_benchmark, "gsm8k"),
)
