"""Smoke test of the benchmark harness (`bench/run.py`): every measurement runs once on a shrunken micro preset
and the results table has all its rows. No timing assertions: speed is measured by `make bench`, never asserted
in tests. The child processes overlap the in-process measurements here (`overlap_children`), which distorts
every figure and saves most of the wall time."""

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # `bench` is a folder of the repository, not an installed package
    sys.path.insert(0, str(REPO))

from bench.run import markdown, run_bench  # noqa: E402
from binac_core.foundation.config import load_config  # noqa: E402

SMALL = {
    "model.pretrain_steps": 2,
    "model.pretrain_examples": 64,
    "task.n_train": 16,
    "train.batch_problems": 2,
    "train.group_size": 2,
    "generation.max_new_tokens": 8,
}
"""micro with a 2-step pretraining and 2×2 completions of 8 tokens: the base model builds in seconds."""

ROWS = [
    "grpo_iter",
    "binac_save",
    "pipeline_iter",
    "gen_batch",
    "gen_lora",
    "gen_loop",
    "prefect_miss",
    "prefect_hit",
    "prefect_flow",
    "prefect_start",
    "import",
    "setup",
    "first_iter",
    "rss_peak",
    "rss_growth",
]


@pytest.mark.integration
def test_bench_harness_smoke(tmp_path):
    cfg = load_config("micro", SMALL)
    report = run_bench(
        cfg,
        repeats=1,
        base_dir=tmp_path / "base",
        calls=2,
        overlap_children=True,
        pipeline_iterations=4,
        log=lambda msg: None,
    )

    assert [r.key for r in report.rows] == ROWS
    failed = {r.key: r.note for r in report.rows if r.a is None}
    assert not failed, failed
    trl = next(r for r in report.rows if r.key == "grpo_iter")
    assert trl.b is not None, report.notes  # TRL's GRPOTrainer ran (it is in the dev extra)

    text = markdown(report)
    assert text.split("\n## ")[0].count("\n| ") == len(ROWS) + 2  # header, separator, one line per row
    for row in report.rows:
        assert row.what in text
    for field in ("Load average", "Preset `micro`", "repeats", "Not matched"):
        assert field in text
    # the pipeline's per-task breakdown: every task of a grpo iteration, once per iteration
    section = text.split("## Where a pipeline iteration goes")[1]
    assert "### binac" in section, section  # a failed child's line says why (bench/pipeline.py markdown)
    grpo, binac = section.split("### binac")
    for task in ("generate-rollouts", "score-rewards", "update-actor", "store-train-step"):
        assert f"| {task} | 1 |" in grpo and f"| {task} | " in binac
    for task in ("sample-feedback", "refine", "update-critic"):
        assert f"| {task} | " in binac


def test_bench_table_keeps_rows_when_measurements_fail():
    """A failed TRL run, Prefect child or memory child leaves its rows in the table, empty, with the error text."""
    from bench.common import grpo_rows
    from bench.run import memory_rows, pipeline_rows, prefect_rows, table, throughput_rows

    cfg = load_config("micro")
    g = {
        "binac": [1.0, 2.0],
        "trl": [],
        "trl_error": "ValueError: no CPU today",
        "binac_tokens": [10.0],
        "trl_tokens": [],
        "save": [0.1],
        "layout_note": "",
    }
    rows, notes = grpo_rows(g, cfg)
    rows += pipeline_rows({"error": "BinacError: no store today"}, cfg)
    tp = {
        k: [100.0, 200.0]
        for k in (
            "batch8_actor",
            "batch64_actor",
            "batch64_base",
            "batch64_actor_generate",
            "run_threads",
            "other_threads",
        )
    }
    rows += throughput_rows(tp, threads=1)
    rows += prefect_rows({"error": "RuntimeError: Timed out"}, 1.5)
    rows += memory_rows(
        {"error": "exit 1, no result"},
        {"import_s": 1.0, "setup_s": 1.0, "first_iter_s": 1.0, "rss_before_mib": 100.0, "rss_peak_mib": 150.0},
    )
    keys = [r.key for r in rows]
    assert keys == ROWS[:6] + ["gen_threads"] + ROWS[6:]
    by_key = {r.key: r for r in rows}
    assert by_key["grpo_iter"].b is None and "no CPU today" in by_key["grpo_iter"].note
    assert any("no CPU today" in n for n in notes)
    assert "Timed out" in by_key["prefect_start"].note and by_key["prefect_miss"].b is None
    assert by_key["rss_growth"].b == 50.0 and by_key["rss_growth"].a is None
    assert "binac failed" in by_key["rss_peak"].note
    assert by_key["pipeline_iter"].b is None and "no store today" in by_key["pipeline_iter"].note
    assert table(rows).count("\n") == len(rows) + 1


def test_pipeline_child_keeps_its_cache_records_in_its_own_home(tmp_path, monkeypatch):
    """A pipeline child keeps Prefect's results and cache records under its own fresh `$BINAC_HOME`, even where the
    parent's environment names a storage (a test that ran `flows.cli.main` in-process earlier in the same pytest
    worker leaves one set: `_env_defaults` uses setdefault). With one storage for all children, the binac child got
    the grpo child's cached `build-base-model` result (its key is the config alone): a model folder inside that
    child's removed temp dir, which transformers took for a hub repo id ("Repo id must be in the form ...")."""
    import os

    from bench import pipeline

    monkeypatch.setattr(os, "environ", dict(os.environ))  # the child's settings stay in this test
    leaked = str(tmp_path / "parent-prefect")
    for key in pipeline.STORAGE_ENV:
        os.environ[key] = leaked
    seen = {}

    def run(preset, iterations, method):
        home = Path(os.environ["BINAC_HOME"])
        seen.update(
            home=home,
            storage={k: os.environ[k] for k in pipeline.STORAGE_ENV},
            base=(Path(os.environ["BINAC_MODEL_CACHE"]) / f"base-{load_config(preset).base_digest()}").resolve(),
        )
        return {}

    monkeypatch.setattr(pipeline, "_run", run)
    base = tmp_path / "base"
    base.mkdir()
    pipeline.child(pipeline.preset_file(load_config("micro", SMALL), tmp_path), base, 1, 4, "binac")

    assert seen["storage"] == {k: str(seen["home"].resolve() / "prefect") for k in pipeline.STORAGE_ENV}
    assert seen["base"] == base.resolve()  # the flow finds the bench's base through the model cache
