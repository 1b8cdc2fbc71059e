"""Stage 3: the actor answers again with the feedback in context, y1 ~ π_θ(·|x, y0, z)."""

from __future__ import annotations

import time
from pathlib import Path

from prefect import task

from binac_core.foundation.files import StageFile, read_json
from binac_core.model.generation import SamplingParams
from binac_core.model.stage_io import (
    AdapterRef,
    Attempt,
    Feedback,
    GeneratedFile,
    read_records,
    write_generated,
)
from binac_core.rl.episodes import generate_refinements, stage_seed
from tasks._common import CACHED, config, loaded


@task(name="refine", **CACHED)
def refine(
    cfg_d: dict,
    base: StageFile,
    batch: StageFile,
    attempts: StageFile,
    feedback: StageFile,
    actor: AdapterRef,
    seed: int,
    step: int,
    out_dir: str,
    name: str = "refined",
) -> GeneratedFile:
    """`name` separates the refinements under the current actor θ from the look-ahead ones under θ⁺."""
    cfg = config(cfg_d)
    _, backend = loaded(cfg_d, base, seed)
    g = cfg.generation
    params = SamplingParams(g.max_new_tokens, g.temperature, g.top_p, stage_seed(seed, step, name))
    problems = {r["id"]: r for r in read_json(batch)}
    t0 = time.time()
    out = generate_refinements(
        backend,
        cfg.task.benchmark,
        problems,
        read_records(Attempt, attempts),
        read_records(Feedback, feedback),
        actor,
        params,
    )
    return write_generated(Path(out_dir) / f"{name}.json", out, t0)
