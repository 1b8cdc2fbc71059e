"""Stage 1: sample the iteration's problems and the actor's first attempts y0 ~ π_θ(·|x)."""

from __future__ import annotations

import time
from pathlib import Path

from prefect import task

from binac_core.episodes import generate_attempts, sample_problems, stage_seed
from binac_core.files import StageFile, read_json, write_json
from binac_core.generation import SamplingParams
from binac_core.stage_io import AdapterRef, GeneratedFile, write_generated
from tasks._common import CACHED, config, loaded


@task(name="sample-batch", **CACHED)
def sample_batch(cfg_d: dict, train: StageFile, seed: int, step: int, out_dir: str) -> StageFile:
    cfg = config(cfg_d)
    rows = sample_problems(read_json(train), cfg.train.batch_problems, seed, step)
    return write_json(Path(out_dir) / "batch.json", rows)


@task(name="generate-rollouts", **CACHED)
def generate_rollouts(
    cfg_d: dict, base: StageFile, batch: StageFile, actor: AdapterRef, seed: int, step: int, out_dir: str
) -> GeneratedFile:
    cfg = config(cfg_d)
    _, backend = loaded(cfg_d, base, seed)
    g = cfg.generation
    params = SamplingParams(g.max_new_tokens, g.temperature, g.top_p, stage_seed(seed, step, "attempts"))
    t0 = time.time()
    attempts = generate_attempts(backend, cfg.task.benchmark, read_json(batch), actor, cfg.train.group_size, params)
    return write_generated(Path(out_dir) / "attempts.json", attempts, t0)
