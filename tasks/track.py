"""Bookkeeping stages: the MLflow run and its per-iteration metrics (`binac_core.store.tracking`).

None of these are cached: each is idempotent instead (the run is found again by its key, a metric is logged
once per step), so re-running them is always safe and never duplicates."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from binac_core.foundation.workspace import workspace
from binac_core.model.stage_io import AdapterRef, AdapterRole
from binac_core.store import storage, tracking


@task(name="start-run", cache_policy=NO_CACHE)
def start_run(run_key: str, run_name: str, tags: dict, params: dict, parent_run_id: str | None = None) -> str:
    ws = workspace()
    storage.ensure_view(ws)
    return tracking.find_or_create_run(ws, run_key, run_name, tags, params, parent_run_id)


@task(name="log-metrics", cache_policy=NO_CACHE)
def log_metrics(run_id: str, metrics: dict, step: int) -> int:
    return tracking.log_metrics_once(workspace(), run_id, metrics, step)


@task(name="finish-run", cache_policy=NO_CACHE)
def finish_run(run_id: str, status: str = "FINISHED") -> None:
    tracking.finish(workspace(), run_id, status)


@task(name="finalize-run", cache_policy=NO_CACHE)
def finalize_run(run_id: str, cfg_d: dict, actor: AdapterRef, critic: AdapterRef) -> None:
    """Artifacts (config, final adapters, a sample of trajectories as a table), then mark the run FINISHED."""
    tracking.finalize_run(workspace(), run_id, cfg_d, {AdapterRole.ACTOR: actor.path, AdapterRole.CRITIC: critic.path})
