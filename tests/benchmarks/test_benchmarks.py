"""The benchmark registry (binac_core/benchmarks/): a new benchmark is one definition plus one registration, and the
pipeline's library functions (rows, generation, feedback, grading, evaluation, stored rows) take it as it is.

The toy benchmark `echo` (the answer is the question written backwards) is defined in this file only. The fake
model copies the word on a first attempt (wrong, except for a palindrome) and writes it backwards once it has had
feedback, so every number below is computed by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from binac_core import benchmarks
from binac_core.benchmarks import Benchmark
from binac_core.benchmarks.grade import grade, grade_batch, grade_with_reason
from binac_core.benchmarks.problems import load_problems
from binac_core.errors import BinacError
from binac_core.foundation.config import load_config
from binac_core.model.generation import Generation, SamplingParams
from binac_core.model.stage_io import Attempt, ScoredBatch
from binac_core.rl.episodes import generate_attempts, generate_refinements, sample_feedback, score_with_errors
from binac_core.rl.evaluation import evaluate_protocols, training_protocols
from binac_core.rl.methods import FeedbackSource
from binac_core.runs.plans import plan
from binac_core.store.identity import RunIdentity
from binac_core.store.records import trajectory_rows

WORDS = {"train": ("abc", "bird"), "eval": ("drawer", "stressed", "level")}


def _echo_rows(task_cfg, split: str) -> list[dict]:
    if split not in WORDS:
        raise BinacError(f"unknown split {split!r}")
    rows = [{"id": f"echo-{split}-{i}", "question": w, "answer": w[::-1]} for i, w in enumerate(WORDS[split])]
    return rows[: task_cfg.n_test] if split == "eval" else rows


ECHO = Benchmark(
    name="echo",
    required_fields=("answer",),
    load_rows=_echo_rows,
    actor_messages=lambda row: [{"role": "user", "content": f"Reverse: {row['question']}"}],
    critic_messages=lambda row, attempt, execution_result, verdict: [
        {"role": "user", "content": f"Check: {row['question']} -> {attempt}"}
    ],
    refine_messages=lambda row, attempt, feedback: [
        {"role": "user", "content": f"Reverse: {row['question']}"},
        {"role": "assistant", "content": attempt},
        {"role": "user", "content": f"Feedback: {feedback}"},
    ],
    grade=lambda row, response: (response.strip() == row["answer"], None),
)


class _EchoModel:
    """A fake generation backend: copies the word on a first attempt, reverses it after feedback, and as a critic
    always says the same thing. Keeps the last user message of every prompt it was sent."""

    def __init__(self):
        self.sent: list[str] = []

    def generate(self, prompts, adapter, params):
        out = []
        for messages in prompts:
            last = messages[-1]["content"]
            self.sent.append(last)
            if last.startswith("Check: "):
                text = "Write it backwards."
            elif last.startswith("Feedback: "):
                text = messages[0]["content"].removeprefix("Reverse: ")[::-1]
            else:
                text = last.removeprefix("Reverse: ")
            out.append(Generation(text, [1], [2, 3], [0.0, 0.0]))
        return out


@pytest.fixture
def echo(monkeypatch):
    """`echo` registered for one test (a copy of the registry, so the next test sees the real one)."""
    monkeypatch.setattr(benchmarks, "_REGISTRY", dict(benchmarks._REGISTRY))
    return benchmarks.register(ECHO)


def test_a_registered_toy_benchmark_runs_through_the_pipeline(echo):
    assert "echo" in benchmarks.names() and benchmarks.get("echo") is ECHO
    cfg, _, iterations = plan("micro", "fixed_critic", 2, 0, {"task.benchmark": "echo"}, None)
    assert iterations == 2 and cfg.task.benchmark == "echo"
    assert [r["question"] for r in load_problems(cfg, "train")] == ["abc", "bird"]
    problems = load_problems(cfg, "eval")
    assert [r["answer"] for r in problems] == ["reward", "desserts", "level"]

    # the grading entry points dispatch to the toy's grader, with the required-field check
    assert grade("echo", problems[0], "reward") == 1.0 and grade("echo", problems[0], "drawer") == 0.0
    assert grade_batch("echo", problems, ["reward", "x", "level"]) == [1.0, 0.0, 1.0]
    with pytest.raises(BinacError, match="no field 'answer'"):
        grade("echo", {"id": "q", "question": "ab"}, "ba")

    # one iteration's stages by hand: copy (right only for the palindrome), feedback, reverse
    model, params = _EchoModel(), SamplingParams(8)
    by_id = {p["id"]: p for p in problems}
    attempts = generate_attempts(model, "echo", problems, None, 2, params)
    assert [a.text for a in attempts] == ["drawer", "drawer", "stressed", "stressed", "level", "level"]
    scores = score_with_errors("echo", by_id, attempts)
    assert scores.rewards == [0.0, 0.0, 0.0, 0.0, 1.0, 1.0]
    assert scores.execution_results is None  # the critic sees no execution result
    feedback = sample_feedback(model, "echo", by_id, attempts, FeedbackSource.CRITIC_BASE, None, 1, params)
    assert model.sent[-1] == "Check: level -> level" and {f.text for f in feedback} == {"Write it backwards."}
    refined = generate_refinements(model, "echo", by_id, attempts, feedback, None, params)
    assert [y.text for y in refined] == ["reward", "reward", "desserts", "desserts", "level", "level"]
    with pytest.raises(BinacError, match="no oracle"):
        sample_feedback(model, "echo", by_id, attempts, FeedbackSource.ORACLE, None, 1, params)

    # held-out evaluation under every protocol the toy has (no `_exec` ones: its critic sees no execution)
    protocols = training_protocols("echo", FeedbackSource.CRITIC_BASE)
    assert protocols == ("single", "feedback", "gated")
    gen = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 8, "feedback_max_new_tokens": 8}
    res = evaluate_protocols(
        _EchoModel(), "echo", problems, actor=None, critic=None, samples=1, gen=gen, seed=0, step=0, protocols=protocols
    )
    assert res.metrics == {"acc_single": pytest.approx(1 / 3), "acc_feedback": 1.0, "acc_gated_k2": 1.0}

    # stored rows: no first-error analysis, so its columns stay empty
    meta = RunIdentity(run_id="r", method="fixed_critic", preset="micro", seed=0, benchmark="echo")
    scored = ScoredBatch(attempts, scores.rewards, feedback, refined, [1.0] * 6)
    rows = trajectory_rows(meta, 1, scored, split="train", protocol="train")
    assert [r["refined_reward"] - r["attempt_reward"] for r in rows] == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0]
    assert all(r["first_wrong_step"] is None and r["feedback_step"] is None for r in rows)


def test_a_method_that_needs_an_oracle_is_refused_on_a_benchmark_without_one(echo):
    with pytest.raises(BinacError, match="needs a benchmark with an oracle critic \\(synthetic; benchmark is 'echo'"):
        plan("micro", "oracle_critic", 1, 0, {"task.benchmark": "echo"}, None)


def test_unknown_benchmark_is_one_line_naming_the_known_ones():
    with pytest.raises(BinacError) as excinfo:
        benchmarks.get("humaneval")
    assert str(excinfo.value) == (
        "unknown benchmark 'humaneval' (known: gpqa_diamond, gsm8k, math, math500, mbpp, synthetic)"
    )


def test_a_name_registered_twice_is_refused(echo):
    with pytest.raises(BinacError, match="'echo' is registered twice"):
        benchmarks.register(ECHO)


def test_capabilities_are_where_they_belong():
    assert benchmarks.names(having=lambda b: b.critic_sees_execution) == ["mbpp"]
    assert benchmarks.names(having=lambda b: b.oracle_feedback is not None) == ["synthetic"]
    assert benchmarks.names(having=lambda b: b.feedback_analysis is not None) == ["synthetic"]
    assert benchmarks.names(having=lambda b: b.check_data is None) == ["synthetic"]  # it builds its rows
    analysis = benchmarks.get("synthetic").feedback_analysis
    assert analysis.first_wrong_step("7+5-3", "7+5=2 2-3=8 A: 8") == 2  # 7+5=2 right, 2-3=9 not 8
    assert analysis.named_step("Step 2 is wrong.") == 2 and analysis.named_step("Looks correct.") is None
    assert (
        benchmarks.get("synthetic").oracle_feedback({"question": "7+5-3", "answer": "9"}, "7+5=2 2-3=8 A: 8")
        == "Step 2 is wrong."
    )


@pytest.mark.parametrize("name", benchmarks.names())
def test_every_registered_benchmark_provides_the_interface(name):
    # Checks are computed into booleans first: a failure must never print a row (GPQA questions stay out of logs).
    bench = benchmarks.get(name)
    assert bench.name == name
    assert bench.required_fields and all(isinstance(f, str) for f in bench.required_fields)
    for field in ("load_rows", "actor_messages", "critic_messages", "refine_messages", "grade"):
        assert callable(getattr(bench, field)), field
    for field in ("check_data", "oracle_feedback"):
        assert getattr(bench, field) is None or callable(getattr(bench, field)), field
    if bench.check_data is not None:
        bench.check_data("eval")
    rows = bench.load_rows(load_config("micro", {"task.benchmark": name, "task.n_test": 2}).task, "eval")
    assert len(rows) == 2 and len({r["id"] for r in rows}) == 2
    for row in rows:
        has_fields = all(field in row for field in bench.required_fields)
        assert has_fields, (name, row["id"])
        for role, messages in (
            ("actor", bench.actor_messages(row)),
            ("critic", bench.critic_messages(row, "an attempt", None, True)),
            ("refine", bench.refine_messages(row, "an attempt", "a feedback")),
        ):
            chat = bool(messages) and all(set(m) == {"role", "content"} for m in messages)
            ok = chat and messages[-1]["role"] == "user" and row["question"] in messages[0]["content"]
            assert ok, (name, row["id"], role)
        correct, reason = bench.grade(row, "no answer here")
        typed = correct is False and (reason is None or isinstance(reason, str))
        assert typed, (name, row["id"])
        score, _ = grade_with_reason(name, row, "no answer here")
        assert score == 0.0, (name, row["id"])


def test_a_study_needs_a_benchmark_whose_regimes_can_be_measured(echo, tmp_path):
    import yaml

    from binac_core.studies.study import load_study

    smoke = yaml.safe_load((Path(__file__).resolve().parents[2] / "studies" / "micro-smoke.yaml").read_text())
    path = tmp_path / "s.yaml"
    path.write_text(
        yaml.safe_dump({**smoke, "overrides": {**(smoke.get("overrides") or {}), "task.benchmark": "echo"}})
    )
    with pytest.raises(
        BinacError,
        match="regimes need a benchmark with an oracle critic and a first-error analysis "
        "\\(synthetic; preset benchmark is 'echo'\\)",
    ):
        load_study(path)


def test_the_oracle_writes_the_synthetic_feedback_without_a_model():
    row = {"id": "q", "question": "7+5-3", "answer": "9"}
    attempts = [
        Attempt("q", k, "", [], text, [], []) for k, text in enumerate(["7+5=2 2-3=8 A: 8", "7+5=2 2-3=9 A: 9"])
    ]
    fb = sample_feedback(None, "synthetic", {"q": row}, attempts, FeedbackSource.ORACLE, None, 2, SamplingParams(1))
    assert [f.text for f in fb] == ["Step 2 is wrong."] * 2 + ["Looks correct."] * 2
    assert all(f.token_ids == [] for f in fb)  # nothing trains on it


def test_the_stage_code_digest_covers_every_benchmark_module():
    from binac_core.foundation.provenance import module_closure

    modules = {"interface", "synthetic", "math", "gsm8k", "mbpp", "gpqa"}
    assert {f"binac_core.benchmarks.{m}" for m in modules} <= module_closure("binac_core.rl.episodes")
