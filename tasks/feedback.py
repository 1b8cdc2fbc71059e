"""Stage 2: critic feedback z ~ π_φ(·|x, y0), several per attempt (or written feedback: the fixed self-correction
text, the oracle's; `stage_functions.feedback_stage`)."""

from __future__ import annotations

import time
from pathlib import Path

from prefect import task

from binac_core.foundation.files import StageFile, read_json
from binac_core.model.stage_io import (
    AdapterRef,
    Attempt,
    GeneratedFile,
    RewardsFile,
    read_execution_results,
    read_records,
    write_generated,
)
from binac_core.rl import stage_functions
from binac_core.rl.methods import FeedbackSource
from tasks._common import CACHED, config, loaded


@task(name="sample-feedback", **CACHED)
def feedback_task(
    cfg_d: dict,
    base: StageFile,
    batch: StageFile,
    attempts: StageFile,
    first_rewards: RewardsFile,
    source: str,
    critic: AdapterRef | None,
    seed: int,
    step: int,
    out_dir: str,
) -> GeneratedFile:
    """`feedback.json`. `source`: a `FeedbackSource` identifier (`FeedbackSource.parse`); `first_rewards` (the
    attempts' rewards) names the execution results of code attempts, if any."""
    _, backend = loaded(cfg_d, base, seed)
    t0 = time.time()
    out = stage_functions.feedback_stage(
        backend,
        config(cfg_d),
        read_json(batch),
        read_records(Attempt, attempts),
        read_execution_results(first_rewards),
        FeedbackSource.parse(source),
        critic,
        seed,
        step,
    )
    return write_generated(Path(out_dir) / "feedback.json", out, t0)
