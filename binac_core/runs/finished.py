"""A comparison the store already holds finished (`binac demo` run again), found by its key on this stage code. A rerun
then prints from the stored rows instead of replaying every cached stage through Prefect."""

from __future__ import annotations

from binac_core.foundation.provenance import stage_code_digest
from binac_core.foundation.workspace import Workspace
from binac_core.runs.plans import compare_key
from binac_core.store import tracking


def finished_comparison(
    ws: Workspace, cfg, methods: list[str], seeds: list[int], steps: int, fresh: str
) -> dict | None:
    """The comparison `binac demo` would run, when the store holds it finished (its parent run, found by its key on
    this stage code, FINISHED with a FINISHED child run per method and seed, and its report on disk): what
    `flows.compare.compare` returns of it ({"parent_run_id", "report_files", "runs": [{"method", "seed",
    "run_id"}]}); else None. A rerun then reads the stored rows instead of replaying every cached stage."""
    if fresh:
        return None
    key = compare_key(cfg, methods, seeds, steps, stage_code_digest(), fresh, "iterations")
    report = ws.home / "reports" / f"compare-{key}" / "report.md"
    if not report.is_file():
        return None
    c = tracking.client(ws)
    exp = c.get_experiment_by_name(tracking.EXPERIMENT)
    if exp is None:
        return None
    found = c.search_runs([exp.experiment_id], f"tags.`binac.run_key` = 'compare-{key}'", max_results=1)
    if not found or found[0].info.status != "FINISHED":
        return None
    parent = found[0].info.run_id
    children = c.search_runs([exp.experiment_id], f"tags.mlflow.parentRunId = '{parent}'")
    runs = [
        {"method": r.data.tags.get("method"), "seed": int(r.data.tags.get("seed", -1)), "run_id": r.info.run_id}
        for r in children
        if r.info.status == "FINISHED"
    ]
    if sorted((r["method"], r["seed"]) for r in runs) != sorted((m, s) for m in methods for s in seeds):
        return None
    return {"parent_run_id": parent, "report_files": [str(report)], "runs": runs}
