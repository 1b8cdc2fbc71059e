"""The trajectory store: Parquet shards under `$BINAC_HOME/trajectories/` plus a DuckDB file with a view over them.

Why shards and not one DuckDB table: a DuckDB file admits one writing process at a time, and readers in other
processes cannot open it while a writer holds it. Training therefore never keeps the DuckDB file open. Each
(run, protocol, step) is one shard, written to a temporary name and renamed into place, so
- a re-run (cache hit) or a resumed run rewrites the same file: no duplicates;
- a kill mid-write leaves no partial shard (the rename is atomic): nothing half-stored;
- any number of processes (training runs, `binac sql`) read concurrently.
binac reads through a private in-memory DuckDB connection with the view `trajectories` over the shards (`connect`):
no reader ever takes a lock. `trajectories.duckdb`, created once per workspace, holds the same view for users'
own DuckDB clients. The column types come from `sql/schema.sql`. A shard is written from columnar data (one Arrow
table inserted in one statement, `_write_rows`), not row by row.
The full-text index of the feedback lives beside the shards, one pair of immutable files per shard, made by the
readers that search (`binac_core/store/feedback_index.py`): a shard write does no indexing.
With an object store (`BINAC_STORE`), each shard is also one object in it, uploaded whole before `write_shard`
returns, and binac's readers (`connect`) read the store's shards, every host's, instead of the local folder
(`binac_core/store/shard_store.py`); `trajectories.duckdb` keeps its view over this host's own shards.
"""

from __future__ import annotations

import functools
import hashlib
import os
import threading
from pathlib import Path

import duckdb

from binac_core.foundation.faults import fault_point
from binac_core.foundation.files import atomic_path
from binac_core.foundation.workspace import Workspace
from binac_core.store import shard_store


def _sql_dir() -> Path:
    """The folder of the schema and the analysis queries, the repository's top-level `sql/`: inside the package as
    `binac_core/sql/` in an installed wheel (setup.py maps `sql/` there), beside the package in a checkout (on
    PYTHONPATH or an editable install)."""
    package = Path(__file__).resolve().parents[1]
    folders = (package / "sql", package.parent / "sql")
    for folder in folders:
        if (folder / "schema.sql").is_file():
            return folder
    raise FileNotFoundError(f"binac's SQL files (schema.sql) are in neither {folders[0]} nor {folders[1]}")


SQL_DIR = _sql_dir()
"""The schema and the analysis queries (`sql/` of the repository), resolved once: every reader of them uses this."""
SCHEMA_SQL = SQL_DIR / "schema.sql"


def schema_sql() -> str:
    return SCHEMA_SQL.read_text()


def columns() -> list[str]:
    con = duckdb.connect()
    con.execute(schema_sql())
    return [r[0] for r in con.execute("DESCRIBE trajectory_rows").fetchall()]


def shard_path(ws: Workspace, run_id: str, protocol: str, step: int) -> Path:
    return ws.shards / run_id / f"{protocol}-step{step:05d}.parquet"


def write_shard(ws: Workspace, run_id: str, protocol: str, step: int, rows: list[dict]) -> Path:
    """Replace the shard of (run, protocol, step) with `rows`, atomically, and in the object store when there is
    one (`shard_store`: the object replaced whole before this returns). Rows must carry every column."""
    path = shard_path(ws, run_id, protocol, step)
    _write_rows(path, rows)
    where = shard_store.store()
    if where is not None:
        shard_store.upload(ws, path, where)
        ensure_schema_shard(ws)  # so that the store's glob matches from its first shard on
    fault_point(f"shard:{protocol}", step)
    return path


def _write_rows(path: Path, rows: list[dict]) -> None:
    """`rows` (every column of `sql/schema.sql`) as a Parquet file at `path`, written atomically.

    Columnar: the rows become one Arrow table (a column per schema column, typed as the schema says where the
    values allow), inserted into the schema's table in one statement (DuckDB casts and checks NOT NULL as an
    `INSERT ... VALUES` did), then copied to Parquet; so the file's column types are the schema's whatever the
    Python values were. 50-100x faster than inserting row by row (bench/store.py). The table is a temporary
    table of a new connection (a cursor) to one in-memory database per process: opening a database costs more
    than writing a step's shard."""
    con = _scratch()
    try:
        con.execute(schema_sql().replace("CREATE TABLE", "CREATE TEMP TABLE", 1))
        if rows:
            cols = list(_arrow_types())
            missing = set(cols) - set(rows[0])
            if missing:
                raise ValueError(f"trajectory rows lack columns: {sorted(missing)}")
            table = _arrow_table(rows, cols)
            if table is not None:
                con.register("new_rows", table)
                con.execute(f"INSERT INTO trajectory_rows SELECT {', '.join(_quoted(c) for c in cols)} FROM new_rows")
            else:  # values Arrow cannot hold in one column (mixed kinds): row by row, as DuckDB casts each value
                con.executemany(
                    f"INSERT INTO trajectory_rows VALUES ({', '.join('?' for _ in cols)})",
                    [[r[c] for c in cols] for r in rows],
                )
        with atomic_path(path) as tmp:
            con.execute(f"COPY trajectory_rows TO {sql_string(tmp)} (FORMAT parquet)")
    finally:
        con.close()


_SCRATCH: dict[int, duckdb.DuckDBPyConnection] = {}
_SCRATCH_LOCK = threading.Lock()


def _scratch() -> duckdb.DuckDBPyConnection:
    """The process's in-memory DuckDB database for shard writes (each write uses its own cursor); a forked child
    opens its own."""
    with _SCRATCH_LOCK:
        pid = os.getpid()
        if pid not in _SCRATCH:
            _SCRATCH.clear()
            _SCRATCH[pid] = duckdb.connect()
        return _SCRATCH[pid].cursor()


@functools.cache
def _arrow_types() -> dict:
    con = duckdb.connect()
    try:
        con.execute(schema_sql())
        schema = con.execute("SELECT * FROM trajectory_rows").arrow().schema
        return {f.name: f.type for f in schema}
    finally:
        con.close()


def _arrow_table(rows: list[dict], cols: list[str]):
    """The rows as an Arrow table (or None), a column each: typed as the schema's column where the values fit that type,
    else as Arrow infers them (a timestamp given as text, say), for DuckDB to cast on insert; None when a column
    mixes values Arrow cannot put in one column (a datetime and a text)."""
    import pyarrow as pa

    types, arrays = _arrow_types(), []
    for c in cols:
        values = [r[c] for r in rows]
        try:
            arrays.append(pa.array(values, type=types.get(c)))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
            try:
                arrays.append(pa.array(values))
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
                return None
    return pa.Table.from_arrays(arrays, names=cols)


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def ensure_schema_shard(ws: Workspace) -> Path:
    """An empty shard that fixes the column types and keeps the view valid before any run has written.

    Its name carries a digest of `sql/schema.sql` (`_schema/empty-<sha8>.parquet`): after a schema change (a new
    column) a store made before it gets a second, empty schema shard with the new columns, so the view
    (`union_by_name`) has every column and old rows read NULL in the new ones. Older schema shards are left
    alone: they hold no rows. With an object store it is put there too, once (`shard_store.ensure_schema`)."""
    digest = hashlib.sha256(schema_sql().encode()).hexdigest()[:8]
    path = ws.shards / "_schema" / f"empty-{digest}.parquet"
    if not path.exists():
        _write_rows(path, [])
    where = shard_store.store()
    if where is not None:
        shard_store.ensure_schema(ws, path, where)
    return path


def view_sql(ws: Workspace, where=None) -> str:
    """The `trajectories` view over the shards: this host's folder, or every shard of the object store `where`."""
    pattern = ws.shards / "*" / "*.parquet"
    glob = shard_store.url(ws, pattern, where) if where is not None else pattern.as_posix()
    return (
        f"CREATE OR REPLACE VIEW trajectories AS SELECT * FROM read_parquet({sql_string(glob)}, union_by_name = true)"
    )


def sql_string(value) -> str:
    """`value` (a path) as a SQL string literal: quotes doubled, so a `'` in `$BINAC_HOME` cannot break out."""
    return "'" + str(value).replace("'", "''") + "'"


def ensure_view(ws: Workspace) -> Path:
    """Create `trajectories.duckdb` holding the `trajectories` view, once, for users' own DuckDB clients.

    Built under a temporary name and renamed into place, so no process ever waits on it and a file that exists
    is complete. binac itself never opens it (see `connect`): a DuckDB client a user keeps open on it, even
    read-write, blocks no training run and no `binac sql`."""
    ensure_schema_shard(ws)
    if not ws.duckdb_path.exists():
        with atomic_path(ws.duckdb_path) as tmp:
            con = duckdb.connect(str(tmp))
            try:
                con.execute(view_sql(ws))
            finally:
                con.close()
    return ws.duckdb_path


def connect(ws: Workspace, config: dict | None = None) -> duckdb.DuckDBPyConnection:
    """A private in-memory connection with the `trajectories` view over the shards: it takes no lock on any
    file, so readers never block a writer (or each other) and work while training runs write shards. With an
    object store, the view reads the store's shards over `httpfs` (`shard_store.attach`)."""
    ensure_schema_shard(ws)
    where = shard_store.store()
    con = shard_store.connect(where, config)
    con.execute(view_sql(ws, where))
    return con


def run_sample(ws: Workspace, run_id: str, limit: int = 50):
    """A DataFrame of the run's latest rows (held-out first, then the latest steps): the sample of trajectories
    logged with a finished run (`tracking.finalize_run`)."""
    con = connect(ws)
    try:
        return con.execute(
            "SELECT step, split, protocol, problem_id, attempt, attempt_reward, feedback, refined, refined_reward "
            f"FROM trajectories WHERE run_id = ? ORDER BY split DESC, step DESC, problem_id LIMIT {int(limit)}",
            [run_id],
        ).df()
    finally:
        con.close()
