"""Prompt templates (each benchmark's, binac_core/benchmarks/): every template renders for every benchmark, carries
its answer format, and no critic prompt ever contains the reference answer (MBPP's reference program included).

PYTEST_DONT_REWRITE: rendered prompts hold GPQA questions, which must never reach a log in plain text; without
assertion rewriting a failure prints only the message (benchmark, row id, role), never the compared values.
"""

from __future__ import annotations

import secrets

import pytest

from binac_core import benchmarks
from binac_core.benchmarks import prompts, synthetic
from binac_core.benchmarks.data import benchmark_names, load_benchmark
from binac_core.errors import BinacError

SAMPLE = 25


@pytest.fixture(scope="module")
def samples() -> dict[str, list[dict]]:
    return {name: [dict(r) for r in load_benchmark(name, "eval")][::20][:SAMPLE] for name in benchmark_names()}


def _text(messages: list[dict]) -> str:
    assert messages and all(set(m) == {"role", "content"} and isinstance(m["content"], str) for m in messages)
    assert messages[-1]["role"] == "user", "the last message must be the user's"
    return "\n".join(m["content"] for m in messages)


def _all_prompts(name: str, row: dict, attempt: str, feedback: str) -> dict[str, str]:
    return {
        "actor": _text(benchmarks.get(name).actor_messages(row)),
        "critic": _text(benchmarks.get(name).critic_messages(row, attempt, "test 1 failed: assert f(1) == 2")),
        "refine": _text(benchmarks.get(name).refine_messages(row, attempt, feedback)),
    }


@pytest.mark.parametrize("name", benchmark_names())
def test_every_template_renders_with_the_question(samples, name):
    for row in samples[name]:
        rendered = _all_prompts(name, row, "my attempt", "my feedback")
        assert all(row["question"] in text for text in rendered.values()), (name, row["id"], "question")
        assert "my attempt" in rendered["critic"] and "my attempt" in rendered["refine"], (name, row["id"], "attempt")
        assert "my feedback" in rendered["refine"], (name, row["id"], "feedback")


@pytest.mark.parametrize("name", benchmark_names())
def test_no_prompt_reads_any_field_but_the_question(samples, name):
    # Every other field (answer, tests, setup, choices...) is replaced by a canary that must never show up.
    for row in samples[name]:
        canary = f"CANARY-{secrets.token_hex(8)}"
        poisoned = {key: (value if key in ("id", "question") else canary) for key, value in row.items()}
        for role, text in _all_prompts(name, poisoned, "attempt", "feedback").items():
            assert canary not in text, (name, row["id"], role)


def test_mbpp_critic_never_sees_the_reference_program():
    leaked = []
    for row in load_benchmark("mbpp", "eval"):
        attempt = "```python\ndef solution():\n    return None\n```"
        text = _text(benchmarks.get("mbpp").critic_messages(dict(row), attempt, "NameError"))
        if row["answer"].strip() in text:
            leaked.append(row["id"])
    assert leaked == [], leaked


def test_math_critic_never_sees_the_boxed_gold_answer(samples):
    for name in ("math", "math500", "gsm8k"):
        for row in samples[name]:
            text = _text(benchmarks.get(name).critic_messages(row, "I think it is 3.", None))
            assert f"\\boxed{{{row['answer']}}}" not in text, (name, row["id"])


@pytest.mark.parametrize(
    ("name", "instruction"),
    [
        ("math", "\\boxed{"),
        ("math500", "\\boxed{"),
        ("gsm8k", "\\boxed{"),
        ("mbpp", "```python"),
        ("gpqa_diamond", "'Answer: $LETTER'"),
    ],
)
def test_actor_and_refine_prompts_ask_for_the_graded_answer_format(samples, name, instruction):
    row = samples[name][0]
    assert instruction in _text(benchmarks.get(name).actor_messages(row)), (name, "actor")
    assert instruction in _text(benchmarks.get(name).refine_messages(row, "attempt", "feedback")), (name, "refine")


def test_mbpp_actor_prompt_is_lm_eval_style_with_the_three_asserts(samples):
    row = samples["mbpp"][0]
    text = _text(benchmarks.get("mbpp").actor_messages(row))
    assert text.startswith("You are an expert Python programmer, and here is your task:")
    assert "Your code should pass these tests:" in text and all(t in text for t in row["tests"]), row["id"]


def test_code_critic_shows_the_extracted_program_and_the_execution_error(samples):
    row = samples["mbpp"][0]
    attempt = "Sure!\n```python\ndef f(x):\n    return x\n```\nDone."
    text = _text(benchmarks.get("mbpp").critic_messages(row, attempt, "test 2 failed: assert f(2) == 3"))
    assert "```python\ndef f(x):\n    return x\n```" in text and "Sure!" not in text, "program not extracted"
    assert "test 2 failed: assert f(2) == 3" in text, "execution error missing"


def test_critics_are_told_not_to_solve(samples):
    for name in benchmark_names():
        text = _text(benchmarks.get(name).critic_messages(samples[name][0], "attempt", None))
        assert "Do NOT" in text, name


def test_unknown_benchmark_is_a_one_line_error():
    with pytest.raises(BinacError, match="unknown benchmark 'humaneval'") as excinfo:
        benchmarks.get("humaneval")
    assert "\n" not in str(excinfo.value), str(excinfo.value)


def test_synthetic_prompts_are_the_compact_templates():
    row = synthetic.make_row("7+5")
    bench = benchmarks.get("synthetic")
    assert bench.actor_messages(row) == [{"role": "user", "content": "Solve: 7+5"}]
    assert bench.critic_messages(row, " 7+5=2 A: 2 ", None) == [
        {"role": "user", "content": "Check: 7+5\nAttempt: 7+5=2 A: 2"}
    ]
    assert bench.refine_messages(row, "7+5=3 A: 3", "Step 1 is wrong.")[-1] == {
        "role": "user",
        "content": "Feedback: Step 1 is wrong.\nSolve: 7+5",
    }


def test_self_correct_feedback_is_fixed_text():
    assert prompts.SELF_CORRECT_FEEDBACK == "There may be an error in your attempt. Re-check each step.", "changed"
