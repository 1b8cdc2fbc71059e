"""Prompt templates: every template renders for every benchmark, carries its answer format, and no critic prompt
ever contains the reference answer (MBPP's reference program included).

PYTEST_DONT_REWRITE: rendered prompts hold GPQA questions, which must never reach a log in plain text; without
assertion rewriting a failure prints only the message (benchmark, row id, role), never the compared values.
"""

from __future__ import annotations

import secrets

import pytest

from binac_core import prompts, synthetic
from binac_core.data import benchmark_names, load_benchmark
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
        "actor": _text(prompts.actor_messages(name, row)),
        "critic": _text(prompts.critic_messages(name, row, attempt, exec_error="test 1 failed: assert f(1) == 2")),
        "refine": _text(prompts.refine_messages(name, row, attempt, feedback)),
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
        text = _text(prompts.critic_messages("mbpp", dict(row), attempt, exec_error="NameError"))
        if row["answer"].strip() in text:
            leaked.append(row["id"])
    assert leaked == [], leaked


def test_math_critic_never_sees_the_boxed_gold_answer(samples):
    for name in ("math", "math500", "gsm8k"):
        for row in samples[name]:
            text = _text(prompts.critic_messages(name, row, "I think it is 3."))
            assert f"\\boxed{{{row['answer']}}}" not in text, (name, row["id"])


@pytest.mark.parametrize(
    ("name", "instruction"),
    [("math", "\\boxed{"), ("math500", "\\boxed{"), ("gsm8k", "\\boxed{"), ("mbpp", "```python"),
     ("gpqa_diamond", "'Answer: $LETTER'")],
)
def test_actor_and_refine_prompts_ask_for_the_graded_answer_format(samples, name, instruction):
    row = samples[name][0]
    assert instruction in _text(prompts.actor_messages(name, row)), (name, "actor")
    assert instruction in _text(prompts.refine_messages(name, row, "attempt", "feedback")), (name, "refine")


def test_mbpp_actor_prompt_is_lm_eval_style_with_the_three_asserts(samples):
    row = samples["mbpp"][0]
    text = _text(prompts.actor_messages("mbpp", row))
    assert text.startswith("You are an expert Python programmer, and here is your task:")
    assert "Your code should pass these tests:" in text and all(t in text for t in row["tests"]), row["id"]


def test_code_critic_shows_the_extracted_program_and_the_execution_error(samples):
    row = samples["mbpp"][0]
    attempt = "Sure!\n```python\ndef f(x):\n    return x\n```\nDone."
    text = _text(prompts.critic_messages("mbpp", row, attempt, exec_error="test 2 failed: assert f(2) == 3"))
    assert "```python\ndef f(x):\n    return x\n```" in text and "Sure!" not in text, "program not extracted"
    assert "test 2 failed: assert f(2) == 3" in text, "execution error missing"


def test_critics_are_told_not_to_solve(samples):
    for name in benchmark_names():
        text = _text(prompts.critic_messages(name, samples[name][0], "attempt"))
        assert "Do NOT" in text, name


@pytest.mark.parametrize("builder", ["actor", "critic", "refine"])
def test_unknown_benchmark_is_a_one_line_error(builder):
    calls = {
        "actor": lambda: prompts.actor_messages("humaneval", {"question": "q"}),
        "critic": lambda: prompts.critic_messages("humaneval", {"question": "q"}, "a"),
        "refine": lambda: prompts.refine_messages("humaneval", {"question": "q"}, "a", "f"),
    }
    with pytest.raises(BinacError, match="unknown benchmark 'humaneval'") as excinfo:
        calls[builder]()
    assert "\n" not in str(excinfo.value), str(excinfo.value)


def test_synthetic_goes_to_the_synthetic_module(monkeypatch):
    seen = []
    monkeypatch.setattr(synthetic, "actor_messages", lambda row: seen.append("actor") or [{"role": "user", "content": "a"}])
    monkeypatch.setattr(synthetic, "critic_messages", lambda row, attempt: seen.append("critic") or [])
    monkeypatch.setattr(synthetic, "refine_messages", lambda row, attempt, fb: seen.append("refine") or [])
    prompts.actor_messages("synthetic", {})
    prompts.critic_messages("synthetic", {}, "x")
    prompts.refine_messages("synthetic", {}, "x", "y")
    assert seen == ["actor", "critic", "refine"], seen


def test_self_correct_feedback_is_fixed_text():
    assert prompts.SELF_CORRECT_FEEDBACK == "There may be an error in your attempt. Re-check each step.", "changed"
