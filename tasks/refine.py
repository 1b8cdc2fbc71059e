"""Stage 3: the actor answers again with the feedback in context, y1 ~ π_θ(·|x, y0, z)
(`stage_functions.refine_stage`)."""

from __future__ import annotations

import time
from pathlib import Path

from prefect import task

from binac_core.foundation.files import StageFile, read_json
from binac_core.model.stage_io import AdapterRef, Attempt, Feedback, GeneratedFile, read_records, write_generated
from binac_core.rl import stage_functions
from tasks._common import CACHED, config, loaded


@task(name="refine", **CACHED)
def refine_task(
    cfg_d: dict,
    base: StageFile,
    batch: StageFile,
    attempts: StageFile,
    feedback: StageFile,
    actor: AdapterRef,
    seed: int,
    step: int,
    out_dir: str,
    name: str,
) -> GeneratedFile:
    """`<name>.json`: `name` separates the refinements under the current actor θ (refined) from the look-ahead
    ones under θ⁺ (lookahead)."""
    _, backend = loaded(cfg_d, base, seed)
    t0 = time.time()
    out = stage_functions.refine_stage(
        backend,
        config(cfg_d),
        read_json(batch),
        read_records(Attempt, attempts),
        read_records(Feedback, feedback),
        actor,
        seed,
        step,
        name,
    )
    return write_generated(Path(out_dir) / f"{name}.json", out, t0)
