"""Stage 2: critic feedback z ~ π_φ(·|x, y0), several per attempt (or written feedback: the fixed self-correction
text, the oracle's)."""

from __future__ import annotations

import time
from pathlib import Path

from prefect import task

from binac_core.foundation.files import StageFile, read_json
from binac_core.model import stage_io
from binac_core.model.generation import SamplingParams
from binac_core.model.stage_io import AdapterRef, GeneratedFile, RewardsFile
from binac_core.rl.episodes import sample_feedback as sample
from binac_core.rl.episodes import stage_seed
from binac_core.rl.methods import FeedbackSource
from tasks._common import CACHED, config, loaded


@task(name="sample-feedback", **CACHED)
def sample_feedback(
    cfg_d: dict,
    base: StageFile,
    batch: StageFile,
    attempts: StageFile,
    source: str,
    critic: AdapterRef | None,
    seed: int,
    step: int,
    out_dir: str,
    first_rewards: RewardsFile | None = None,
) -> GeneratedFile:
    """`source`: a `FeedbackSource` identifier (`FeedbackSource.parse`; a critic's: sampled with `critic`; else
    written). `first_rewards` (the attempts' rewards) names the execution results of code attempts, if any."""
    cfg = config(cfg_d)
    _, backend = loaded(cfg_d, base, seed)
    g = cfg.generation
    params = SamplingParams(g.feedback_max_new_tokens, g.temperature, g.top_p, stage_seed(seed, step, "feedback"))
    problems = {r["id"]: r for r in read_json(batch)}
    t0 = time.time()
    out = sample(
        backend,
        cfg.task.benchmark,
        problems,
        stage_io.read_records(stage_io.Attempt, attempts),
        FeedbackSource.parse(source),
        critic,
        cfg.train.critic_group_size,
        params,
        execution_results=stage_io.read_execution_results(first_rewards),
        verdict=cfg.critic.verdict,
    )
    return stage_io.write_generated(Path(out_dir) / "feedback.json", out, t0)
