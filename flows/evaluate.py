"""Evaluate any causal LM (a Hugging Face id or a local folder, e.g. the tiny base) with optional actor and
critic LoRA adapters on a benchmark, under one protocol, as a Prefect flow.

Logs `eval/acc_<protocol>` (pass@1: mean over problems of correct/N) with N, temperature and max tokens to one
MLflow run, and stores every sample in `trajectories` with split='eval'. Generation is cached like training's.
"""

from __future__ import annotations

import hashlib

from prefect import flow

from binac_core.plans import PROTOCOL_STAGES, plan_evaluate
from binac_core.workspace import workspace
from tasks.evaluate import evaluate as evaluate_task
from tasks.prepare import prepare_data
from tasks.store import store_eval
from tasks.track import finish_run, log_metrics, start_run


@flow(name="evaluate")
def evaluate(
    benchmark: str = "gsm8k", model: str = "", actor_adapter: str | None = None, critic_adapter: str | None = None,
    protocol: str = "single", samples: int = 1, limit: int = 20, preset: str = "tiny",
    temperature: float | None = None, max_new_tokens: int | None = None, seed: int = 0,
) -> dict:
    cfg, refs = plan_evaluate(benchmark, model, actor_adapter, critic_adapter, protocol, samples, limit, preset,
                              temperature, max_new_tokens)
    cfg_d, ws = cfg.model_dump(mode="json"), workspace()
    key = hashlib.sha256(f"{cfg.digest()}|{refs}|{protocol}|{seed}".encode()).hexdigest()[:12]
    g = cfg.generation
    params = {**cfg.flat(), "protocol": protocol, "samples": str(samples), "limit": str(limit),
              "temperature": str(g.eval_temperature), "max_new_tokens": str(g.max_new_tokens),
              "actor_adapter": str(actor_adapter), "critic_adapter": str(critic_adapter)}
    tags = {"method": "eval", "preset": cfg.name, "seed": str(seed), "benchmark": benchmark, "protocol": protocol}
    run_id = start_run(f"eval-{key}", f"eval-{benchmark}-{protocol}", tags, params)
    meta = {"run_id": run_id, "method": "eval", "preset": cfg.name, "seed": seed, "benchmark": benchmark}
    try:
        base = {"path": cfg.model.hub_id, "digest": cfg.model.hub_id}
        data = prepare_data(cfg_d, ("eval",))
        result = evaluate_task(cfg_d, base, data["eval"], refs["actor"], refs["critic"], seed, 0,
                               str(ws.run_dir(f"eval-{key}")), PROTOCOL_STAGES[protocol])
        metrics = store_eval(meta, 0, result)
        log_metrics(run_id, metrics, 0)
        finish_run(run_id)
    except BaseException:
        finish_run(run_id, "FAILED")
        raise
    return {"run_id": run_id, "metrics": metrics}
