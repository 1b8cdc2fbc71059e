"""What each method trains and counts, without training: sample counts, budgets, evaluation points, the rows' count
columns, the report's statements of both counts, and the specs themselves."""

import dataclasses

import pytest

from binac_core.foundation.workspace import Workspace

COUNTS_8_8_4 = {
    "grpo": (64, 64),  # attempts only
    "fixed_critic": (320, 64 + 256 + 256),  # trains on attempts + refinements; the frozen critic samples feedback
    "binac": (320, 64 + 256 + 256 + 256),  # + the look-ahead refinements, generated but never trained on
    "binac_lam0": (320, 64 + 256 + 256),  # λ = 0: no look-ahead
    "binac_after": (320, 64 + 256 + 256 + 256),
    "critic_only": (0, 64 + 256 + 256),  # no actor update, so no look-ahead (θ⁺ = θ) and no actor training
    "self_correct": (320, 64 + 256),  # the fixed instruction is written, not sampled
    "oracle_critic": (320, 64 + 256),  # so is the oracle's feedback
    "binac_disc": (320, 64 + 256 + 256 + 256),  # binac's counts: the verdict bonus samples nothing
}


def _cfg_8_8_4():
    from binac_core.foundation.config import load_config

    return load_config("micro", {"train.batch_problems": 8, "train.group_size": 8, "train.critic_group_size": 4})


def test_actor_training_and_generated_samples_per_iteration():
    from binac_core.rl.methods import SPECS

    cfg = _cfg_8_8_4()
    got = {
        m: (s.actor_train_samples_per_iteration(cfg), s.generated_samples_per_iteration(cfg)) for m, s in SPECS.items()
    }
    assert got == COUNTS_8_8_4


def test_iterations_for_a_budget_count_actor_training_samples_only():
    from binac_core.rl.methods import method_spec

    cfg = _cfg_8_8_4()
    budget = 8 * 64  # 8 GRPO iterations
    assert {m: method_spec(m).iterations_for_budget(cfg, budget) for m in COUNTS_8_8_4} == {
        "grpo": 8,
        "fixed_critic": 1,
        "binac": 1,
        "binac_lam0": 1,
        "binac_after": 1,
        "critic_only": 8,  # trains no actor: GRPO's iterations, budget // (B·G)
        "self_correct": 1,
        "oracle_critic": 1,
        "binac_disc": 1,
    }
    assert method_spec("binac").iterations_for_budget(cfg, 2560) == 8, "2560 / 320: binac as many as fixed_critic"


@pytest.mark.parametrize(
    "method, at_samples_step, at_generated_step",
    [
        ("grpo", 60, 60),  # 64 per iteration on both axes: 60 · 64 = 3840
        ("fixed_critic", 12, 7),  # 12 · 320 = 3840; 7 · 576 = 4032 ≥ 3840 > 6 · 576
        ("binac", 12, 5),  # 5 · 832 = 4160 ≥ 3840 > 4 · 832
        ("critic_only", None, 7),  # 0 actor training samples: never reaches 3840 on that axis
    ],
)
def test_evaluation_steps_add_the_equal_budget_point_on_each_axis(method, at_samples_step, at_generated_step):
    from binac_core.runs.plans import evaluation_steps

    trained, generated = COUNTS_8_8_4[method]
    every = {10, 20, 30, 40, 50, 60}
    steps = evaluation_steps(60, 10, None, trained, 3840, None, generated_per_iteration=generated, at_generated=3840)
    assert steps == every | {s for s in (at_samples_step, at_generated_step) if s is not None}
    assert evaluation_steps(
        60, 10, None, trained, None, None, generated_per_iteration=generated, at_generated=3840
    ) == every | {at_generated_step}
    # A run too short to reach either count has no such point.
    assert evaluation_steps(3, 10, None, trained, 3840, None, generated_per_iteration=generated, at_generated=3840) == {
        3
    }


def test_shared_evaluation_counts_leave_out_a_method_training_no_actor():
    from binac_core.runs.plans import evaluation_steps, shared_eval_samples

    assert shared_eval_samples([16, 48, 48, 0], 160, 4) == [48, 96, 144]  # lcm(16, 48); critic_only's 0 ignored
    assert shared_eval_samples([16, 48], 80, 4) == [48]
    assert shared_eval_samples([0], 80, 4) == []
    assert evaluation_steps(5, 2, 4, 16, None, [48]) == {3, 5}  # grpo: 48 at iteration 3, and its last
    assert evaluation_steps(5, 2, 4, 0, None, [48]) == {2, 3, 4, 5}  # critic_only: 4 evenly spaced instead


def test_trajectory_rows_carry_the_cumulative_counts_of_their_step():
    from binac_core.model.stage_io import Attempt, ScoredBatch
    from binac_core.store.identity import RunIdentity
    from binac_core.store.records import sample_counts, trajectory_rows

    meta = RunIdentity(
        run_id="r",
        method="binac",
        preset="p",
        seed=0,
        benchmark="synthetic",
        actor_samples_per_iteration=320,
        generated_samples_per_iteration=832,
    )
    assert sample_counts(meta, 0) == {"actor_samples": 0, "generated_samples": 0}
    assert sample_counts(meta, 5) == {"actor_samples": 1600, "generated_samples": 4160}
    evaluate = dataclasses.replace(meta, actor_samples_per_iteration=None, generated_samples_per_iteration=None)
    assert sample_counts(evaluate, 5) == {"actor_samples": None, "generated_samples": None}  # `binac evaluate`
    a = Attempt(
        problem_id="q", sample_idx=0, prompt_text="p", prompt_ids=[1], text="A: 1", token_ids=[1], logprobs=[0.0]
    )
    (row,) = trajectory_rows(meta, 3, ScoredBatch([a], [0.0]), split="eval", protocol="single")
    assert (row["actor_samples"], row["generated_samples"]) == (960, 2496)
    assert "actor_samples_per_iteration" not in row and row["parent_run_id"] is None


def test_old_shards_without_the_count_columns_still_read(tmp_path):
    """A shard written before the columns existed reads NULL in them, beside a new shard that has them."""
    import duckdb
    from trajectory_rows import trajectory_row

    from binac_core.store import storage

    ws = Workspace(tmp_path / "home")
    row = trajectory_row(
        run_id="new", method="binac", step=2, split="train", protocol="train", actor_samples=640, generated_samples=1664
    )
    storage.write_shard(ws, "new", "train", 2, [row])
    old = storage.shard_path(ws, "old", "train", 1)
    old.parent.mkdir(parents=True)
    con = duckdb.connect()
    con.execute(storage.schema_sql())
    con.execute("ALTER TABLE trajectory_rows DROP COLUMN actor_samples")
    con.execute("ALTER TABLE trajectory_rows DROP COLUMN generated_samples")
    con.execute(
        "INSERT INTO trajectory_rows BY NAME SELECT 'old' AS run_id, 'grpo' AS method, 'micro' AS preset, "
        "0 AS seed, 1 AS step, 'train' AS split, 'train' AS protocol, 'synthetic' AS benchmark, "
        "'q0' AS problem_id, 0 AS sample_idx, 0 AS feedback_idx, 0 AS round, 'p' AS prompt, 'a' AS attempt, "
        "0.0 AS attempt_reward, 1 AS attempt_tokens, TIMESTAMP '2025-01-01' AS created_at"
    )
    con.execute(f"COPY trajectory_rows TO {storage.sql_string(old)} (FORMAT parquet)")
    con.close()
    con = storage.connect(ws)
    try:
        got = con.execute("SELECT run_id, actor_samples, generated_samples FROM trajectories ORDER BY run_id")
        assert got.fetchall() == [("new", 640, 1664), ("old", None, None)]
    finally:
        con.close()


def test_the_run_table_shows_both_counts():
    from flows.train import _evals_table

    ev = {"eval/acc_single": 0.5}
    assert _evals_table({0: ev, 2: ev}, 48, 112).splitlines() == [
        "| iteration | actor training samples | generated samples | acc_single |",
        "| --- | --- | --- | --- |",
        "| 0 | 0 | 0 | 0.500 |",
        "| 2 | 96 | 224 | 0.500 |",
    ]


def test_the_comparison_report_states_both_counts(tmp_path):
    from binac_core.reports.report import build_report
    from binac_core.rl.methods import method_spec

    ev = {"eval/acc_single": 0.5, "eval/acc_feedback": 0.25}
    runs = [
        {
            "method": m,
            "seed": 0,
            "feedback_source": method_spec(m).eval_feedback,
            "samples_per_iteration": a,
            "generated_per_iteration": g,
            "evals": {0: ev, n: ev},
        }
        for m, a, g, n in (("grpo", 16, 16, 5), ("binac", 48, 112, 1), ("critic_only", 0, 80, 5))
    ]
    meta = {
        "preset": "micro",
        "seeds": [0],
        "budget": 80,
        "steps": 5,
        "n_eval": 2,
        "eval_samples": 1,
        "eval_temperature": 1.0,
        "shared_samples": [48],
        "common_samples": 48,
    }
    report = build_report(runs, meta, tmp_path)
    lines = report["text"].splitlines()
    assert "| iterations | actor training samples | generated samples |" in next(x for x in lines if "| method" in x)
    assert "| grpo | critic (base, frozen) | 50.0 | 25.0 | 5 | 80 | 80 |" in lines
    assert "| binac | critic (trained) | 50.0 | 25.0 | 1 | 48 | 112 |" in lines
    assert "| critic_only | critic (trained) | 50.0 | 25.0 | 5 | 0 | 400 |" in lines
    assert "Budget: 80 actor training samples per run" in report["text"]
    assert report["metrics"]["summary/binac/actor_samples"] == 48
    assert report["metrics"]["summary/binac/generated_samples"] == 112
    assert report["metrics"]["summary/critic_only/generated_samples"] == 400


def test_the_comparison_report_names_the_code_sandbox(tmp_path):
    from binac_core.reports.report import build_report, sandbox_line

    ev = {"eval/acc_single": 0.5}
    runs = [
        {
            "method": "grpo",
            "seed": s,
            "samples_per_iteration": 16,
            "generated_per_iteration": 16,
            "evals": {0: ev, 1: ev},
            "isolation": "rlimits",
        }
        for s in (0, 1)
    ]
    meta = {
        "preset": "llama1b-mbpp",
        "seeds": [0, 1],
        "budget": 16,
        "steps": 1,
        "n_eval": 2,
        "eval_samples": 1,
        "eval_temperature": 1.0,
        "grading_sandbox": "rlimits",
        "isolation": [r["isolation"] for r in runs],
    }
    line = next(x for x in build_report(runs, meta, tmp_path)["text"].splitlines() if x.startswith("Code sandbox"))
    assert "`grading.sandbox: rlimits`" in line and line.endswith("isolation used: `rlimits`.")
    assert sandbox_line("bwrap", ["none", None]).endswith("isolation used: `none`.")


def test_method_specs_are_built_by_keyword_and_name_one_feedback_source():
    from binac_core.rl.methods import METHODS, SPECS, FeedbackSource, MethodSpec

    assert METHODS == tuple(SPECS) and METHODS[0] == "grpo" and "binac_disc" in METHODS
    with pytest.raises(TypeError):
        MethodSpec("x", None, True, False, False, False)  # positional booleans are refused
    with pytest.raises(ValueError, match="CRITIC_TRAINED"):
        MethodSpec(name="x", feedback=FeedbackSource.CRITIC_BASE, train_critic=True)
    sources = {m: (s.feedback and s.feedback.value) for m, s in SPECS.items()}
    assert sources == {
        "grpo": None,
        "fixed_critic": "critic_frozen",
        "binac": "critic",
        "binac_lam0": "critic",
        "binac_after": "critic",
        "critic_only": "critic",
        "self_correct": "fixed",
        "oracle_critic": "oracle",
        "binac_disc": "critic",
    }
    assert SPECS["grpo"].eval_feedback is FeedbackSource.CRITIC_BASE
    assert [s.value for s in FeedbackSource if s.sampled] == ["critic", "critic_frozen", "critic_adapter"]
    assert {m: s.critic_reward.value for m, s in SPECS.items() if s.train_critic} == {
        "binac": "penalty",
        "binac_lam0": "r1",
        "binac_after": "after",
        "critic_only": "r1",
        "binac_disc": "penalty",
    }
