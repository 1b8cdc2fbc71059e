"""The eight methods on the micro preset: what each trains, what it stores, and the comparison's records."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from binac_core import sqlrun, tracking
from binac_core.workspace import Workspace


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


ALL = ["grpo", "fixed_critic", "binac", "binac_lam0", "binac_after", "critic_only", "self_correct", "oracle_critic"]


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
    assert arts == {"report/report.md", "report/report.html", "report/accuracy_vs_samples.png"}
    assert "acc_single" in micro_compare["stdout"] and "acc_feedback" in micro_compare["stdout"]


def test_feedback_columns_filled_for_every_method_with_feedback(micro_compare):
    df = sqlrun.run(Workspace(micro_compare["home"]), """
        SELECT method, count(*) AS n, count(feedback) AS fb, count(refined) AS y1, count(refined_reward) AS r1,
               count(critic_reward) AS cr
        FROM trajectories WHERE split = 'train' GROUP BY method""").set_index("method")
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
        attempts = {(a["problem_id"], a["sample_idx"]): a["text"]
                    for a in json.loads((f.parent / "attempts.json").read_text())}
        for fb in json.loads(f.read_text()):
            attempt = attempts[(fb["problem_id"], fb["sample_idx"])]
            assert fb["text"] == synthetic.oracle_feedback(rows[fb["problem_id"]], attempt)
            assert fb["token_ids"] == [] and fb["prompt_ids"] == []
            checked += 1
    assert checked == 16 * 2, "K = 2 oracle feedbacks per attempt, 16 attempts, 1 iteration"
    assert not _identical(_final_adapter(home, "oracle_critic", "actor"), _initial_adapter(home, "actor"))


@pytest.mark.parametrize("method", ["binac", "binac_lam0", "binac_after", "critic_only"])
def test_critic_learning_methods_change_the_critic(micro_compare, method):
    home = micro_compare["home"]
    assert not _identical(_final_adapter(home, method, "critic"), _initial_adapter(home, "critic"))


def test_critic_only_leaves_the_actor_bit_identical(micro_compare):
    home = micro_compare["home"]
    assert _identical(_final_adapter(home, "critic_only", "actor"), _initial_adapter(home, "actor"))
    assert not _identical(_final_adapter(home, "binac", "actor"), _initial_adapter(home, "actor"))


def test_self_correct_feedback_is_the_fixed_instruction(micro_compare):
    from binac_core.prompts import SELF_CORRECT_FEEDBACK

    df = sqlrun.run(Workspace(micro_compare["home"]),
                    "SELECT DISTINCT feedback FROM trajectories WHERE method = 'self_correct' AND split = 'train'")
    assert df["feedback"].tolist() == [SELF_CORRECT_FEEDBACK]


def test_equal_actor_sample_budgets(micro_compare):
    """Count the actor completions each run generated (its stage files: attempts, refinements, look-ahead
    refinements), not the `train/actor_samples` formula: every method trains the whole iterations that fit in the
    budget of 5 GRPO iterations, never more."""
    home = micro_compare["home"]
    budget = 5 * 4 * 4  # --steps 5 GRPO iterations of 4 problems x 4 samples
    generated = {}
    for method in ALL:
        (run,) = [d for d in (home / "runs").iterdir() if d.name.startswith(f"{method}-s0-")]
        per_step = [sum(len(json.loads(f.read_text())) for f in step.glob("*.json")
                        if f.stem in ("attempts", "refined", "lookahead"))
                    for step in sorted(run.glob("step-*"))]
        assert per_step and len(set(per_step)) == 1, (method, per_step)
        assert budget - per_step[0] < sum(per_step) <= budget, (method, per_step)
        generated[method] = per_step
    assert generated["grpo"] == [16] * 5, "16 attempts per iteration, 5 iterations"
    assert generated["self_correct"] == [48], "16 attempts + K = 2 refinements each: 1 iteration fits in 80"
    assert generated["binac"] == [80], "16 attempts + 2 refinements + 2 look-ahead refinements each"
    assert generated["binac_lam0"] == [48], "no look-ahead"


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
        attempts = {(a["problem_id"], a["sample_idx"]): a["text"]
                    for a in json.loads((f.parent / "attempts.json").read_text())}
        for fb in json.loads(f.read_text()):
            if not fb["prompt_ids"]:  # the fixed self-correction text: no critic prompt
                continue
            row = rows[fb["problem_id"]]
            attempt = attempts[(fb["problem_id"], fb["sample_idx"])]
            prompt = tok.decode(fb["prompt_ids"])
            assert row["question"] in prompt and attempt in prompt, "the critic's prompt for this attempt"
            prompt = prompt.replace(attempt, "")  # an attempt may itself be right: only the rest must not tell
            solution = synthetic.render_trace(synthetic.solve_steps(row["question"]))
            assert solution not in prompt and f"A: {row['answer']}" not in prompt, prompt
            decoded += 1
    assert decoded > 0


def _task_cfg(home):
    from binac_core.config import load_config

    return load_config("micro").task


def test_each_method_is_evaluated_with_the_feedback_source_it_trains_with(micro_compare):
    """self_correct's held-out feedback rows carry its fixed instruction (not the base critic's feedback); the
    critic methods' carry critic text; every run is tagged with its source, and the report names it per row."""
    from binac_core.prompts import SELF_CORRECT_FEEDBACK

    ws = Workspace(micro_compare["home"])
    df = sqlrun.run(ws, "SELECT method, protocol, feedback FROM trajectories WHERE split = 'eval' "
                        "AND protocol IN ('feedback', 'gated')")
    sc = df[df.method == "self_correct"]
    assert len(sc) > 0 and set(sc.feedback) == {SELF_CORRECT_FEEDBACK}
    for m in ("grpo", "fixed_critic", "binac", "binac_lam0", "binac_after", "critic_only", "oracle_critic"):
        assert SELF_CORRECT_FEEDBACK not in set(df[df.method == m].feedback), m
    c = tracking.client(ws)
    sources = {r.data.tags["method"]: r.data.tags.get("eval_feedback_source")
               for r in c.search_runs([tracking.experiment_id(c, ws)]) if "mlflow.parentRunId" in r.data.tags}
    assert sources == {"grpo": "critic (base, frozen)", "fixed_critic": "critic (base, frozen)",
                       "binac": "critic (trained)", "binac_lam0": "critic (trained)",
                       "binac_after": "critic (trained)", "critic_only": "critic (trained)",
                       "self_correct": "fixed instruction", "oracle_critic": "oracle (rule-based)"}
    assert "| self_correct | fixed instruction |" in micro_compare["stdout"]
    assert "| method | feedback source |" in micro_compare["stdout"]


def test_the_study_measures_in_sql_equal_the_mlflow_metrics(micro_compare):
    """sql/study_measures.sql recomputes the per-iteration measures from the stored rows (its own SQL, not the
    Python that logged them); every value equals the MLflow metric of the same name and step."""
    ws = Workspace(micro_compare["home"])
    df = sqlrun.run(ws, (Path(__file__).resolve().parents[1] / "sql" / "study_measures.sql").read_text())
    c = tracking.client(ws)
    compared = 0
    for row in df.itertuples(index=False):
        for name in ("zero_adv_frac", "critic_signal_frac", "critic_hits_first_error", "critic_false_alarm",
                     "feedback_gain"):
            history = {m.step: m.value for m in c.get_metric_history(row.run_id, f"train/{name}")}
            value = getattr(row, name)
            if value is None or value != value:  # NULL: the run logs no such metric at this step
                assert row.step not in history, (row.method, name, row.step)
                continue
            assert history[row.step] == pytest.approx(value), (row.method, name, row.step)
            compared += 1
    assert compared >= 8 * 2, compared
