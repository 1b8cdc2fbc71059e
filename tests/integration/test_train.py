"""Smoke tests of `binac train` on the micro preset: MLflow points, trajectory rows, cache reuse, the base recorded by
its weights (a resume on other weights refused, a base named by its weights used where it is), bad input."""

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import MODEL_CACHE, binac_env, run_binac

from binac_core.foundation.config import load_config
from binac_core.foundation.workspace import Workspace
from binac_core.model.weights import PARAM
from binac_core.store import sqlrun, tracking


@pytest.fixture(scope="module")
def trained(tmp_path_factory, prefect_home):
    home = tmp_path_factory.mktemp("binac-home-train")
    env = binac_env(home, prefect_home)
    args = ["train", "--preset", "micro", "--method", "grpo", "--steps", "3", "--seed", "0"]
    first = run_binac(args, env)
    return {"home": home, "env": env, "args": args, "stdout": first.stdout}


def test_train_logs_three_points_and_stores_exactly_three_steps(trained):
    ws = Workspace(trained["home"])
    c = tracking.client(ws)
    runs = c.search_runs([tracking.experiment_id(c, ws)])
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert {run.data.tags[k] for k in ("method", "preset", "seed")} == {"grpo", "micro", "0"}
    assert [m.step for m in c.get_metric_history(run.info.run_id, "train/reward_first")] == [1, 2, 3]
    for key in ("train/actor_loss", "train/kl", "perf/step_s", "perf/gen_tokens_per_s"):
        assert len(c.get_metric_history(run.info.run_id, key)) == 3, key
    history = sorted((m.step, m.value) for m in c.get_metric_history(run.info.run_id, "train/actor_samples"))
    assert history == [(0, 0), (1, 16), (2, 32), (3, 48)]  # from step 0, 4 problems x 4 samples per iteration
    generated = sorted((m.step, m.value) for m in c.get_metric_history(run.info.run_id, "train/generated_samples"))
    assert generated == history, "grpo generates only the attempts it trains on"
    # Evaluations at iterations 0, 2 (eval_every) and 3 (the last), logged again with the actor samples as step.
    evals = sorted(m.step for m in c.get_metric_history(run.info.run_id, "eval/acc_single"))
    at_samples = c.get_metric_history(run.info.run_id, "eval_at_samples/acc_single")
    assert evals == [0, 2, 3] and sorted(m.step for m in at_samples) == [0, 32, 48]
    by_step = {m.step: m.value for m in c.get_metric_history(run.info.run_id, "eval/acc_single")}
    assert {m.step: m.value for m in at_samples} == {16 * k: v for k, v in by_step.items()}
    at_generated = c.get_metric_history(run.info.run_id, "eval_at_generated/acc_single")
    assert {m.step: m.value for m in at_generated} == {16 * k: v for k, v in by_step.items()}
    assert run.info.run_name == "grpo-micro-s0" and run.data.tags["budget_actor_samples"] == "48"
    steps = sqlrun.run(
        ws, "SELECT step, count(*) n FROM trajectories WHERE split = 'train' GROUP BY step ORDER BY step"
    )
    assert steps["step"].tolist() == [1, 2, 3]
    assert steps["n"].tolist() == [16, 16, 16]  # 4 problems x group of 4
    arts = {a.path for a in c.list_artifacts(run.info.run_id)}
    assert {"config.json", "adapters", "trajectories_sample.json"} <= arts
    assert "Trajectory store" in trained["stdout"] and "held-out acc_single" in trained["stdout"]


def test_rerun_is_served_from_cache_and_adds_no_rows(trained):
    ws = Workspace(trained["home"])
    before = sqlrun.run(ws, "SELECT count(*) n FROM trajectories")["n"][0]
    stage_files = sorted(p for p in (trained["home"] / "runs").rglob("*.json"))
    mtimes = [os.stat(p).st_mtime_ns for p in stage_files]
    run_binac(trained["args"], trained["env"])
    assert sqlrun.run(ws, "SELECT count(*) n FROM trajectories")["n"][0] == before
    assert [os.stat(p).st_mtime_ns for p in stage_files] == mtimes  # no stage re-ran
    c = tracking.client(ws)
    runs = c.search_runs([tracking.experiment_id(c, ws)])
    assert len(runs) == 1
    assert len(c.get_metric_history(runs[0].info.run_id, "train/reward_first")) == 3


def _base_folder() -> Path:
    """The micro base the module's runs use (in the session's shared model folder)."""
    return MODEL_CACHE / f"base-{load_config('micro').base_digest()}"


def test_the_run_records_its_base_by_the_sha256_of_its_weights(trained):
    ws = Workspace(trained["home"])
    c = tracking.client(ws)
    (run,) = c.search_runs([tracking.experiment_id(c, ws)])
    digest = hashlib.sha256((_base_folder() / "model.safetensors").read_bytes()).hexdigest()
    assert run.data.params[PARAM] == digest
    assert json.loads((_base_folder() / "base_meta.json").read_text())["weights_sha256"] == digest


def test_a_resume_on_a_base_rebuilt_with_other_weights_refuses_in_one_line_naming_both(trained, tmp_path):
    from safetensors.torch import load_file, save_file

    rebuilt = tmp_path / "models" / _base_folder().name  # the same config digest, built again elsewhere
    shutil.copytree(_base_folder(), rebuilt)
    tensors = load_file(rebuilt / "model.safetensors")
    name = sorted(tensors)[0]
    tensors[name] = tensors[name] + 1e-3
    save_file(tensors, rebuilt / "model.safetensors", metadata={"format": "pt"})
    old = hashlib.sha256((_base_folder() / "model.safetensors").read_bytes()).hexdigest()
    new = hashlib.sha256((rebuilt / "model.safetensors").read_bytes()).hexdigest()
    meta = json.loads((rebuilt / "base_meta.json").read_text())
    (rebuilt / "base_meta.json").write_text(json.dumps({**meta, "weights_sha256": new}))  # as its build records
    ws = Workspace(trained["home"])
    rows = sqlrun.run(ws, "SELECT count(*) n FROM trajectories")["n"][0]
    proc = run_binac(trained["args"], {**trained["env"], "BINAC_MODEL_CACHE": str(tmp_path / "models")}, check=False)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert (
        lines[0].startswith("error: run grpo-micro-s0 (") and f"ran on base weights sha256 {old}, but this " in lines[0]
    )
    assert f"this base's weights are {new}; a run resumes only on the weights it started with" in lines[0]
    assert sqlrun.run(ws, "SELECT count(*) n FROM trajectories")["n"][0] == rows
    c = tracking.client(ws)
    (run,) = c.search_runs([tracking.experiment_id(c, ws)])
    assert run.info.status == "FINISHED"  # the refused resume did not touch it


def test_a_base_named_by_its_weights_is_used_where_it_is_and_recorded(trained, tmp_path):
    digest = hashlib.sha256((_base_folder() / "model.safetensors").read_bytes()).hexdigest()
    env = {**trained["env"], "BINAC_MODEL_CACHE": str(tmp_path / "empty"), "BINAC_BASE_PATH": str(MODEL_CACHE)}
    args = [
        "train",
        "--preset",
        "micro",
        "--method",
        "grpo",
        "--steps",
        "1",
        "--set",
        f"model.base_weights={digest[:8]}",
    ]
    run_binac(args, env)
    assert not (tmp_path / "empty").exists() or not any((tmp_path / "empty").iterdir())  # nothing was built
    ws = Workspace(trained["home"])
    c = tracking.client(ws)
    (run,) = [r for r in c.search_runs([tracking.experiment_id(c, ws)]) if r.data.params["iterations"] == "1"]
    assert run.info.status == "FINISHED"
    assert run.data.params[PARAM] == digest and run.data.params["model.base_weights"] == digest[:8]
    missing = run_binac([*args[:-1], "model.base_weights=00000000"], env, check=False)
    lines = missing.stderr.strip().splitlines()
    assert missing.returncode == 2 and len(lines) == 1, missing.stderr
    assert lines[0].startswith(f"error: no base model with weights sha256 00000000 in {tmp_path / 'empty'}")


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--preset", "nope"], "unknown preset 'nope'"),
        (["--method", "ppo"], "unknown method 'ppo'"),
        (["--steps", "-2"], "--steps must be a positive integer (got -2)"),
        (["--set", "train.group_size=1"], "train.group_size"),
    ],
)
def test_bad_input_fails_fast_with_one_line_and_writes_nothing(tmp_path, prefect_home, args, needle):
    env = binac_env(tmp_path / "home", prefect_home)
    base = {"--preset": "micro", "--method": "grpo", "--steps": "2"}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        base[flag] = value
    argv = ["train"] + [x for kv in base.items() for x in kv]
    if "--set" in args:
        argv = ["train", "--preset", "micro", "--set", args[1]]
    proc = run_binac(argv, env, check=False)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], proc.stderr
    assert not (tmp_path / "home" / "mlflow.db").exists()
    assert not (tmp_path / "home" / "runs").exists()


def test_malformed_config_file_names_the_file(tmp_path, prefect_home):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed\n")
    proc = run_binac(["train", "--preset", str(bad)], binac_env(tmp_path / "h", prefect_home), check=False)
    assert proc.returncode == 2 and "malformed config file" in proc.stderr and str(bad) in proc.stderr
    bad.write_text("model:\n  hidden_size: -3\n")
    proc = run_binac(["train", "--preset", str(bad)], binac_env(tmp_path / "h", prefect_home), check=False)
    assert proc.returncode == 2 and "model.hidden_size" in proc.stderr


def test_one_binac_iteration_in_bfloat16_end_to_end(tmp_path, prefect_home):
    """The GPU presets' precision on the CPU: `binac train` runs one binac iteration of the micro preset in bfloat16
    with activation checkpointing and both KL terms (samples through transformers' `generate`, the updates in bf16
    with float32 LoRA weights), and stores and logs it like any run."""
    from conftest import binac_iteration_args

    home = tmp_path / "home"
    settings = ("model.dtype=bfloat16", "train.activation_checkpointing=true", "train.kl_coef=0.01")
    run_binac(binac_iteration_args("micro", *settings, "train.critic_kl_coef=0.01"), binac_env(home, prefect_home))
    ws = Workspace(home)
    c = tracking.client(ws)
    (run,) = c.search_runs([tracking.experiment_id(c, ws)])
    assert run.info.status == "FINISHED" and run.data.params["model.dtype"] == "bfloat16"
    assert run.data.params["train.activation_checkpointing"] == "True" and run.data.params["model.device"] == "cpu"
    for key in ("train/actor_loss", "train/critic_loss", "train/kl", "eval/acc_single"):
        assert key in run.data.metrics and run.data.metrics[key] == run.data.metrics[key], key  # present, not NaN
    rows = sqlrun.run(ws, "SELECT count(*) n, count(feedback) fb FROM trajectories WHERE split = 'train'")
    assert (rows.n[0], rows.fb[0]) == (4 * 4 * 2, 4 * 4 * 2)
