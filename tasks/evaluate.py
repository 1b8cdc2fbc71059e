"""Stage 7: held-out evaluation under the named protocols (single, feedback, gated@K)."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from binac_core.evaluation import evaluate_protocols
from binac_core.files import read_json, write_json
from tasks._common import CACHED, config, loaded, ref


@task(name="evaluate", **CACHED)
def evaluate(
    cfg_d: dict, base: dict, problems: dict, actor: dict | None, critic: dict | None, seed: int, step: int,
    out_dir: str, protocols: tuple[str, ...] = ("single", "feedback", "gated"),
) -> dict:
    cfg = config(cfg_d)
    _, backend = loaded(cfg_d, base, seed)
    g = cfg.generation
    gen = {"temperature": g.eval_temperature, "top_p": g.top_p, "max_new_tokens": g.max_new_tokens,
           "feedback_max_new_tokens": g.feedback_max_new_tokens}
    res = evaluate_protocols(
        backend, cfg.task.benchmark, read_json(problems), ref(actor), ref(critic), g.eval_samples, gen, seed, step,
        tuple(protocols), cfg.train.gated_k,
    )
    return write_json(Path(out_dir) / f"eval-step{step:05d}.json", res)
