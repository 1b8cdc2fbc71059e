"""Stage 1: sample the iteration's problems and the actor's first attempts y0 ~ π_θ(·|x)
(`stage_functions.rollout_stage`)."""

from __future__ import annotations

import functools
import time
from pathlib import Path

from prefect import task

from binac_core.foundation.files import StageFile, read_json, write_json
from binac_core.model.stage_io import AdapterRef, GeneratedFile, write_generated
from binac_core.rl import stage_functions
from tasks._common import CACHED, config, loaded


@task(name="generate-rollouts", **CACHED)
def rollout_task(
    cfg_d: dict, base: StageFile, train: StageFile, actor: AdapterRef, seed: int, step: int, out_dir: str
) -> tuple[StageFile, GeneratedFile]:
    """(`batch.json`, `attempts.json`): the rollout stage on the train split's rows."""
    _, backend = loaded(cfg_d, base, seed)
    t0 = time.time()
    problems, attempts = stage_functions.rollout_stage(backend, config(cfg_d), _split_rows(train), actor, seed, step)
    batch = write_json(Path(out_dir) / "batch.json", problems)
    return batch, write_generated(Path(out_dir) / "attempts.json", attempts, t0)


@functools.lru_cache(maxsize=4)
def _split_rows(split: StageFile) -> tuple[dict, ...]:
    """A split's problems, parsed once per process and file content (the digest is part of the key): every
    iteration samples from the same few thousand rows. The stage draws copies of the rows it keeps."""
    return tuple(read_json(split))
