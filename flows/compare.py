"""The comparison: every method × seed as a `train` subflow under one MLflow parent run, at equal actor TRAINING sample
budgets, then the report. The budget is the actor training samples of `steps` GRPO iterations (binac_core/rl/methods.py:
look-ahead refinements and critic feedback are not charged to it); the report (table + plot) is logged to the parent
run, its summary as the parent's metrics, and a closing Prefect markdown artifact tells where it is.

`equal="iterations"` (`binac demo`) runs every method for `steps` iterations instead. `parallel` > 1 trains up to
that many runs at once, each in its own process (spawned) attached to this flow's Prefect API
(the ephemeral server a lone `binac compare` starts, or the one `PREFECT_API_URL` names), the costliest first; the
train runs are then top-level flow runs of that API rather than subflows, and the report is the same."""

from __future__ import annotations

import math
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from functools import partial
from multiprocessing import get_context

from prefect import flow
from prefect.utilities.annotations import quote

from binac_core.errors import BinacError
from binac_core.foundation.provenance import stage_code_digest
from binac_core.foundation.workspace import workspace
from binac_core.reports.report import build_report
from binac_core.rl.methods import method_spec
from binac_core.runs.plans import compare_key, plan_compare, shared_eval_samples
from binac_core.store import tracking
from flows.reporting import closing_artifact, progress, refuse
from flows.train import train
from tasks.prepare import build_base_model
from tasks.track import finish_run, start_run


@flow(name="compare", flow_run_name="compare-{preset}-steps{steps}")
def compare(
    preset: str = "micro",
    methods: list[str] = ("grpo", "fixed_critic", "binac"),
    seeds: list[int] = (0,),
    steps: int = 5,
    overrides: dict | None = None,
    fresh: str = "",
    equal: str = "samples",
    parallel: int = 1,
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
        equal: "samples" (the budget above) or "iterations": every method runs `steps` iterations.
        parallel: runs trained at once, each in its own process (1: one after the other, in this process).
    """
    methods, seeds = list(methods), list(seeds)
    try:
        cfg, budget = plan_compare(preset, methods, seeds, steps, overrides, equal)
    except BinacError as exc:  # a deployment run with a bad parameter: the CLI's one line as its state message
        return refuse(exc)
    by_iterations = equal == "iterations"
    per_iteration = [method_spec(m).actor_train_samples_per_iteration(cfg) for m in methods]
    shared = None if by_iterations else shared_eval_samples(per_iteration, budget, cfg.train.eval_points)
    trained = [n for n in per_iteration if n > 0]
    key = compare_key(cfg, methods, seeds, steps, stage_code_digest(), fresh, equal)
    params = {
        **cfg.flat(),
        "methods": ",".join(methods),
        "seeds": ",".join(map(str, seeds)),
        "steps": str(steps),
        "equal": equal,
        "budget_actor_samples": str(budget),
    }
    tags = {"method": "compare", "preset": cfg.name, "kind": "compare", "budget_actor_samples": str(budget)}
    name = f"compare-{cfg.name}-{steps}iterations" if by_iterations else f"compare-{cfg.name}-{budget}samples"
    parent = start_run(f"compare-{key}", name, tags, params)
    try:
        ws = workspace()
        describe = partial(
            parent_description,
            cfg.name,
            methods,
            seeds,
            steps,
            equal,
            budget,
            ws.home / "reports" / f"compare-{key}" / "report.md",
        )
        tracking.set_tags(ws, parent, {NOTE: describe()})
        grid = [
            dict(
                preset=preset,
                method=m,
                steps=steps,
                seed=s,
                overrides=overrides,
                budget=None if by_iterations else budget,
                parent_run_id=parent,
                parent_key=key,
                fresh=fresh,
                shared_samples=shared,
            )
            for m in methods
            for s in seeds
        ]
        runs = _train_all(grid, parallel, cfg)
        ws = workspace()
        meta = {
            "preset": cfg.name,
            "seeds": seeds,
            "budget": budget,
            "steps": steps,
            "equal": equal,
            "eval_every": cfg.train.eval_every,
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
        tracking.set_tags(ws, parent, {NOTE: describe(runs, tracking.client(ws).get_run(parent).info.experiment_id)})
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


def _train_all(grid: list[dict], parallel: int, cfg) -> list[dict]:
    """The `train` results of every run of `grid` (its order), one after the other here (`parallel` 1), else
    up to `parallel` at once in spawned processes, the costliest first (generated samples per iteration: the
    sampling dominates a run), after the shared base is built here (once), with a progress line as each ends."""
    total, done = len(grid), {}

    def report(i: int, res: dict) -> None:
        done[i] = res
        final = res["evals"][max(res["evals"])]
        progress(
            f"compare: {len(done)}/{total} runs done ({res['method']} seed {res['seed']}: held-out acc_single "
            f"{final['eval/acc_single']:.3f})"
        )

    workers = min(parallel, total)
    if workers <= 1:
        for i, kwargs in enumerate(grid):
            report(i, train(**kwargs))
        return [done[i] for i in range(total)]
    # The base first, here: the runs share it, and processes that each found it missing would each pretrain it.
    build_base_model(quote(cfg.model_dump(mode="json")))
    cost = {i: method_spec(k["method"]).generated_samples_per_iteration(cfg) for i, k in enumerate(grid)}
    order = sorted(range(total), key=lambda i: -cost[i])
    # The children read Prefect's settings when they import it, before anything runs in them: they get the API's
    # address from the environment they are spawned with.
    before = os.environ.get("PREFECT_API_URL")
    os.environ["PREFECT_API_URL"] = _api_url()
    try:
        with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
            futures = {pool.submit(_train_run, grid[i]): i for i in order}
            for fut in as_completed(futures):
                report(futures[fut], fut.result())
    finally:
        if before is None:
            os.environ.pop("PREFECT_API_URL", None)
        else:
            os.environ["PREFECT_API_URL"] = before
    return [done[i] for i in range(total)]


def _train_run(kwargs: dict) -> dict:
    """One `train` flow run, in a process `_train_all` spawned."""
    return train(**kwargs)


def _api_url() -> str:
    """This process's Prefect API: the server `PREFECT_API_URL` names, else the ephemeral one it started."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return str(client.api_url).rstrip("/")


NOTE = "mlflow.note.content"
"""The MLflow tag its UI shows as a run's description."""
CURVES = ("eval/acc_single", "eval/acc_feedback", "eval/critic_hits_first_error")
"""The held-out metrics the parent's description links to, side by side over the children."""


def parent_description(
    preset, methods, seeds, steps, equal, budget, report, runs: list[dict] = (), experiment: str = ""
) -> str:
    """The comparison parent run's description (MLflow's note, markdown): what was compared, at which budget, where
    the report is; once the `runs` are done, the actor training samples each used and links that open the
    children's held-out curves side by side (MLflow's metric page, relative to the UI's address)."""
    axis = (
        f"{steps} iterations each (equal iterations)"
        if equal == "iterations"
        else f"an equal budget of {budget} actor training samples ({steps} GRPO iterations)"
    )
    lines = [f"Comparison on preset `{preset}`: {', '.join(methods)}; seed(s) {', '.join(map(str, seeds))}; {axis}."]
    if runs:
        ids = [r["run_id"] for r in runs]
        links = ", ".join(f"[{k}]({tracking.curves_link('', experiment, ids, [k])})" for k in CURVES)
        lines.append(f"The children's held-out curves side by side: {links}.")
    lines.append(f"Report: `{report}` (also this run's artifacts, `report/`).")
    if runs:
        used = ", ".join(
            f"{r['method']} s{r['seed']} {max(int(k) for k in r['evals']) * r['samples_per_iteration']}" for r in runs
        )
        lines.append(f"Actor training samples used: {used}.")
    return "\n\n".join(lines)
