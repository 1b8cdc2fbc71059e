"""MLflow bookkeeping: one run per training run, found again by its run key. A re-run or a resumed run continues the
same MLflow run instead of creating a second one; metrics are logged once per (key, step)."""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from pathlib import Path

import mlflow
from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from binac_core.foundation.workspace import Workspace

EXPERIMENT = "binac"


def client(ws: Workspace) -> MlflowClient:
    before = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(ws.mlflow_uri)  # for the fluent mlflow.* calls (log_table)
    if before is None:
        # mlflow also exports the URI to the environment, where Workspace.mlflow_uri would then take it for the
        # user's choice: every later workspace of this process (and its subprocesses) would use this store.
        os.environ.pop("MLFLOW_TRACKING_URI", None)
    if not ws.mlflow_uri.startswith("sqlite:"):
        return MlflowClient(ws.mlflow_uri)
    # The first client of a sqlite store creates and migrates its tables; two processes doing that at once (two
    # runs started together on a fresh $BINAC_HOME) fail ("table _alembic_tmp_tags already exists"). So every
    # sqlite client is made under a lock; after the first, mlflow's own cache of stores per URI makes that a few
    # microseconds (binac keeps no record of which stores this process has opened).
    import fcntl

    with open(ws.home / ".mlflow-init.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return MlflowClient(ws.mlflow_uri)


KIND_TAG, KIND = "mlflow.experimentKind", "custom_model_development"
"""The experiment's kind as MLflow 3 records it: a model-training experiment (runs, metrics), not a GenAI one."""


def ui_link(ui: str, experiment: str, run_id: str | None = None) -> str:
    """A link into the MLflow UI at `ui` that opens the experiment's runs table (or the run's page) in the UI's
    "Model training" mode. MLflow 3.17's UI ignores the kind tag for this: it opens every experiment in GenAI
    mode (an empty traces overview) unless the address carries `workflowType=machine_learning` or the user has
    clicked "Model training" (top left), so every link binac prints carries it."""
    path = f"/#/experiments/{experiment}" + (f"/runs/{run_id}" if run_id else "")
    return f"{ui.rstrip('/')}{path}?workflowType=machine_learning"


def curves_link(ui: str, experiment: str, run_ids: list[str], keys: list[str]) -> str:
    """A link into the MLflow UI at `ui` that opens the metric page of `keys` over the runs `run_ids` (one line per
    run and key, x = step): the children of a comparison side by side without expanding their parent in the
    experiment's chart view (which shows an empty section until the parent row is expanded)."""
    from urllib.parse import quote

    query = (
        f"runs={quote(json.dumps(run_ids))}&metric={quote(json.dumps(keys[0]))}"
        f"&experiments={quote(json.dumps([experiment]))}&plot_metric_keys={quote(json.dumps(keys))}"
        "&plot_layout={}&x_axis=step&y_axis_scale=linear&line_smoothness=1&show_point=true"
        "&deselected_curves=[]&last_linear_y_axis_range=[]"
    )
    return f"{ui.rstrip('/')}/#/metric?{query}"


def experiment_id(c: MlflowClient, ws: Workspace, name: str = EXPERIMENT) -> str:
    """The experiment's id, created as a model-training experiment when missing (an existing one without a kind,
    from an older binac, is tagged too; a kind a user chose is left alone). Created in a local store, its artifacts
    live under `$BINAC_HOME/mlartifacts`; created through a tracking server (`http(s)://`), where the server puts
    them (its `--default-artifact-root`, or `mlflow-artifacts:/`, its artifact proxy, under `--serve-artifacts`:
    https://mlflow.org/docs/latest/self-hosting/architecture/tracking-server/), never on this host's disk."""
    exp = c.get_experiment_by_name(name)
    if exp is None:
        served = ws.mlflow_uri.startswith(("http://", "https://"))
        try:
            return c.create_experiment(
                name, artifact_location=None if served else (ws.artifact_root / name).as_uri(), tags={KIND_TAG: KIND}
            )
        except mlflow.exceptions.MlflowException:  # created concurrently by another run
            exp = c.get_experiment_by_name(name)
    if KIND_TAG not in exp.tags:
        c.set_experiment_tag(exp.experiment_id, KIND_TAG, KIND)
    return exp.experiment_id


def find_or_create_run(
    ws: Workspace,
    run_key: str,
    run_name: str,
    tags: dict[str, str],
    params: dict[str, str],
    parent_run_id: str | None = None,
    experiment: str = EXPERIMENT,
) -> str:
    c = client(ws)
    exp = experiment_id(c, ws, experiment)
    found = c.search_runs([exp], filter_string=f"tags.`binac.run_key` = '{run_key}'", max_results=1)
    if found:
        run_id = found[0].info.run_id
        c.update_run(run_id, status="RUNNING")
        return run_id
    all_tags = {**tags, "binac.run_key": run_key, "mlflow.runName": run_name}
    if parent_run_id:
        all_tags["mlflow.parentRunId"] = parent_run_id
    run = c.create_run(exp, tags=all_tags, run_name=run_name)
    c.log_batch(run.info.run_id, params=[Param(k, v[:6000]) for k, v in params.items()])
    return run.info.run_id


def recorded_params(ws: Workspace, run_keys: list[str], name: str, experiment: str = EXPERIMENT) -> dict[str, str]:
    """The parameter `name` of each run of `run_keys` that the store holds and that logged it, by run key. Reads
    only: a sqlite store that does not exist yet, or an experiment not created yet, gives {} (nothing created)."""
    uri = ws.mlflow_uri
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).exists():
        return {}
    c = client(ws)
    exp = c.get_experiment_by_name(experiment)
    if exp is None:
        return {}
    out = {}
    for key in run_keys:
        found = c.search_runs([exp.experiment_id], filter_string=f"tags.`binac.run_key` = '{key}'", max_results=1)
        if found and name in found[0].data.params:
            out[key] = found[0].data.params[name]
    return out


def logged_steps(c: MlflowClient, run_id: str, key: str) -> set[int]:
    return {m.step for m in c.get_metric_history(run_id, key)}


_LOGGED: dict[tuple[str, str, str], set[int]] = {}
"""(store URI, run id, key) -> the steps logged: read from MLflow once per process, then kept up to date here."""
_LOGGED_LOCK = threading.Lock()


def log_metrics_once(ws: Workspace, run_id: str, metrics: dict[str, float], step: int) -> int:
    """Log each metric at `step` unless that (key, step) is already there; returns how many were logged.

    Which steps a key has is read from MLflow the first time this process logs that key to that run, and kept
    in memory after that (one `get_metric_history` per key per step made a pipeline iteration ~10 ms slower).
    That is exact because one process writes a training run's metrics (`binac_core.runs.runlock`); a run resumed in
    another process reads them again."""
    c = client(ws)
    with _LOGGED_LOCK:
        done = {k: _LOGGED.get((ws.mlflow_uri, run_id, k)) for k in metrics}
        for k, steps in done.items():
            if steps is None:
                done[k] = _LOGGED[(ws.mlflow_uri, run_id, k)] = logged_steps(c, run_id, k)
        ts = int(time.time() * 1000)
        todo = [Metric(k, float(v), ts, step) for k, v in metrics.items() if step not in done[k]]
        if todo:
            c.log_batch(run_id, metrics=todo)
            for m in todo:
                done[m.key].add(step)
    return len(todo)


def set_tags(ws: Workspace, run_id: str, tags: dict[str, str]) -> None:
    client(ws).log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])


def log_json(ws: Workspace, run_id: str, obj, artifact_file: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / Path(artifact_file).name
        path.write_text(json.dumps(obj, indent=2, default=str))
        parent = str(Path(artifact_file).parent)
        client(ws).log_artifact(run_id, str(path), None if parent == "." else parent)


def log_path(ws: Workspace, run_id: str, local: str | Path, artifact_path: str | None = None) -> None:
    local = Path(local)
    c = client(ws)
    if local.is_dir():
        c.log_artifacts(run_id, str(local), artifact_path)
    else:
        c.log_artifact(run_id, str(local), artifact_path)


def finish(ws: Workspace, run_id: str, status: str = "FINISHED") -> None:
    client(ws).set_terminated(run_id, status=status)


def finalize_run(ws: Workspace, run_id: str, config: dict, adapters: dict[str, str]) -> None:
    """Artifacts (the config, the final adapters {name: folder}, a sample of the run's trajectories as a table),
    then mark the run FINISHED. Parts already there are skipped (each adapter on its own: a re-run after one was
    logged logs the other), so a re-run does not append a second copy."""
    have = {a.path for a in client(ws).list_artifacts(run_id)}
    if "config.json" not in have:
        log_json(ws, run_id, config, "config.json")
    logged = {a.path for a in client(ws).list_artifacts(run_id, "adapters")} if "adapters" in have else set()
    for name, folder in adapters.items():
        if f"adapters/{name}" not in logged:
            log_path(ws, run_id, folder, f"adapters/{name}")
    if "trajectories_sample.json" not in have:
        from binac_core.store.storage import run_sample

        mlflow.log_table(data=run_sample(ws, run_id), artifact_file="trajectories_sample.json", run_id=run_id)
    finish(ws, run_id, "FINISHED")
