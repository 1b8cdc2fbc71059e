"""Stage 4: verifier rewards, from the benchmark's one grading function (the same one evaluation reports)."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from binac_core.episodes import score
from binac_core.files import read_json, write_json
from tasks._common import CACHED, config


@task(name="score-rewards", **CACHED)
def score_rewards(cfg_d: dict, batch: dict, records: dict, out_dir: str, name: str) -> dict:
    problems = {r["id"]: r for r in read_json(batch)}
    rewards = score(config(cfg_d).task.benchmark, problems, read_json(records))
    return write_json(Path(out_dir) / f"{name}.rewards.json", rewards)
