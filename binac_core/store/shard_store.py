"""The trajectory shards in the object store hosts share (`BINAC_STORE`, `binac_core.foundation.objects`): one
object per shard, read by DuckDB over S3's protocol.

A shard `$BINAC_HOME/trajectories/<run>/<name>.parquet` is the object of store-relative key
`trajectories/<run>/<name>.parquet` (`binac_core.foundation.store_keys`). Its writer uploads it whole once the local
file is in place, before the write returns (`storage.write_shard`), so a task that stored a step's rows has them in
the store when it returns; a re-run replaces the object whole (S3 shows a reader the old object or the new one,
never a part). The schema shard (`trajectories/_schema/empty-<sha8>.parquet`, no rows) goes up too, so the view's
glob matches at least one object in an empty store.

Readers (`storage.connect`: `binac sql`, the reports, the archive's export) query the objects in place with DuckDB's
`httpfs` extension (https://duckdb.org/docs/stable/core_extensions/httpfs/s3api), loaded from its pinned PyPI
package (`binac_core.store.extensions`), with a temporary secret (never written to disk) holding the store's endpoint,
region and the credentials boto3's chain finds. S3's own checksums guard the transfer; the sha256 check of
`objects.ObjectStore.get_file` is for files that are fetched whole: the feedback index, which indexes files on
disk, reads digest-checked local copies of the store's shards (`local_copies`).

Without `BINAC_STORE`, `store()` is None and nothing here runs: the shards stay local files only."""

from __future__ import annotations

import threading
from pathlib import Path
from urllib.parse import urlsplit

import duckdb

from binac_core.foundation.objects import ObjectStore, store_from_env
from binac_core.foundation.store_keys import store_key
from binac_core.foundation.workspace import Workspace
from binac_core.store import extensions

SECRET = "binac_store"
"""The name of the connection's temporary S3 secret."""
_SCHEMA_UP: set[tuple[str, str]] = set()
_SCHEMA_LOCK = threading.Lock()


def store() -> ObjectStore | None:
    """The object store `BINAC_STORE` names, or None (then every shard is a local file only)."""
    return store_from_env()


def key(ws: Workspace, path: Path) -> str:
    """The store-relative key of a shard (or of the shards' folder): `trajectories/<run>/<name>.parquet`."""
    found = store_key(path, ws)
    if found is None:
        raise ValueError(f"{path} is not under {ws.home}")
    return found


def upload(ws: Workspace, path: Path, where: ObjectStore | None) -> None:
    """Put the shard at `path` into the store as its key, replacing the object whole (nothing without a store)."""
    if where is not None:
        where.put_file(key(ws, path), path)


def ensure_schema(ws: Workspace, path: Path, where: ObjectStore) -> None:
    """The schema shard at `path` in the store, uploaded unless there (checked once per process and store)."""
    k = key(ws, path)
    with _SCHEMA_LOCK:
        if (where.url, k) in _SCHEMA_UP:
            return
    if where.digest(k) is None:
        where.put_file(k, path)
    with _SCHEMA_LOCK:
        _SCHEMA_UP.add((where.url, k))


def url(ws: Workspace, path: Path, where: ObjectStore) -> str:
    """The `s3://` address of a shard, or of a glob of shards (`<run>/*.parquet`), for DuckDB."""
    return f"{where.url}/{key(ws, path)}"


def remove_run(ws: Workspace, run_id: str, where: ObjectStore | None) -> None:
    """Delete the store's shards of run `run_id` (an archive restore cut off, redone): nothing without a store."""
    if where is not None:
        for k in where.keys(key(ws, ws.shards / run_id)):
            where.delete(k)


def local_copies(ws: Workspace, where: ObjectStore) -> list[Path]:
    """Every shard of the store as a digest-checked local copy at its key under `$BINAC_HOME` (fetched when missing
    or different, `ObjectStore.get_file`), for a reader that needs files on disk (the feedback index)."""
    out = []
    for k in where.keys(key(ws, ws.shards)):
        digest = where.digest(k)
        if digest is None:  # deleted since it was listed
            continue
        out.append(where.get_file(k, ws.home / k, digest))
    return out


def connect(where: ObjectStore | None, config: dict | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory connection with `config`; with an object store, one that reads its shards (`attach`, automatic
    extension installs off: `extensions.CONFIG`)."""
    if where is None:
        return duckdb.connect(config=config or {})
    con = duckdb.connect(config={**extensions.CONFIG, **(config or {})})
    attach(con, where)
    return con


def attach(con: duckdb.DuckDBPyConnection, where: ObjectStore) -> None:
    """Load `httpfs` into `con` (from its PyPI package, offline: `extensions.load`) and give it a temporary secret
    for the store's bucket: its endpoint (path-style addresses), region and credentials."""
    extensions.load(con, extensions.Extension.HTTPFS)
    key_id, secret, token = where.credentials()
    options = {
        "TYPE": "s3",
        "KEY_ID": _literal(key_id),
        "SECRET": _literal(secret),
        "REGION": _literal(where.region),
        "SCOPE": _literal(f"s3://{where.bucket}"),
    }
    if token:
        options["SESSION_TOKEN"] = _literal(token)
    if where.endpoint:
        parts = urlsplit(where.endpoint)
        options |= {
            "ENDPOINT": _literal(parts.netloc + parts.path.rstrip("/")),
            "USE_SSL": "true" if parts.scheme == "https" else "false",
            "URL_STYLE": "'path'",
        }
    body = ", ".join(f"{k} {v}" for k, v in options.items())
    con.execute(f"CREATE OR REPLACE TEMPORARY SECRET {SECRET} ({body})")


def _literal(value: str) -> str:
    return "'" + str(value).replace("'", "''") + "'"
