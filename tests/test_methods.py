"""The five methods on the micro preset: what each trains, what it stores, and the comparison's records."""

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


def test_compare_makes_one_parent_with_five_children_and_a_report(micro_compare):
    ws = Workspace(micro_compare["home"])
    c = tracking.client(ws)
    runs = c.search_runs([tracking.experiment_id(c, ws)])
    parents = [r for r in runs if r.data.tags.get("kind") == "compare"]
    assert len(parents) == 1
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    assert sorted(r.data.tags["method"] for r in children) == sorted(
        ["grpo", "fixed_critic", "binac", "critic_only", "self_correct"])
    assert all(r.info.status == "FINISHED" and r.data.tags["seed"] == "0" for r in children)
    arts = {a.path for a in c.list_artifacts(parents[0].info.run_id, "report")}
    assert arts == {"report/report.md", "report/accuracy_vs_samples.png"}
    assert "acc_single" in micro_compare["stdout"] and "acc_feedback" in micro_compare["stdout"]


def test_feedback_columns_filled_for_every_method_with_feedback(micro_compare):
    df = sqlrun.run(Workspace(micro_compare["home"]), """
        SELECT method, count(*) AS n, count(feedback) AS fb, count(refined) AS y1, count(refined_reward) AS r1,
               count(critic_reward) AS cr
        FROM trajectories WHERE split = 'train' GROUP BY method""").set_index("method")
    for m in ("fixed_critic", "binac", "critic_only", "self_correct"):
        assert df.loc[m, "n"] > 0 and (df.loc[m, ["fb", "y1", "r1", "cr"]] == df.loc[m, "n"]).all(), m
    assert (df.loc["grpo", ["fb", "y1", "r1", "cr"]] == 0).all()


def test_fixed_critic_leaves_the_critic_bit_identical(micro_compare):
    home = micro_compare["home"]
    assert _identical(_final_adapter(home, "fixed_critic", "critic"), _initial_adapter(home, "critic"))


@pytest.mark.parametrize("method", ["binac", "critic_only"])
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
    ws = Workspace(micro_compare["home"])
    c = tracking.client(ws)
    runs = [r for r in c.search_runs([tracking.experiment_id(c, ws)]) if "mlflow.parentRunId" in r.data.tags]
    budget = 2 * 4 * 4  # --steps 2 GRPO iterations of 4 problems x 4 samples
    for r in runs:
        final = c.get_metric_history(r.info.run_id, "train/actor_samples")[-1].value
        per_iter = c.get_metric_history(r.info.run_id, "train/actor_samples")[0].value
        assert budget <= final < budget + per_iter, r.data.tags["method"]


def test_no_critic_prompt_contains_the_reference_answer(micro_compare):
    """Rebuild every critic prompt the stored feedback came from; none holds the answer or the solution."""
    from binac_core import synthetic
    from binac_core.prompts import critic_messages

    home = micro_compare["home"]
    rows = {r["id"]: r for split in ("train", "eval") for r in synthetic.make_split(_task_cfg(home), split)}
    df = sqlrun.run(Workspace(home), "SELECT DISTINCT problem_id, attempt FROM trajectories "
                    "WHERE feedback IS NOT NULL AND benchmark = 'synthetic'")
    assert len(df) > 0
    for pid, attempt in zip(df["problem_id"], df["attempt"], strict=True):
        row = rows[pid]
        text = " ".join(m["content"] for m in critic_messages("synthetic", row, attempt))
        solution = synthetic.render_trace(synthetic.solve_steps(row["question"]))
        assert solution not in text.replace(attempt, "")
        assert f"A: {row['answer']}" not in text.replace(attempt, "")


def _task_cfg(home):
    from binac_core.config import load_config

    return load_config("micro").task
