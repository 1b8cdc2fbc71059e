"""Stage 4: verifier rewards, from the benchmark's one grading function (the same one evaluation reports)."""

from __future__ import annotations

from prefect import task

from binac_core.foundation.files import StageFile, read_json
from binac_core.model.stage_io import RewardsFile, read_answers, write_scores
from binac_core.rl.episodes import score_with_errors
from tasks._common import CACHED, config


@task(name="score-rewards", **CACHED)
def score_rewards(cfg_d: dict, batch: StageFile, answers: StageFile, out_dir: str, name: str) -> RewardsFile:
    """`<name>.rewards.json`; for code benchmarks also `<name>.errors.json`, the execution results (for the critic)."""
    problems = {r["id"]: r for r in read_json(batch)}
    scores = score_with_errors(config(cfg_d).task.benchmark, problems, read_answers(answers))
    return write_scores(out_dir, name, scores)
