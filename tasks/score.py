"""Stage 4: verifier rewards, from the benchmark's one grading function (the same one evaluation reports;
`stage_functions.score_stage`)."""

from __future__ import annotations

from prefect import task

from binac_core.foundation.files import StageFile, read_json
from binac_core.model.stage_io import RewardsFile, read_answers, write_scores
from binac_core.rl import stage_functions
from tasks._common import CACHED, config


@task(name="score-rewards", **CACHED)
def score_task(cfg_d: dict, batch: StageFile, answers: StageFile, out_dir: str, name: str) -> RewardsFile:
    """`<name>.rewards.json`; for code benchmarks also `<name>.errors.json`, the execution results (for the critic)."""
    scores = stage_functions.score_stage(config(cfg_d), read_json(batch), read_answers(answers))
    return write_scores(out_dir, name, scores)
