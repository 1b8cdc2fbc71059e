"""A study's finished runs kept outside the store, in a folder that travels with the repository (or any copy). A fresh
`$BINAC_HOME` gets every archived run back from it, so a study resumed on another machine reruns only what was never
finished, and its report and SQL read the same numbers.

    <archive>/runs/<run key>/run.json              the MLflow run: name, status, times, tags, parameters
    <archive>/runs/<run key>/metrics.parquet       every metric point: key, step, value, timestamp (ms)
    <archive>/runs/<run key>/trajectories.parquet  every trajectory row of the run, with its shard's name
                                                   (`_shard`) and its position in the shard (`_row`); zstd
    <archive>/models/base-<digest>/                a tiny base model folder as built (`Workspace.base_model_dir`; a
                                                   base named by its weights keeps its folder's name)
    <archive>/models/weights.json                  each archived base's weights sha256, by folder name
                                                   (`binac_core.model.weights`: a base is its weights)
    <archive>/models/banks/bank-<w>-<key>*.json    the critic's attempt banks of an archived base (its weights
                                                   hash's first 12 digits <w>) and the frozen critic's feedback
                                                   on each (binac_core/rl/bank.py), as stored

What it keeps and what not: only runs whose MLflow run is FINISHED; not the run's artifacts (the final adapters,
the config copy, the trajectory sample: the config is in the parameters whole), not Prefect's cached stage
results (a restored run is finished, so nothing resumes from them). A run is archived once, under its run key: the
key includes the stage code's digest and the study file's (`binac_core.runs.plans.train_run_key`), so an archive
never answers for a run of other code or another design; a base model folder is named by the digest of its config
and pretraining code, likewise. That name does not fix the weights (two builds under one config digest can
differ), so the archive keeps each base's weights hash beside it: an archived base whose weights no longer hash to
it, a store holding another base under the same folder name, or an archive holding another base under the study's
base's name refuses in one line naming both hashes, and nothing is copied.

Writes are atomic: an export is written to a temporary folder renamed into place; a restore creates the MLflow run
tagged `binac.restore=started`, stores its metrics and shards, then tags it `done` and marks it FINISHED last, so
a killed restore leaves an unfinished run that the next restore deletes (with its shards) and redoes; a run that
exists in the store for any other reason is never touched. The MLflow ids change on restore (a new run under the
study's parent); the rows' `run_id` and `parent_run_id` are rewritten to them. Fault points for crash tests
(`binac_core.foundation.faults`): `restore:metrics@0` after the metrics are logged, `restore:shards@0` after the shards
are written, both before the run is finished.
With an object store (`BINAC_STORE`), an export reads the run's shards from the store, every host's, and a restore
puts the shards it writes there too (`binac_core/store/shard_store.py`).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import duckdb
from mlflow.entities import Metric, Param, RunTag

from binac_core.errors import BinacError
from binac_core.foundation.faults import fault_point
from binac_core.foundation.files import atomic_path, write_atomic
from binac_core.foundation.workspace import Workspace
from binac_core.model import weights
from binac_core.store import shard_store, tracking
from binac_core.store.storage import sql_string

RESTORE_TAG = "binac.restore"
"""Tag of a run restored from an archive: `started` while its restore runs, `done` once it is complete."""
DROPPED_TAGS = ("mlflow.parentRunId",)
"""Tags not archived: the parent is the study run of the store the run is restored into."""
BATCH = 1000
"""MLflow's limit on the metrics of one `log_batch` (parameters: 100)."""
WEIGHTS_INDEX = "weights.json"
"""The file in `<archive>/models/` that records each archived base's weights sha256, by folder name."""


def run_folder(archive: Path, key: str) -> Path:
    return Path(archive) / "runs" / key


def archived_keys(archive: Path) -> set[str]:
    runs = Path(archive) / "runs"
    return {p.name for p in runs.iterdir() if (p / "run.json").is_file()} if runs.is_dir() else set()


def recorded_params(archive: Path, keys: list[str], name: str) -> dict[str, str]:
    """The parameter `name` of each archived run of `keys` that logged it, by run key."""
    out = {}
    for key in keys:
        record = run_folder(archive, key) / "run.json"
        if record.is_file():
            value = json.loads(record.read_text())["params"].get(name)
            if value is not None:
                out[key] = value
    return out


def _find(c, exp: str, key: str):
    found = c.search_runs([exp], filter_string=f"tags.`binac.run_key` = '{key}'", max_results=1)
    return found[0] if found else None


def export_finished(ws: Workspace, archive: Path, keys: list[str]) -> list[str]:
    """Archive every run of `keys` that is FINISHED in the store and not archived yet; returns the keys written."""
    c = tracking.client(ws)
    exp = tracking.experiment_id(c, ws)
    have, written = archived_keys(archive), []
    for key in keys:
        run = None if key in have else _find(c, exp, key)
        if run is not None and run.info.status == "FINISHED":
            export_run(ws, c, run, run_folder(archive, key))
            written.append(key)
    return written


def export_run(ws: Workspace, c, run, folder: Path) -> Path:
    """The run's record, metrics and trajectory rows as `folder`, written whole or not at all."""
    tmp = folder.with_name(f".{folder.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        record = {
            "run_key": run.data.tags["binac.run_key"],
            "run_name": run.info.run_name,
            "status": run.info.status,
            "start_time": run.info.start_time,
            "end_time": run.info.end_time,
            "tags": {k: v for k, v in sorted(run.data.tags.items()) if k not in DROPPED_TAGS},
            "params": dict(sorted(run.data.params.items())),
        }
        points = [
            (m.key, m.step, m.value, m.timestamp)
            for key in sorted(run.data.metrics)
            for m in c.get_metric_history(run.info.run_id, key)
        ]
        where = shard_store.store()
        con = shard_store.connect(where)
        try:
            con.execute("CREATE TABLE metrics (key VARCHAR, step BIGINT, value DOUBLE, timestamp BIGINT)")
            if points:
                con.executemany("INSERT INTO metrics VALUES (?, ?, ?, ?)", points)
            con.execute(
                f"COPY (SELECT * FROM metrics ORDER BY key, step, timestamp) TO "
                f"{sql_string(tmp / 'metrics.parquet')} (FORMAT parquet, COMPRESSION zstd)"
            )
            shards = ws.shards / run.info.run_id
            if where is None:
                stored, pattern = any(shards.glob("*.parquet")), str(shards / "*.parquet")
            else:  # the run's shards in the object store, every host's (binac_core/store/shard_store.py)
                stored = bool(where.keys(shard_store.key(ws, shards)))
                pattern = shard_store.url(ws, shards / "*.parquet", where)
            if stored:
                con.execute(
                    "COPY (SELECT * EXCLUDE (filename, file_row_number), "
                    "regexp_extract(filename, '([^/]+)\\.parquet$', 1) AS _shard, file_row_number AS _row "
                    f"FROM read_parquet({sql_string(pattern)}, union_by_name = true, filename = true, "
                    f"file_row_number = true) ORDER BY _shard, _row) TO {sql_string(tmp / 'trajectories.parquet')} "
                    "(FORMAT parquet, COMPRESSION zstd, COMPRESSION_LEVEL 19)"
                )
        finally:
            con.close()
        (tmp / "run.json").write_text(json.dumps(record, indent=1) + "\n")
        shutil.rmtree(folder, ignore_errors=True)  # only an export cut off before this line's rename leaves one
        os.replace(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def restore_runs(ws: Workspace, archive: Path, parent_run_id: str, keys: list[str]) -> list[str]:
    """Restore every archived run of `keys` that the store has no run for (or only an unfinished restore of), as a
    child of `parent_run_id`; returns the keys restored."""
    c = tracking.client(ws)
    exp = tracking.experiment_id(c, ws)
    have, restored = archived_keys(archive), []
    for key in keys:
        if key not in have:
            continue
        run = _find(c, exp, key)
        if run is not None:
            if run.info.status == "FINISHED" or run.data.tags.get(RESTORE_TAG) != "started":
                continue  # finished, or a run of the store's own: never replaced
            c.delete_run(run.info.run_id)  # a restore cut off: redo it
            shutil.rmtree(ws.shards / run.info.run_id, ignore_errors=True)
            shard_store.remove_run(ws, run.info.run_id, shard_store.store())
        import_run(ws, c, exp, run_folder(archive, key), parent_run_id)
        restored.append(key)
    return restored


def import_run(ws: Workspace, c, exp: str, folder: Path, parent_run_id: str) -> str:
    """One archived run as a new MLflow run under `parent_run_id`, with its shards; returns its run id."""
    record = json.loads((folder / "run.json").read_text())
    tags = {**record["tags"], "mlflow.parentRunId": parent_run_id, RESTORE_TAG: "started"}
    run_id = c.create_run(exp, start_time=record["start_time"], tags=tags, run_name=record["run_name"]).info.run_id
    params = [Param(k, v) for k, v in record["params"].items()]
    for i in range(0, len(params), 100):
        c.log_batch(run_id, params=params[i : i + 100])
    con = duckdb.connect()
    try:
        points = con.execute(
            f"SELECT key, step, value, timestamp FROM read_parquet("
            f"{sql_string(folder / 'metrics.parquet')}) ORDER BY key, step, timestamp"
        ).fetchall()
        metrics = [Metric(k, v, ts, step) for k, step, v, ts in points]
        for i in range(0, len(metrics), BATCH):
            c.log_batch(run_id, metrics=metrics[i : i + BATCH])
        fault_point("restore:metrics", 0)
        if (folder / "trajectories.parquet").is_file():
            variant = record["tags"].get("variant")
            _write_shards(ws, con, folder / "trajectories.parquet", run_id, parent_run_id, variant)
        fault_point("restore:shards", 0)
    finally:
        con.close()
    c.log_batch(run_id, tags=[RunTag(RESTORE_TAG, "done")])
    c.set_terminated(run_id, status=record["status"], end_time=record["end_time"])
    return run_id


def _write_shards(ws: Workspace, con, rows: Path, run_id: str, parent_run_id: str, variant: str | None) -> None:
    """The archived rows back as one Parquet file per shard, in their order, ids rewritten; each written atomically,
    and put in the object store when there is one (`shard_store.upload`). Rows archived before the `variant` column
    existed get the run's `variant` tag in it (NULL without one), so SQL tells a restored study's arms apart."""
    source = f"read_parquet({sql_string(rows)})"
    names = [r[0] for r in con.execute(f"SELECT DISTINCT _shard FROM {source} ORDER BY 1").fetchall()]
    archived = {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}
    label = "" if "variant" in archived else f", {sql_string(variant) if variant else 'NULL::VARCHAR'} AS variant"
    where = shard_store.store()
    for name in names:
        path = ws.shards / run_id / f"{name}.parquet"
        with atomic_path(path) as tmp:
            con.execute(
                f"COPY (SELECT * EXCLUDE (_shard, _row) REPLACE ({sql_string(run_id)} AS run_id, "
                f"CASE WHEN parent_run_id IS NULL THEN NULL ELSE {sql_string(parent_run_id)} END AS parent_run_id) "
                f"{label} FROM {source} WHERE _shard = ? ORDER BY _row) TO {sql_string(tmp)} (FORMAT parquet)",
                [name],
            )
        shard_store.upload(ws, path, where)


def weights_index(archive: Path) -> dict[str, str]:
    """The archive's record of its bases' weights hashes, {folder name: sha256} ({} when it has none)."""
    path = Path(archive) / "models" / WEIGHTS_INDEX
    return json.loads(path.read_text()) if path.is_file() else {}


def _record_weights(archive: Path, name: str, digest: str) -> None:
    index = weights_index(archive)
    if index.get(name) != digest:
        write_atomic(Path(archive) / "models" / WEIGHTS_INDEX, json.dumps({**index, name: digest}, indent=1) + "\n")


def archived_weights(archive: Path, name: str, cache: Path | None = None) -> str:
    """The weights hash of the archived base `models/<name>`, checked against the archive's record of it: an
    archived base whose weights changed refuses in one line naming both hashes."""
    digest = weights.verified(Path(archive) / "models" / name, cache)
    kept = weights_index(archive).get(name)
    if kept is not None and kept != digest:
        raise BinacError(
            f"archive {archive}: its base {name} is recorded with weights sha256 {kept} but its weights hash to "
            f"{digest} (the archived weights changed)"
        )
    return digest


def export_model(archive: Path, model: Path, digest: str, cache: Path | None = None) -> bool:
    """Archive a base model folder (`models/base-<digest>`, or the folder a base named by its weights was found
    in) with its weights hash `digest` unless it is there; returns whether the folder was written. Written whole or
    not at all (a temporary folder renamed into place). An archived folder of that name holding other weights
    refuses in one line naming both hashes."""
    target = Path(archive) / "models" / model.name
    if not (model / "config.json").is_file():
        return False
    if (target / "config.json").is_file():
        kept = archived_weights(archive, model.name, cache)
        if kept != digest:
            raise BinacError(
                f"archive {archive}: its base {model.name} has weights sha256 {kept}, but this study's base "
                f"{model} has {digest} (two bases under one folder name); archive to another folder"
            )
        _record_weights(archive, model.name, digest)
        return False
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(model, tmp)
    shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)
    _record_weights(archive, model.name, digest)
    return True


def models_to_restore(ws: Workspace, archive: Path) -> list[tuple[Path, Path]]:
    """(archived folder, store folder) of every archived base model the store lacks, after checking every archived
    base's weights against the archive's record and one the store already holds under the same name against the
    store's: different weights refuse in one line naming both hashes. Copies nothing (hashes are cached)."""
    folder, cache = Path(archive) / "models", ws.home / weights.CACHE_FILE
    todo = []
    for model in weights.model_folders(folder) if folder.is_dir() else []:
        digest = archived_weights(archive, model.name, cache)
        target = ws.models_root / model.name
        if (target / "config.json").exists():
            held = weights.verified(target, cache)
            if held != digest:
                raise BinacError(
                    f"archive {archive}: its base {model.name} has weights sha256 {digest}, but the store's "
                    f"{target} has {held} (two bases under one folder name); move one of them away"
                )
            continue
        todo.append((model, target))
    return todo


def restore_models(ws: Workspace, archive: Path) -> list[str]:
    """Copy every archived base model the store lacks into it (`models_to_restore`: checked first, nothing copied
    when one refuses; `config.json` last: the store takes a folder with one for built,
    `binac_core.model.base_model`); returns the folder names restored."""
    todo = models_to_restore(ws, archive)
    for model, target in todo:
        target.mkdir(parents=True, exist_ok=True)
        for f in sorted(model.iterdir(), key=lambda p: p.name == "config.json"):
            write_atomic(target / f.name, f.read_bytes())
    return [model.name for model, _ in todo]


def export_banks(ws: Workspace, archive: Path, digest: str) -> list[str]:
    """Archive the critic's attempt banks of the base whose weights hash is `digest` (and the frozen critic's
    feedback on them, binac_core/rl/bank.py) that the archive lacks; returns the file names written. A bank's
    name holds its key, a hash of everything that determines it, so a file of that name is that bank."""
    return _copy_banks(ws.models_root / "banks", Path(archive) / "models" / "banks", f"bank-{digest[:12]}-*.json")


def restore_banks(ws: Workspace, archive: Path) -> list[str]:
    """Copy every archived attempt bank (and frozen critic feedback) the store lacks into it; returns the file
    names restored."""
    return _copy_banks(Path(archive) / "models" / "banks", ws.models_root / "banks", "bank-*.json")


def _copy_banks(source: Path, target: Path, pattern: str) -> list[str]:
    """The files of `source` matching `pattern` that `target` lacks, copied there atomically; their names."""
    copied = []
    for f in sorted(source.glob(pattern)) if source.is_dir() else []:
        if not (target / f.name).exists():
            write_atomic(target / f.name, f.read_bytes())
            copied.append(f.name)
    return copied
