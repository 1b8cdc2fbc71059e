"""Held-out evaluation's protocols and feedback sources, unit level: a recording fake backend, real MBPP rows
and the sandbox (`binac evaluate` end to end: tests/integration/test_evaluate_cli.py)."""

import pytest
from report_meta import report_meta

# --- Feedback protocols and feedback sources, unit level (a recording fake backend, real MBPP rows and sandbox) ---


class _RecordingBackend:
    """Answers every prompt with the same wrong program; keeps every prompt it was sent."""

    def __init__(self):
        self.sent: list[str] = []

    def generate(self, prompts, adapter, params):
        from binac_core.model.generation import Generation

        self.sent += [m[-1]["content"] for m in prompts]
        return [Generation("```python\ndef not_the_function():\n    return 0\n```", [1], [2], [0.0]) for _ in prompts]


_GEN = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 8, "feedback_max_new_tokens": 8}


def _mbpp_rows(n=3):
    from binac_core.benchmarks.data import load_benchmark

    return [dict(r) for r in list(load_benchmark("mbpp", "eval"))[:n]]


def _evaluate(backend, rows, protocols, benchmark="mbpp", **settings):
    """`evaluate_protocols` as this file's tests call it: no actor adapter, `_GEN`, seed 0, step 0 and, unless
    `settings` say otherwise, no critic adapter and one sample per problem."""
    from binac_core.rl.evaluation import evaluate_protocols

    settings = {"critic": None, "samples": 1} | settings
    return evaluate_protocols(
        backend, benchmark, rows, actor=None, gen=_GEN, seed=0, step=0, protocols=protocols, **settings
    )


def _critic_results(sent: list[str]) -> list[str]:
    """The 'Execution result' section of every critic prompt sent."""
    from binac_core.benchmarks.prompts import CODE_CRITIC

    return [
        p.split("Execution result:\n", 1)[1].rsplit("\n\nInstruction:", 1)[0] for p in sent if p.startswith(CODE_CRITIC)
    ]


def test_mbpp_feedback_protocol_hides_the_execution_result_and_feedback_exec_shows_it():
    from binac_core.model.stage_io import Attempt
    from binac_core.rl.episodes import score_with_errors

    rows = _mbpp_rows()
    by_id = {r["id"]: r for r in rows}
    wrong = [Attempt(r["id"], 0, "", [], "```python\ndef not_the_function():\n    return 0\n```", [], []) for r in rows]
    scores = score_with_errors("mbpp", by_id, wrong)
    reasons = scores.execution_results
    assert scores.rewards == [0.0] * 3 and all(reasons), reasons  # the graded asserts fail, with a reason to show

    unassisted = _RecordingBackend()
    res = _evaluate(unassisted, rows, ("single", "feedback", "gated"))
    shown = _critic_results(unassisted.sent)
    assert len(shown) == 3 + 3  # feedback (= gated round 1) and gated round 2
    assert not any(reason in text for reason in reasons for text in shown), shown
    assert set(res.metrics) == {"acc_single", "acc_feedback", "acc_gated_k2"}

    assisted = _RecordingBackend()
    res = _evaluate(assisted, rows, ("single", "feedback_exec", "gated_exec"))
    shown = _critic_results(assisted.sent)
    assert shown[:3] == reasons  # the execution result of the very asserts that grade the answer
    assert len(shown) == 6 and all(text.strip() and text != "(not run)" for text in shown[3:])  # round 2: y1's result
    assert set(res.metrics) == {"acc_single", "acc_feedback_exec", "acc_gated_exec_k2"}
    assert res.feedback_exec.refined_rewards == [0.0] * 3


def test_exec_protocols_are_refused_without_code_or_without_a_critic():
    from binac_core.errors import BinacError
    from binac_core.rl.evaluation import check_protocols, training_protocols
    from binac_core.rl.methods import FeedbackSource

    with pytest.raises(BinacError, match="code benchmark"):
        check_protocols("gsm8k", ("single", "feedback_exec"))
    with pytest.raises(BinacError, match="need a critic; the fixed instruction sees nothing"):
        check_protocols("mbpp", ("feedback_exec",), FeedbackSource.FIXED)
    base = FeedbackSource.CRITIC_BASE
    assert training_protocols("mbpp", base) == ("single", "feedback", "gated", "feedback_exec", "gated_exec")
    assert training_protocols("mbpp", FeedbackSource.FIXED) == ("single", "feedback", "gated")
    assert training_protocols("synthetic", base) == ("single", "feedback", "gated")


def test_fixed_feedback_replaces_the_critic_in_every_feedback_round():
    from binac_core.benchmarks.prompts import CODE_CRITIC, SELF_CORRECT_FEEDBACK
    from binac_core.rl.methods import FeedbackSource

    be = _RecordingBackend()
    res = _evaluate(be, _mbpp_rows(), ("single", "feedback", "gated"), source=FeedbackSource.FIXED)
    assert not any(p.startswith(CODE_CRITIC) for p in be.sent)  # no critic was asked
    texts = [f.text for f in res.feedback.feedback] + [f.text for r in res.gated for f in r.feedback]
    assert len(texts) == 3 + 3 + 3 and set(texts) == {SELF_CORRECT_FEEDBACK}  # feedback, gated rounds 1 and 2
    assert res.feedback_source is FeedbackSource.FIXED


def test_method_feedback_sources_and_the_report_column(tmp_path):
    from binac_core.reports.report import build_report
    from binac_core.rl.methods import SPECS

    assert {
        m: SPECS[m].eval_feedback.label for m in ("grpo", "fixed_critic", "binac", "critic_only", "self_correct")
    } == {
        "grpo": "critic (base, frozen)",
        "fixed_critic": "critic (base, frozen)",
        "binac": "critic (trained)",
        "critic_only": "critic (trained)",
        "self_correct": "fixed instruction",
    }
    ev = {
        "eval/acc_single": 0.5,
        "eval/acc_feedback": 0.25,
        "eval/acc_feedback_exec": 0.75,
        "eval/acc_gated_k2": 0.5,
        "eval/acc_gated_exec_k2": 1.0,
    }
    runs = [
        {
            "method": m,
            "seed": 0,
            "feedback_source": SPECS[m].eval_feedback,
            "samples_per_iteration": 4,
            "evals": {0: ev, 1: ev},
        }
        for m in ("grpo", "binac", "self_correct")
    ]
    text = build_report(runs, report_meta(), tmp_path)["text"]
    header = next(line for line in text.splitlines() if line.startswith("| method"))
    assert header.split(" | ")[1] == "feedback source"
    assert "| self_correct | fixed instruction |" in text and "| binac | critic (trained) |" in text
    assert "| grpo | critic (base, frozen) |" in text
    assert "acc_feedback_exec" in header and "acc_gated_exec_k2" in header
    assert "no verifier in the loop" not in text
    assert "`acc_feedback_exec` = with execution-assisted feedback" in text and "unassisted" in text


def test_the_frozen_protocol_asks_the_base_critic_about_the_same_attempts():
    """`feedback_frozen`: the critic adapter writes the `feedback` round, the base model (no adapter) the frozen
    round, both on the very attempts of `single`; a method that trains its critic gets it in training."""
    from binac_core.benchmarks import synthetic as syn
    from binac_core.model.generation import AdapterRef, Generation
    from binac_core.rl.evaluation import training_protocols
    from binac_core.rl.methods import FeedbackSource

    class Backend:
        def __init__(self):
            self.calls = []

        def generate(self, prompts, adapter, params):
            self.calls.append((prompts[0][-1]["content"].split(":")[0], adapter))
            return [Generation("7+5=2 A: 2", [1], [2], [0.0]) for _ in prompts]

    rows = [syn.make_row(q) for q in ("7+5", "3-4", "9+9")]
    critic = AdapterRef("critic", "/nowhere", "d")
    be = Backend()
    res = _evaluate(
        be, rows, ("single", "feedback", "feedback_frozen"), benchmark="synthetic", critic=critic, samples=2
    )
    critic_calls = [adapter for role, adapter in be.calls if role == "Check"]
    assert critic_calls == [critic, None]  # the trained critic, then the frozen base
    assert res.feedback_frozen.attempts == res.single.attempts == res.feedback.attempts
    assert res.metrics["acc_feedback_frozen"] == 1 / 3  # "7+5=2 A: 2" is right for 7+5 only
    assert training_protocols("synthetic", FeedbackSource.CRITIC_BASE, trains_critic=True) == (
        "single",
        "feedback",
        "gated",
        "feedback_frozen",
    )
    again = type(res).from_json(res.to_json())
    assert again.feedback_frozen.refined_rewards == res.feedback_frozen.refined_rewards
