"""Stage 4: verifier rewards, from the benchmark's one grading function (the same one evaluation reports)."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from binac_core.episodes import score_with_errors
from binac_core.files import read_json, write_json
from tasks._common import CACHED, config


@task(name="score-rewards", **CACHED)
def score_rewards(cfg_d: dict, batch: dict, records: dict, out_dir: str, name: str) -> dict:
    """Rewards file; for code benchmarks the reference also names a file of execution errors (for the critic)."""
    benchmark = config(cfg_d).task.benchmark
    problems, recs = {r["id"]: r for r in read_json(batch)}, read_json(records)
    rewards, errors = score_with_errors(benchmark, problems, recs)
    ref = write_json(Path(out_dir) / f"{name}.rewards.json", rewards)
    if errors is not None:
        ref["errors"] = write_json(Path(out_dir) / f"{name}.errors.json", errors)
    return ref
