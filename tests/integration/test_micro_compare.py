"""The nine methods on the micro preset, trained once by one real `binac compare` (the session fixture
`micro_compare`): what each trains, what it stores, and the comparison's records."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from trajectory_rows import STUDY_MEASURES

from binac_core.foundation.workspace import Workspace
from binac_core.reports.measures import CRITIC_HEALTH
from binac_core.rl.methods import METHODS
from binac_core.store import sqlrun, tracking


def _final_adapter(home: Path, method: str, name: str) -> dict[str, torch.Tensor]:
    runs = [d for d in (home / "runs").iterdir() if d.name.startswith(f"{method}-s0-")]
    assert len(runs) == 1, runs
    steps = sorted(runs[0].glob(f"step-*/{name}/adapter_model.safetensors"))
    return load_file(str(steps[-1])) if steps else _initial_adapter(home, name)


def _initial_adapter(home: Path, name: str) -> dict[str, torch.Tensor]:
    (init,) = list((home / "runs").glob(f"init-*-s0/{name}/adapter_model.safetensors"))
    return load_file(str(init))


def _identical(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


ALL = list(METHODS)
"""Every method, as the `micro_compare` fixture trains them."""


def test_compare_makes_one_parent_with_a_child_per_method_and_a_report(micro_compare):
    ws = Workspace(micro_compare["home"])
    c = tracking.client(ws)
    runs = c.search_runs([tracking.experiment_id(c, ws)])
    parents = [r for r in runs if r.data.tags.get("kind") == "compare"]
    assert len(parents) == 1
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    assert sorted(r.data.tags["method"] for r in children) == sorted(ALL)
    assert all(r.info.status == "FINISHED" and r.data.tags["seed"] == "0" for r in children)
    arts = {a.path for a in c.list_artifacts(parents[0].info.run_id, "report")}
    assert arts == {
        "report/report.md",
        "report/report.html",
        "report/accuracy_vs_samples.png",
        "report/critic_information.png",  # the methods with critic rewards logged their reward information
    }
    assert "acc_single" in micro_compare["stdout"] and "acc_feedback" in micro_compare["stdout"]


def test_feedback_columns_filled_for_every_method_with_feedback(micro_compare):
    df = sqlrun.run(
        Workspace(micro_compare["home"]),
        """
        SELECT method, count(*) AS n, count(feedback) AS fb, count(refined) AS y1, count(refined_reward) AS r1,
               count(critic_reward) AS cr
        FROM trajectories WHERE split = 'train' GROUP BY method""",
    ).set_index("method")
    for m in ALL[1:]:
        assert df.loc[m, "n"] > 0 and (df.loc[m, ["fb", "y1", "r1", "cr"]] == df.loc[m, "n"]).all(), m
    assert (df.loc["grpo", ["fb", "y1", "r1", "cr"]] == 0).all()


@pytest.mark.parametrize("method", ["fixed_critic", "oracle_critic"])
def test_methods_with_a_frozen_critic_leave_it_bit_identical(micro_compare, method):
    home = micro_compare["home"]
    (run,) = [d for d in (home / "runs").iterdir() if d.name.startswith(f"{method}-s0-")]
    assert not list(run.glob("step-*/critic")), "no critic update stage ran"
    assert _identical(_final_adapter(home, method, "critic"), _initial_adapter(home, "critic"))


def test_oracle_critic_trains_the_actor_on_the_oracles_feedback_only(micro_compare):
    """Every training feedback of oracle_critic is the oracle's text for its attempt, carries no critic tokens
    (nothing to train a critic on), and the actor changed."""
    from binac_core.benchmarks import synthetic

    home = micro_compare["home"]
    rows = {r["id"]: r for r in synthetic.make_split(_task_cfg(home), "train")}
    (run,) = [d for d in (home / "runs").iterdir() if d.name.startswith("oracle_critic-s0-")]
    checked = 0
    for f in run.glob("step-*/feedback.json"):
        attempts = {
            (a["problem_id"], a["sample_idx"]): a["text"] for a in json.loads((f.parent / "attempts.json").read_text())
        }
        for fb in json.loads(f.read_text()):
            attempt = attempts[(fb["problem_id"], fb["sample_idx"])].strip()  # the prompt holds it stripped
            assert fb["text"] == synthetic.oracle_feedback(rows[fb["problem_id"]], attempt)
            assert fb["token_ids"] == [] and fb["prompt_ids"] == []
            checked += 1
    assert checked == 16 * 2, "K = 2 oracle feedbacks per attempt, 16 attempts, 1 iteration"
    assert not _identical(_final_adapter(home, "oracle_critic", "actor"), _initial_adapter(home, "actor"))


CRITIC_LEARNERS = ("binac", "binac_lam0", "binac_after", "critic_only")


def _critic_had_signal(home, method: str) -> bool:
    """Whether some feedback group of the method's training rows had unequal critic rewards (a non-zero
    advantage: something for the critic's update to learn from)."""
    df = sqlrun.run(
        Workspace(home),
        "SELECT count(DISTINCT critic_reward) AS n FROM trajectories WHERE method = "
        f"'{method}' AND split = 'train' GROUP BY run_id, step, problem_id, sample_idx",
    )
    return bool((df["n"] > 1).any())


@pytest.mark.parametrize("method", CRITIC_LEARNERS)
def test_critic_learning_methods_change_the_critic_when_its_rewards_differ(micro_compare, method):
    """The critic moves exactly when a feedback group's critic rewards differ (on micro, whose answers are near
    chance, a short run can draw refinements that all score 0: then every advantage is 0 and the critic must stay
    bit-identical)."""
    home = micro_compare["home"]
    changed = not _identical(_final_adapter(home, method, "critic"), _initial_adapter(home, "critic"))
    assert changed == _critic_had_signal(home, method)


def test_some_critic_learning_method_had_a_signal_to_learn_from(micro_compare):
    """Guards the test above from passing vacuously: the comparison gives at least one critic something to learn."""
    assert any(_critic_had_signal(micro_compare["home"], m) for m in CRITIC_LEARNERS)


def test_critic_only_leaves_the_actor_bit_identical(micro_compare):
    home = micro_compare["home"]
    assert _identical(_final_adapter(home, "critic_only", "actor"), _initial_adapter(home, "actor"))
    assert not _identical(_final_adapter(home, "binac", "actor"), _initial_adapter(home, "actor"))


def test_self_correct_feedback_is_the_fixed_instruction(micro_compare):
    from binac_core.benchmarks.prompts import SELF_CORRECT_FEEDBACK

    df = sqlrun.run(
        Workspace(micro_compare["home"]),
        "SELECT DISTINCT feedback FROM trajectories WHERE method = 'self_correct' AND split = 'train'",
    )
    assert df["feedback"].tolist() == [SELF_CORRECT_FEEDBACK]


# Per iteration on micro (4 problems x 4 attempts, K = 2), hand-computed: (actor training, generated) samples.
# Actor training: 16 attempts, + 32 refinements when the actor trains on its second turn; never the look-ahead.
# Generated: 16 attempts, + 32 critic feedbacks when the critic writes them, + 32 refinements with a second turn,
# + 32 look-ahead refinements.
MICRO_COUNTS = {
    "grpo": (16, 16),
    "fixed_critic": (48, 80),
    "binac": (48, 112),
    "binac_lam0": (48, 80),
    "binac_after": (48, 112),
    "critic_only": (0, 80),
    "self_correct": (48, 48),
    "oracle_critic": (48, 48),
    "binac_disc": (48, 112),
}


def test_equal_actor_training_sample_budgets(micro_compare):
    """Count the sequences each run's stage files hold, not the formulas: the actor trained on its attempts and
    (with a second turn) its refinements, never the look-ahead; generated adds the critic's sampled feedback (a
    critic prompt: not the fixed text or the oracle's) and the look-ahead refinements. Every method trains the
    whole iterations whose actor training samples fit the budget of 5 GRPO iterations (80), never more;
    critic_only, training no actor, runs GRPO's 5."""
    from binac_core.rl.methods import method_spec

    home = micro_compare["home"]
    budget = 5 * 4 * 4  # --steps 5 GRPO iterations of 4 problems x 4 samples
    iterations = {}
    for method in ALL:
        (run,) = [d for d in (home / "runs").iterdir() if d.name.startswith(f"{method}-s0-")]
        spec = method_spec(method)
        counted = set()
        for step in sorted(run.glob("step-*")):
            files = {
                f.stem: json.loads(f.read_text())
                for f in step.glob("*.json")
                if f.stem in ("attempts", "feedback", "refined", "lookahead")
            }
            trained = len(files["attempts"]) * spec.train_actor + len(files.get("refined", [])) * spec.actor_second_turn
            generated = (
                len(files["attempts"])
                + sum(1 for fb in files.get("feedback", []) if fb["prompt_ids"])
                + len(files.get("refined", []))
                + len(files.get("lookahead", []))
            )
            counted.add((trained, generated))
        iterations[method] = len(list(run.glob("step-*")))
        assert counted == {MICRO_COUNTS[method]}, (method, counted)
        trained = MICRO_COUNTS[method][0]
        if trained:
            assert budget - trained < iterations[method] * trained <= budget, (method, iterations[method])
    assert iterations == {
        "grpo": 5,
        "fixed_critic": 1,
        "binac": 1,
        "binac_lam0": 1,
        "binac_after": 1,
        "critic_only": 5,
        "self_correct": 1,
        "oracle_critic": 1,
        "binac_disc": 1,
    }


def test_stored_and_logged_sample_counts_are_step_times_the_per_iteration_counts(micro_compare):
    """Every stored row (train and eval, step 0 included) carries the run's cumulative counts after its step, and
    MLflow's `train/actor_samples`, `train/generated_samples` histories and the `eval_at_*` copies agree."""
    ws = Workspace(micro_compare["home"])
    df = sqlrun.run(
        ws,
        "SELECT method, run_id, split, step, min(actor_samples) AS a_lo, max(actor_samples) AS a_hi, "
        "min(generated_samples) AS g_lo, max(generated_samples) AS g_hi, count(*) AS n "
        f"FROM trajectories WHERE method IN ({', '.join(repr(m) for m in ALL)}) GROUP BY ALL",
    )
    assert set(df.method) == set(ALL) and set(df.split) == {"train", "eval"}
    for row in df.itertuples(index=False):
        trained, generated = MICRO_COUNTS[row.method]
        assert (row.a_lo, row.a_hi) == (row.step * trained,) * 2, row
        assert (row.g_lo, row.g_hi) == (row.step * generated,) * 2, row
    c = tracking.client(ws)
    for method, run_id in dict(zip(df.method, df.run_id, strict=True)).items():
        trained, generated = MICRO_COUNTS[method]
        steps = sorted(m.step for m in c.get_metric_history(run_id, "train/actor_samples"))
        for name, per in (("train/actor_samples", trained), ("train/generated_samples", generated)):
            assert sorted((m.step, m.value) for m in c.get_metric_history(run_id, name)) == [
                (s, s * per) for s in steps
            ], (method, name)
        evals = sorted(m.step for m in c.get_metric_history(run_id, "eval/acc_single"))
        at_generated = sorted(m.step for m in c.get_metric_history(run_id, "eval_at_generated/acc_single"))
        at_samples = sorted(m.step for m in c.get_metric_history(run_id, "eval_at_samples/acc_single"))
        assert at_generated == [s * generated for s in evals], method
        assert at_samples == ([s * trained for s in evals] if trained else [0]), method


def test_no_critic_prompt_contains_the_reference_answer(micro_compare, micro_base):
    """Decode every critic prompt the stored feedback was sampled from (the `prompt_ids` of the feedback stage
    files, not a prompt rebuilt with the function under test); none holds the answer or the worked solution."""
    from transformers import AutoTokenizer

    from binac_core.benchmarks import synthetic

    home = micro_compare["home"]
    rows = {r["id"]: r for split in ("train", "eval") for r in synthetic.make_split(_task_cfg(home), split)}
    tok = AutoTokenizer.from_pretrained(str(micro_base))
    decoded = 0
    for f in (home / "runs").rglob("feedback.json"):
        attempts = {
            (a["problem_id"], a["sample_idx"]): a["text"] for a in json.loads((f.parent / "attempts.json").read_text())
        }
        for fb in json.loads(f.read_text()):
            if not fb["prompt_ids"]:  # the fixed self-correction text: no critic prompt
                continue
            row = rows[fb["problem_id"]]
            attempt = attempts[(fb["problem_id"], fb["sample_idx"])].strip()  # the prompt holds it stripped
            prompt = tok.decode(fb["prompt_ids"])
            assert row["question"] in prompt and attempt in prompt, "the critic's prompt for this attempt"
            prompt = prompt.replace(attempt, "")  # an attempt may itself be right: only the rest must not tell
            solution = synthetic.render_trace(synthetic.solve_steps(row["question"]))
            assert solution not in prompt and f"A: {row['answer']}" not in prompt, prompt
            decoded += 1
    assert decoded > 0


def _task_cfg(home):
    from binac_core.foundation.config import load_config

    return load_config("micro").task


def test_each_method_is_evaluated_with_the_feedback_source_it_trains_with(micro_compare):
    """self_correct's held-out feedback rows carry its fixed instruction (not the base critic's feedback); the
    critic methods' carry critic text; every run is tagged with its source, and the report names it per row."""
    from binac_core.benchmarks.prompts import SELF_CORRECT_FEEDBACK
    from binac_core.rl.methods import method_spec

    ws = Workspace(micro_compare["home"])
    df = sqlrun.run(
        ws,
        "SELECT method, protocol, feedback FROM trajectories WHERE split = 'eval' "
        "AND protocol IN ('feedback', 'gated')",
    )
    sc = df[df.method == "self_correct"]
    assert len(sc) > 0 and set(sc.feedback) == {SELF_CORRECT_FEEDBACK}
    for m in (m for m in ALL if m != "self_correct"):
        assert SELF_CORRECT_FEEDBACK not in set(df[df.method == m].feedback), m
    c = tracking.client(ws)
    sources = {
        r.data.tags["method"]: r.data.tags.get("eval_feedback_source")
        for r in c.search_runs([tracking.experiment_id(c, ws)])
        if "mlflow.parentRunId" in r.data.tags
    }
    # The specs' sources, pinned by hand in tests/rl/test_methods.py; grpo, without a second turn, the base critic's.
    assert sources == {m: method_spec(m).eval_feedback.value for m in ALL}
    assert "| self_correct | fixed instruction |" in micro_compare["stdout"]
    assert "| method | feedback source |" in micro_compare["stdout"]


STUDY_EVAL = ("critic_hits_first_error", "critic_false_alarm", "critic_approves_wrong", "critic_approves_right")


def _sql_equals_mlflow(ws: Workspace, split: str, names: tuple[str, ...]) -> set[str]:
    """Assert every value of sql/study_measures.sql (the latest comparison) equals the MLflow metric
    `<split>/<name>` at its step (a NULL: no metric there); return the names compared on a value at least once."""
    df = sqlrun.run(
        ws, (Path(__file__).resolve().parents[2] / "sql" / "study_measures.sql").read_text(), {"split": split}
    )
    assert len(df) > 0
    c, compared = tracking.client(ws), set()
    for row in df.itertuples(index=False):
        for name in names:
            history = {m.step: m.value for m in c.get_metric_history(row.run_id, f"{split}/{name}")}
            value = getattr(row, name)
            if value is None or value != value:  # NULL: the run logs no such metric at this step
                assert row.step not in history, (row.method, split, name, row.step)
                continue
            assert history[row.step] == pytest.approx(value), (row.method, split, name, row.step)
            compared.add(name)
    return compared


def test_the_study_measures_in_sql_equal_the_mlflow_metrics(micro_compare):
    """sql/study_measures.sql recomputes the per-iteration measures from the stored rows (its own SQL, not the
    Python that logged them); every value equals the MLflow metric of the same name and step, for the training
    iterations of all nine methods and for the held-out `feedback` protocol. (Hand-computed values on planted
    stores, including the measures micro's near-chance critic leaves empty: tests/reports/test_study_measures.py.)"""
    ws = Workspace(micro_compare["home"])
    compared = _sql_equals_mlflow(ws, "train", STUDY_MEASURES)
    assert {
        "zero_adv_frac",
        "refine_zero_adv_frac",
        "critic_hits_first_error",
        "critic_approves_wrong",
        "critic_useful_mixed_frac",
        "critic_signal_frac",
        "feedback_gain",
    } <= compared, compared
    assert "critic_hits_first_error" in _sql_equals_mlflow(ws, "eval", STUDY_EVAL)


# --- The two budget axes, without a run: B = 8 problems, G = 8 attempts, K = 4 ---

# (actor training, generated) samples per iteration, by hand: attempts B·G = 64, refinements, critic feedbacks and
# look-ahead refinements B·G·K = 256 each.


def test_the_verdict_column_and_the_critic_health_metrics_agree_in_sql_and_mlflow(micro_compare):
    """Every feedback row a critic (or the oracle) wrote has a verdict, a fixed instruction's none; and
    sql/critic_health.sql (per run, its own SQL over the stored rows) equals the MLflow metrics
    `<split>/critic/<measure>` of every run and step, for training and for the held-out `feedback` protocol."""
    ws = Workspace(micro_compare["home"])
    df = sqlrun.run(
        ws,
        "SELECT method, count(feedback) AS fb, count(feedback_verdict) AS v, "
        "count(*) FILTER (WHERE feedback_verdict = 'none') AS missing "
        "FROM trajectories GROUP BY method",
    ).set_index("method")
    assert df.loc["self_correct", "fb"] > 0 and df.loc["self_correct", "v"] == 0
    assert df.loc["grpo", "v"] == df.loc["grpo", "fb"]  # its held-out feedback is the frozen critic's
    for m in ALL[1:]:
        if m != "self_correct":
            assert df.loc[m, "v"] == df.loc[m, "fb"] > 0, m
    assert df.loc["oracle_critic", "missing"] == 0  # the oracle always says a verdict
    query = (Path(__file__).resolve().parents[2] / "sql" / "critic_health.sql").read_text()
    c, compared = tracking.client(ws), set()
    for split in ("train", "eval"):
        rows = sqlrun.run(ws, query, {"split": split, "per_run": 1})
        assert len(rows) > 0 and "self_correct" not in set(rows.method)
        for row in rows.itertuples(index=False):
            for name in CRITIC_HEALTH:
                history = {m.step: m.value for m in c.get_metric_history(row.run_id, f"{split}/critic/{name}")}
                value = getattr(row, name)
                if value is None or value != value:
                    assert row.step not in history, (row.method, split, name, row.step)
                    continue
                assert history[row.step] == pytest.approx(value), (row.method, split, name, row.step)
                compared.add((split, name))
    assert {("train", "verdict_accuracy"), ("eval", "verdict_accuracy"), ("train", "verdict_missing")} <= compared


def test_the_critic_information_agrees_in_sql_and_mlflow(micro_compare):
    """sql/critic_information.sql at bin 1, per run, equals the MLflow metrics `train/<measure>` of every run and
    iteration with critic rewards (binac_core/reports/measures.py, "The critic's reward information"); a measure
    SQL finds no rows for is not logged."""
    from binac_core.reports.measures import CRITIC_INFORMATION

    ws = Workspace(micro_compare["home"])
    query = (Path(__file__).resolve().parents[2] / "sql" / "critic_information.sql").read_text()
    rows = sqlrun.run(ws, query, {"bin": 1, "per_run": 1})
    c, compared = tracking.client(ws), set()
    assert {"binac", "binac_lam0", "binac_disc"} <= set(rows.method)
    for row in rows.itertuples(index=False):
        for name in CRITIC_INFORMATION:
            history = {m.step: m.value for m in c.get_metric_history(row.run_id, f"train/{name}")}
            value = getattr(row, name)
            if value is None or value != value:
                assert row.bin_start not in history, (row.method, name, row.bin_start)
                continue
            assert history[row.bin_start] == pytest.approx(value), (row.method, name, row.bin_start)
            compared.add(name)
    assert {"critic_flat_frac", "critic_reward_spread", "critic_wrong_frac"} <= compared


def test_the_comparison_report_has_the_critic_health_table(micro_compare):
    assert "**Critic health**" in micro_compare["stdout"]
    assert "| binac_disc, final |" in micro_compare["stdout"] and "| self_correct," not in micro_compare["stdout"]


def test_every_training_run_logs_each_phase_once_per_iteration(micro_compare):
    """`perf/<phase>_s` (binac_core/foundation/timing.py), measured where each phase runs, in every training run:
    one value per iteration, none negative, and the phases a method has take time (bench/stage_costs.py reads them)."""
    from binac_core.foundation.timing import PHASES

    ws = Workspace(micro_compare["home"])
    c = tracking.client(ws)
    children = [r for r in c.search_runs([tracking.experiment_id(c, ws)]) if r.data.tags.get("mlflow.parentRunId")]
    assert len(children) == len(ALL)
    for run in children:
        iterations = int(run.data.params["iterations"])
        for phase in PHASES:
            history = c.get_metric_history(run.info.run_id, f"perf/{phase}_s")
            assert sorted(m.step for m in history) == list(range(1, iterations + 1)), (run.info.run_name, phase)
            assert all(m.value >= 0 for m in history)
        sample = c.get_metric_history(run.info.run_id, "perf/sample_s")
        assert sum(m.value for m in sample) > 0, run.info.run_name
