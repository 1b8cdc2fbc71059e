"""The comparison: every method × seed as a `train` subflow under one MLflow parent run, at equal actor TRAINING
sample budgets (the actor training samples of `steps` GRPO iterations; binac_core/rl/methods.py: look-ahead
refinements and critic feedback are not charged to it), then the report (table + plot) logged to the parent run, its
summary logged as the parent's metrics, and a closing Prefect markdown artifact."""

from __future__ import annotations

import math

from prefect import flow

from binac_core.errors import BinacError
from binac_core.foundation.provenance import stage_code_digest
from binac_core.foundation.workspace import workspace
from binac_core.reports.report import build_report
from binac_core.rl.methods import method_spec
from binac_core.runs.plans import compare_key, plan_compare, shared_eval_samples
from binac_core.store import tracking
from flows.reporting import closing_artifact, progress, refuse
from flows.train import train
from tasks.track import finish_run, start_run


@flow(name="compare", flow_run_name="compare-{preset}-steps{steps}")
def compare(
    preset: str = "micro",
    methods: list[str] = ("grpo", "fixed_critic", "binac"),
    seeds: list[int] = (0,),
    steps: int = 5,
    overrides: dict | None = None,
    fresh: str = "",
) -> dict:
    """Every method x seed as a `train` subflow under one MLflow parent run, then the report.

    Args:
        preset: preset name (tiny, micro, ...) or path of a preset YAML file.
        methods: the methods compared, each trained once per seed.
        seeds: run seeds.
        steps: the actor training sample budget, as many as `steps` GRPO iterations; it must cover one
            iteration of every method. critic_only, which trains no actor, runs `steps` iterations (GRPO's).
        overrides: config fields to override, {"section.field": value}.
        fresh: any new value recomputes every stage instead of reusing cached ones (new MLflow runs);
            `binac compare --fresh` sets one. An edit to library code recomputes without it.
    """
    methods, seeds = list(methods), list(seeds)
    try:
        cfg, budget = plan_compare(preset, methods, seeds, steps, overrides)
    except BinacError as exc:  # a deployment run with a bad parameter: the CLI's one line as its state message
        return refuse(exc)
    per_iteration = [method_spec(m).actor_train_samples_per_iteration(cfg) for m in methods]
    shared = shared_eval_samples(per_iteration, budget, cfg.train.eval_points)
    trained = [n for n in per_iteration if n > 0]
    key = compare_key(cfg, methods, seeds, steps, stage_code_digest(), fresh)
    params = {
        **cfg.flat(),
        "methods": ",".join(methods),
        "seeds": ",".join(map(str, seeds)),
        "steps": str(steps),
        "budget_actor_samples": str(budget),
    }
    tags = {"method": "compare", "preset": cfg.name, "kind": "compare", "budget_actor_samples": str(budget)}
    parent = start_run(f"compare-{key}", f"compare-{cfg.name}-{budget}samples", tags, params)
    try:
        runs, total = [], len(methods) * len(seeds)
        for m in methods:
            for s in seeds:
                runs.append(
                    train(
                        preset=preset,
                        method=m,
                        steps=steps,
                        seed=s,
                        overrides=overrides,
                        budget=budget,
                        parent_run_id=parent,
                        parent_key=key,
                        fresh=fresh,
                        shared_samples=shared,
                    )
                )
                final = runs[-1]["evals"][max(runs[-1]["evals"])]
                progress(
                    f"compare: {len(runs)}/{total} runs done ({m} seed {s}: held-out acc_single "
                    f"{final['eval/acc_single']:.3f})"
                )
        ws = workspace()
        meta = {
            "preset": cfg.name,
            "seeds": seeds,
            "budget": budget,
            "steps": steps,
            "n_eval": cfg.task.n_test,
            "eval_samples": cfg.generation.eval_samples,
            "eval_temperature": cfg.generation.eval_temperature,
            "shared_samples": shared,
            "common_samples": math.lcm(*trained) if trained else 0,
            "grading_sandbox": cfg.grading.sandbox,
            "isolation": [r["isolation"] for r in runs],
        }
        report = build_report(runs, meta, ws.home / "reports" / f"compare-{key}")
        for f in report["files"]:
            tracking.log_path(ws, parent, f, "report")
        tracking.log_metrics_once(ws, parent, report["metrics"], 0)
        tracking.finish(ws, parent, "FINISHED")
    except BaseException:
        finish_run(parent, "FAILED")
        raise
    closing_artifact(
        f"compare-{cfg.name}",
        f"compare on {cfg.name}: {', '.join(methods)}; seeds {seeds}",
        _table(report["text"]),
        parent,
        report["files"][0],
    )
    return {
        "parent_run_id": parent,
        "report_text": report["text"],
        "report_files": report["files"],
        "runs": [{k: r[k] for k in ("run_id", "method", "seed", "evals")} for r in runs],
    }


def _table(report_text: str) -> str:
    """The report's accuracy table (its markdown lines starting with `|`)."""
    return "\n".join(line for line in report_text.splitlines() if line.startswith("|"))
