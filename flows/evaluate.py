"""Evaluate any causal LM (a Hugging Face id or a local folder, e.g. the tiny base, or `smol`) with optional actor and
critic LoRA adapters on a benchmark, under one protocol, as a Prefect flow.

Logs `eval/acc_<protocol>` (pass@1: mean over problems of correct/N) with N, temperature and max tokens to one
MLflow run, with the base's weights hash (`base.weights_sha256`, `binac_core.model.weights`), and stores every
sample in `trajectories` with split='eval'. For the feedback protocols it also logs
the critic health measures (`eval/critic/*`) and returns them with their intervals (`critic_health`, read back
from the stored rows: `binac_core.reports.critic_health.stored_health`), which `binac evaluate` prints. Generation is cached like training's.

Feedback protocols (binac_core/rl/evaluation.py): `feedback`/`gated` show the critic the problem and the attempt only;
with `critic_sees_execution` (code benchmarks) they become `feedback_exec`/`gated_exec`, where the critic also
sees the execution result of the graded tests. `feedback="fixed"` gives the self-correction baseline's fixed
instruction instead of a critic. The feedback source is logged as the tag and param `eval_feedback_source`.

The same command twice is one run: the second finds the first's MLflow run by its key and its stages in the cache.
`fresh` (`binac evaluate --fresh`), any new value, makes a new run whose data and generation recompute (the base
model's build is kept, as `binac train --fresh` keeps it); an edit to library code does the same without it.
"""

from __future__ import annotations

import hashlib

from prefect import flow

from binac_core.foundation.provenance import stage_code_digest
from binac_core.foundation.workspace import workspace
from binac_core.grading.sandbox import accept
from binac_core.model.stage_io import AdapterRole
from binac_core.model.weights import PARAM
from binac_core.reports.critic_health import stored_health
from binac_core.rl.evaluation import eval_stages
from binac_core.rl.kinds import EvalProtocol, FeedbackSource
from binac_core.runs.bases import check_run
from binac_core.runs.plans import isolation_used, plan_evaluate
from binac_core.store.identity import RunIdentity
from tasks.evaluate import evaluate, store_eval_exec
from tasks.prepare import base_weights, build_base_model, prepare_data
from tasks.store import store_eval
from tasks.track import finish_run, log_metrics, start_run


@flow(name="evaluate")
def evaluate_model(
    benchmark: str = "gsm8k",
    model: str = "",
    actor_adapter: str | None = None,
    critic_adapter: str | None = None,
    protocol: str = EvalProtocol.SINGLE.value,
    samples: int = 1,
    limit: int = 20,
    preset: str = "tiny",
    temperature: float | None = None,
    max_new_tokens: int | None = None,
    seed: int = 0,
    critic_sees_execution: bool = False,
    feedback: str = "critic",
    fresh: str = "",
) -> dict:
    cfg, refs = plan_evaluate(
        benchmark, model, actor_adapter, critic_adapter, protocol, samples, limit, preset, temperature, max_new_tokens
    )
    accept(cfg.grading.sandbox)  # process-wide: the sandbox refuses an isolation the run does not accept
    critic_source = FeedbackSource.CRITIC_ADAPTER if critic_adapter else FeedbackSource.CRITIC_BASE
    stages, name, source = eval_stages(benchmark, protocol, critic_sees_execution, feedback, critic_source)
    cfg_d, ws = cfg.model_dump(mode="json"), workspace()
    key = hashlib.sha256(
        f"{cfg.digest()}|{refs}|{name}|{seed}|{source.value}|{stage_code_digest()}|{fresh}".encode()
    ).hexdigest()[:12]
    g = cfg.generation
    params = {
        **cfg.flat(),
        "protocol": name,
        "samples": str(samples),
        "limit": str(limit),
        "temperature": str(g.eval_temperature),
        "max_new_tokens": str(g.max_new_tokens),
        "actor_adapter": str(actor_adapter),
        "critic_adapter": str(critic_adapter),
        "eval_feedback_source": source.value,
        "grading.isolation": isolation_used(cfg),
        "code.fresh": fresh,
    }
    tags = {
        "method": "eval",
        "preset": cfg.name,
        "seed": str(seed),
        "benchmark": benchmark,
        "protocol": name,
        "eval_feedback_source": source.value,
    }
    base = build_base_model(cfg_d)  # a hub id or folder as it is; `smol` converted once
    params[PARAM] = base_weights(base)
    check_run(ws, f"eval-{key}", params[PARAM], f"evaluation run eval-{key}")  # the same command, another base
    run_id = start_run(f"eval-{key}", f"eval-{benchmark}-{name}", tags, params)
    run = RunIdentity(run_id=run_id, method="eval", preset=cfg.name, seed=seed, benchmark=benchmark)
    try:
        data = (prepare_data.with_options(refresh_cache=True) if fresh else prepare_data)(cfg_d, ("eval",))
        result = evaluate(
            cfg_d,
            base,
            data["eval"],
            actor=refs[AdapterRole.ACTOR],
            critic=refs[AdapterRole.CRITIC] if source.sampled else None,
            seed=seed,
            step=0,
            out_dir=str(ws.run_dir(f"eval-{key}")),
            protocols=stages,
            source=source.value,
        )
        metrics = store_eval(run, 0, result)
        store_eval_exec(run, 0, result)
        log_metrics(run_id, metrics, 0)
        finish_run(run_id)
    except BaseException:
        finish_run(run_id, "FAILED")
        raise
    return {
        "run_id": run_id,
        "metrics": metrics,
        "feedback_source": source.value,
        "critic_health": stored_health(ws, run_id),
    }
