"""`binac evaluate` end to end on CPU for each paper benchmark, with the micro base model: the path a real model
takes (data, prompts, generation, grading, MLflow, DuckDB). A micro model's accuracy is ~0; the records matter."""

import pytest
from conftest import run_binac

from binac_core.foundation.config import PRESET_DIR
from binac_core.foundation.workspace import Workspace
from binac_core.store import sqlrun, tracking


@pytest.fixture(scope="module")
def base_model(micro_base):
    return micro_base


@pytest.mark.parametrize("benchmark", ["math500", "mbpp", "gpqa_diamond", "gsm8k"])
def test_evaluate_feedback_protocol_records_everything(micro_compare, base_model, benchmark, tmp_path):
    env, ws = micro_compare["env"], Workspace(micro_compare["home"])
    preset = "micro"
    if benchmark == "mbpp":  # what is tested is the records, not the isolation (tests/grading/test_sandbox.py):
        preset = tmp_path / "micro-rlimits.yaml"  # the weaker setting, named, so no bubblewrap is needed here
        preset.write_text((PRESET_DIR / "micro.yaml").read_text() + "grading:\n  sandbox: rlimits\n")
    proc = run_binac(
        [
            "evaluate",
            "--benchmark",
            benchmark,
            "--model",
            str(base_model),
            "--protocol",
            "feedback",
            "--limit",
            "3",
            "--samples",
            "2",
            "--preset",
            str(preset),
        ],
        env,
    )
    assert "eval/acc_feedback" in proc.stdout
    c = tracking.client(ws)
    runs = [
        r
        for r in c.search_runs([tracking.experiment_id(c, ws)], filter_string=f"tags.benchmark = '{benchmark}'")
        if r.data.tags.get("method") == "eval"
    ]
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert {"eval/acc_single", "eval/acc_feedback"} <= set(run.data.metrics)
    assert (
        run.data.params["samples"] == "2" and "temperature" in run.data.params and "max_new_tokens" in run.data.params
    )
    df = sqlrun.run(
        ws,
        f"SELECT protocol, count(*) n, count(feedback) fb FROM trajectories "
        f"WHERE run_id = '{run.info.run_id}' AND split = 'eval' GROUP BY protocol ORDER BY protocol",
    )
    assert df.to_dict("list") == {"protocol": ["feedback", "single"], "n": [6, 6], "fb": [6, 0]}
    # every feedback has a verdict (a micro critic writes no verdict line: `none`), and the critic health is
    # logged and printed with its intervals
    verdicts = sqlrun.run(
        ws, f"SELECT feedback_verdict FROM trajectories WHERE run_id = '{run.info.run_id}' AND protocol = 'feedback'"
    ).feedback_verdict
    assert verdicts.notna().all() and set(verdicts) <= {"correct", "incorrect", "none"}
    assert "eval/critic/verdict_missing" in run.data.metrics
    assert "critic health, protocol feedback" in proc.stdout and "verdict_accuracy" in proc.stdout
    assert "(n=3 problems x 2 samples)" not in [ln for ln in proc.stdout.splitlines() if "critic/" in ln]


def test_bad_benchmark_and_missing_data_folder_fail_in_one_line(micro_compare, base_model, tmp_path):
    env = dict(micro_compare["env"])
    proc = run_binac(["evaluate", "--benchmark", "mathh", "--model", str(base_model)], env, 120, check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "unknown benchmark 'mathh'" in proc.stderr
    env["BINAC_DATA_DIR"] = str(tmp_path / "nowhere")
    proc = run_binac(
        ["evaluate", "--benchmark", "gsm8k", "--model", str(base_model), "--limit", "1"], env, 300, check=False
    )
    assert proc.returncode == 2 and str(tmp_path / "nowhere") in proc.stderr
    assert proc.stderr.strip().count("\n") == 0, proc.stderr


def test_execution_assisted_protocol_on_a_non_code_benchmark_fails_in_one_line(micro_compare, base_model):
    proc = run_binac(
        [
            "evaluate",
            "--benchmark",
            "gsm8k",
            "--model",
            str(base_model),
            "--protocol",
            "feedback",
            "--critic-sees-execution",
            "--limit",
            "1",
        ],
        dict(micro_compare["env"]),
        120,
        check=False,
    )
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "code benchmark" in proc.stderr


def test_the_same_evaluation_is_one_run_and_fresh_makes_a_new_one(micro_compare, base_model):
    """`binac evaluate` twice is one MLflow run whose rows are replaced, not duplicated; `--fresh` makes a second
    run (its own key, recomputed stages) and leaves the first's rows as they were."""
    env, ws = micro_compare["env"], Workspace(micro_compare["home"])
    args = [
        "evaluate",
        "--benchmark",
        "synthetic",
        "--model",
        str(base_model),
        "--preset",
        "micro",
        "--limit",
        "2",
        "--seed",
        "7",
    ]

    def runs():
        c = tracking.client(ws)
        return sorted(
            r.info.run_id
            for r in c.search_runs([tracking.experiment_id(c, ws)], filter_string="tags.benchmark = 'synthetic'")
            if r.data.tags.get("method") == "eval" and r.data.tags.get("seed") == "7"
        )

    def rows(run_id):
        return int(sqlrun.run(ws, f"SELECT count(*) n FROM trajectories WHERE run_id = '{run_id}'").n[0])

    run_binac(args, env)
    first = runs()
    run_binac(args, env)
    assert runs() == first and len(first) == 1
    assert rows(first[0]) == 2, "the second call replaced the first's rows"
    run_binac([*args, "--fresh"], env)
    both = runs()
    assert len(both) == 2 and first[0] in both
    assert [rows(r) for r in both] == [2, 2]
