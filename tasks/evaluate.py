"""Stage 7: held-out evaluation under the named protocols (single, feedback, gated@K, and for code benchmarks the
execution-assisted feedback_exec, gated_exec), with the feedback source the method was trained with."""

from __future__ import annotations

import re
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from binac_core import storage
from binac_core.evaluation import CRITIC_BASE, EXEC_PROTOCOLS, evaluate_protocols
from binac_core.files import read_json, write_json
from binac_core.records import trajectory_rows
from binac_core.workspace import workspace
from tasks._common import CACHED, config, loaded, ref


@task(name="evaluate", **CACHED)
def evaluate(
    cfg_d: dict, base: dict, problems: dict, actor: dict | None, critic: dict | None, seed: int, step: int,
    out_dir: str, protocols: tuple[str, ...] = ("single", "feedback", "gated"), fixed_feedback: str | None = None,
    feedback_source: str = CRITIC_BASE, oracle_feedback: bool = False,
) -> dict:
    """`fixed_feedback` (the self-correction text) or `oracle_feedback` (the rule-based oracle) replaces the critic;
    `feedback_source` names where the feedback comes from. All are inputs of the cache key, and so is the protocol
    list (the `_exec` variants)."""
    cfg = config(cfg_d)
    _, backend = loaded(cfg_d, base, seed)
    g = cfg.generation
    gen = {"temperature": g.eval_temperature, "top_p": g.top_p, "max_new_tokens": g.max_new_tokens,
           "feedback_max_new_tokens": g.feedback_max_new_tokens}
    res = evaluate_protocols(
        backend, cfg.task.benchmark, read_json(problems), ref(actor), ref(critic), g.eval_samples, gen, seed, step,
        tuple(protocols), cfg.train.gated_k, fixed_feedback, feedback_source, oracle_feedback,
    )
    # One file per feedback source: methods share their step-0 evaluation folder.
    slug = re.sub(r"[^a-z]+", "-", feedback_source.lower()).strip("-")
    return write_json(Path(out_dir) / f"eval-step{step:05d}-{slug}.json", res)


@task(name="store-eval-exec", cache_policy=NO_CACHE)
def store_eval_exec(meta: dict, step: int, result: dict) -> int:
    """The rows of the execution-assisted protocols (`feedback_exec`, `gated_exec`), one shard each, named by their
    protocol (`tasks.store.store_eval` writes single, feedback and gated). Returns the number of rows written."""
    res, ws, n = read_json(result), workspace(), 0
    for protocol in EXEC_PROTOCOLS:
        if protocol not in res:
            continue
        rounds = [res[protocol]] if protocol == "feedback_exec" else res[protocol]
        rows = []
        for k, rnd in enumerate(rounds, start=1):
            rows += trajectory_rows(meta, step, "eval", protocol, rnd["attempts"], rnd["r0"], rnd["feedback"],
                                    rnd["refined"], rnd["r1"], round_=k)
        storage.write_shard(ws, meta["run_id"], f"eval-{protocol}", step, rows)
        n += len(rows)
    return n
