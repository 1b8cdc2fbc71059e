"""Bookkeeping stages: the MLflow run and its per-iteration metrics (`binac_core.store.tracking`).

None of these are cached: each is idempotent instead (the run is found again by its key, a metric is logged
once per step), so re-running them is always safe and never duplicates."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from binac_core.foundation import stage_objects
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
    folders = {AdapterRole.ACTOR: adapter_folder(actor), AdapterRole.CRITIC: adapter_folder(critic)}
    tracking.finalize_run(workspace(), run_id, cfg_d, folders)


def adapter_folder(ref: AdapterRef) -> str:
    """The adapter's folder on this host: with an object store, one another host wrote (a cached stage's, such as
    the initial critic a method never trains) is fetched by its key first, digest checked; without one, its path."""
    if stage_objects.enabled():
        return str(stage_objects.get_folder(ref.path, ref.key, ref.digest))
    return ref.path
