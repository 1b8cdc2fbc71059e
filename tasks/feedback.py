"""Stage 2: critic feedback z ~ π_φ(·|x, y0), several per attempt (or the fixed self-correction text)."""

from __future__ import annotations

import time
from pathlib import Path

from prefect import task

from binac_core.episodes import sample_feedback as sample
from binac_core.episodes import stage_seed
from binac_core.files import read_json, write_json
from binac_core.generation import SamplingParams, adapter_ref, generation_perf
from tasks._common import CACHED, config, loaded


@task(name="sample-feedback", **CACHED)
def sample_feedback(
    cfg_d: dict, base: dict, batch: dict, attempts: dict, critic: dict | None, fixed_text: str | None,
    seed: int, step: int, out_dir: str, r0: dict | None = None, oracle: bool = False,
) -> dict:
    """`r0` (the attempts' reward reference) carries the execution errors of code attempts, if any. `fixed_text`
    or `oracle` (the rule-based oracle, synthetic only) writes the K feedbacks instead of the critic."""
    cfg = config(cfg_d)
    _, backend = loaded(cfg_d, base, seed)
    g = cfg.generation
    params = SamplingParams(g.feedback_max_new_tokens, g.temperature, g.top_p, stage_seed(seed, step, "feedback"))
    problems = {r["id"]: r for r in read_json(batch)}
    t0 = time.time()
    out = sample(
        backend, cfg.task.benchmark, problems, read_json(attempts), adapter_ref(critic), cfg.train.critic_group_size,
        params, fixed_text, read_json(r0["errors"]) if r0 and "errors" in r0 else None, oracle,
    )
    return write_json(Path(out_dir) / "feedback.json", out) | generation_perf(out, t0)
