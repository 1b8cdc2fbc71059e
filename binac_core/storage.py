"""The trajectory store: Parquet shards under `$BINAC_HOME/trajectories/` plus a DuckDB file with a view over them.

Why shards and not one DuckDB table: a DuckDB file admits one writing process at a time, and readers in other
processes cannot open it while a writer holds it. Training therefore never keeps the DuckDB file open. Each
(run, protocol, step) is one shard, written to a temporary name and renamed into place, so
- a re-run (cache hit) or a resumed run rewrites the same file: no duplicates;
- a kill mid-write leaves no partial shard (the rename is atomic): nothing half-stored;
- any number of processes (training runs, `binac sql`) read concurrently.
`trajectories.duckdb` holds the view `trajectories` (created once per workspace with a short-lived connection);
the column types come from `sql/schema.sql`.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import duckdb

from binac_core.workspace import Workspace

SCHEMA_SQL = Path(__file__).resolve().parent.parent / "sql" / "schema.sql"


def schema_sql() -> str:
    return SCHEMA_SQL.read_text()


def columns() -> list[str]:
    con = duckdb.connect()
    con.execute(schema_sql())
    return [r[0] for r in con.execute("DESCRIBE trajectory_rows").fetchall()]


def shard_path(ws: Workspace, run_id: str, protocol: str, step: int) -> Path:
    return ws.shards / run_id / f"{protocol}-step{step:05d}.parquet"


def write_shard(ws: Workspace, run_id: str, protocol: str, step: int, rows: list[dict]) -> Path:
    """Replace the shard of (run, protocol, step) with `rows`, atomically. Rows must carry every column."""
    path = shard_path(ws, run_id, protocol, step)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    con = duckdb.connect()
    con.execute(schema_sql())
    cols = columns()
    if rows:
        missing = set(cols) - set(rows[0])
        if missing:
            raise ValueError(f"trajectory rows lack columns: {sorted(missing)}")
        con.executemany(
            f"INSERT INTO trajectory_rows VALUES ({', '.join('?' for _ in cols)})",
            [[r[c] for c in cols] for r in rows],
        )
    con.execute(f"COPY trajectory_rows TO '{tmp}' (FORMAT parquet)")
    con.close()
    os.replace(tmp, path)
    return path


def _schema_shard(ws: Workspace) -> Path:
    """An empty shard that fixes the column types and keeps the view valid before any run has written."""
    path = ws.shards / "_schema" / "empty.parquet"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"empty.{os.getpid()}.tmp")
        con = duckdb.connect()
        con.execute(schema_sql())
        con.execute(f"COPY trajectory_rows TO '{tmp}' (FORMAT parquet)")
        con.close()
        os.replace(tmp, path)
    return path


def view_sql(ws: Workspace) -> str:
    glob = (ws.shards / "*" / "*.parquet").as_posix()
    return f"CREATE OR REPLACE VIEW trajectories AS SELECT * FROM read_parquet('{glob}', union_by_name = true)"


def ensure_view(ws: Workspace, attempts: int = 50) -> Path:
    """Create `trajectories.duckdb` with the `trajectories` view (idempotent; retries while another process
    holds the file)."""
    _schema_shard(ws)
    for i in range(attempts):
        try:
            con = duckdb.connect(str(ws.duckdb_path))
            try:
                con.execute(view_sql(ws))
            finally:
                con.close()
            return ws.duckdb_path
        except duckdb.IOException:
            time.sleep(0.1 * (i + 1))
    raise RuntimeError(f"could not open {ws.duckdb_path}: locked by another process")


def connect_readonly(ws: Workspace, attempts: int = 50) -> duckdb.DuckDBPyConnection:
    """A read-only connection to the store (works while training runs write shards)."""
    if not ws.duckdb_path.exists():
        ensure_view(ws)
    for i in range(attempts):
        try:
            return duckdb.connect(str(ws.duckdb_path), read_only=True)
        except duckdb.IOException:
            time.sleep(0.1 * (i + 1))
    raise RuntimeError(f"could not open {ws.duckdb_path}: locked by another process")
