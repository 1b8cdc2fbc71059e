"""Stage 1: sample the iteration's problems and the actor's first attempts y0 ~ π_θ(·|x)."""

from __future__ import annotations

import functools
import time
from pathlib import Path

from prefect import task

from binac_core.foundation.files import StageFile, read_json, write_json
from binac_core.model.generation import SamplingParams
from binac_core.model.stage_io import AdapterRef, GeneratedFile, write_generated
from binac_core.rl.episodes import generate_attempts, sample_problems, stage_seed
from tasks._common import CACHED, config, loaded


@task(name="generate-rollouts", **CACHED)
def generate_rollouts(
    cfg_d: dict, base: StageFile, train: StageFile, actor: AdapterRef, seed: int, step: int, out_dir: str
) -> tuple[StageFile, GeneratedFile]:
    """(`batch.json`, `attempts.json`): the iteration's `batch_problems` problems drawn from the train split
    (`sample_problems`, deterministic in seed and step) and `group_size` attempts at each."""
    cfg = config(cfg_d)
    problems = [dict(r) for r in sample_problems(_split_rows(train), cfg.train.batch_problems, seed, step)]
    batch = write_json(Path(out_dir) / "batch.json", problems)
    _, backend = loaded(cfg_d, base, seed)
    g = cfg.generation
    params = SamplingParams(g.max_new_tokens, g.temperature, g.top_p, stage_seed(seed, step, "attempts"))
    t0 = time.time()
    attempts = generate_attempts(backend, cfg.task.benchmark, problems, actor, cfg.train.group_size, params)
    return batch, write_generated(Path(out_dir) / "attempts.json", attempts, t0)


@functools.lru_cache(maxsize=4)
def _split_rows(split: StageFile) -> tuple[dict, ...]:
    """A split's problems, parsed once per process and file content (the digest is part of the key): every
    iteration samples from the same few thousand rows. Callers get copies of the rows they keep."""
    return tuple(read_json(split))
