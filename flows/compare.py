"""The comparison: every method × seed as a `train` subflow under one MLflow parent run, at equal actor-sample
budgets (the budget of `steps` GRPO iterations), then the report (table + plot) logged to the parent run."""

from __future__ import annotations

import hashlib

from prefect import flow

from binac_core import tracking
from binac_core.plans import plan_compare
from binac_core.provenance import stage_code_digest
from binac_core.report import build_report
from binac_core.workspace import workspace
from flows.train import train
from tasks.track import finish_run, start_run


@flow(name="compare")
def compare(
    preset: str = "micro", methods: list[str] = ("grpo", "fixed_critic", "binac"), seeds: list[int] = (0,),
    steps: int = 2, overrides: dict | None = None, fresh: str = "",
) -> dict:
    """Every method x seed as a `train` subflow under one MLflow parent run, then the report.

    Args:
        preset: preset name (tiny, micro, ...) or path of a preset YAML file.
        methods: the methods compared, each trained once per seed.
        seeds: run seeds.
        steps: the actor-sample budget, as many samples as `steps` GRPO iterations.
        overrides: config fields to override, {"section.field": value}.
        fresh: any new value recomputes every stage instead of reusing cached ones (new MLflow runs);
            `binac compare --fresh` sets one. An edit to library code recomputes without it.
    """
    methods, seeds = list(methods), list(seeds)
    cfg, budget = plan_compare(preset, methods, seeds, steps, overrides)
    key = hashlib.sha256(f"{cfg.digest()}|{methods}|{seeds}|{steps}|{stage_code_digest()}|{fresh}".encode()
                         ).hexdigest()[:12]
    params = {**cfg.flat(), "methods": ",".join(methods), "seeds": ",".join(map(str, seeds)),
              "steps": str(steps), "budget_actor_samples": str(budget)}
    tags = {"method": "compare", "preset": cfg.name, "kind": "compare"}
    parent = start_run(f"compare-{key}", f"compare-{cfg.name}", tags, params)
    try:
        runs = [train(preset, m, steps, s, overrides, budget, parent, key, fresh) for m in methods for s in seeds]
        ws = workspace()
        meta = {"preset": cfg.name, "seeds": seeds, "budget": budget, "steps": steps, "n_eval": cfg.task.n_test,
                "eval_samples": cfg.generation.eval_samples, "eval_temperature": cfg.generation.eval_temperature}
        report = build_report(runs, meta, ws.home / "reports" / f"compare-{key}")
        for f in report["files"]:
            tracking.log_path(ws, parent, f, "report")
        tracking.finish(ws, parent, "FINISHED")
    except BaseException:
        finish_run(parent, "FAILED")
        raise
    return {"parent_run_id": parent, "report_text": report["text"], "report_files": report["files"],
            "runs": [{k: r[k] for k in ("run_id", "method", "seed", "evals")} for r in runs]}
