"""The full-text index of the stored feedback: per-shard postings beside the shards, merged at query time.

For each trajectory shard `trajectories/<run>/<name>.parquet` the index holds two immutable Parquet files under
`$BINAC_HOME/feedback_index/<run>/`, named after the shard and its identity (inode, mtime in ns, size), so a
rewritten shard (a re-run) gets new index files and the old ones are no longer read (and deleted an hour later,
`drop_stale`):
- `<name>.<id>.docs.parquet`: one row per row of the shard whose feedback is not NULL: the shard (`run/name`),
  the row's position in it, the columns `sql/feedback_search.sql` shows and filters on, and `len`, the number of
  index terms of the feedback;
- `<name>.<id>.terms.parquet`: one row per (row, term): the term, its count in the feedback (`tf`), `len`, and
  the filter columns (method, split, parent_run_id), so a query reads the postings of its words in one scan.
Terms are made exactly as DuckDB FTS's `PRAGMA create_fts_index` makes them with its defaults (the extension's own
`tokenize` macro and English stop-word list: lower-cased, accents stripped, split at its ignore pattern, stop
words and empty tokens dropped, Porter-stemmed). BM25 is computed at query time over the union of the files with
the corpus statistics (document count, average length, document frequency) aggregated over the rows the query
selects, so scores are those of an FTS index built over the same rows (tests/store/test_feedback_index.py).

The index is kept current lazily, by readers: `attach` indexes each shard that has no index files for its current
identity (a new shard, a rewritten one, a shard stored before the index existed), then defines the views
`feedback_docs` and `feedback_terms` over exactly the current files. A query after a shard lands indexes that one
shard (milliseconds), never the whole store. Index files are written atomically (`atomic_path`) and never
modified, so no reader or writer takes a lock, and readers racing to index one shard write identical files.
"""

from __future__ import annotations

import time
from pathlib import Path

import duckdb

from binac_core.foundation.files import atomic_path
from binac_core.foundation.workspace import Workspace
from binac_core.store import storage

DOC_COLUMNS = (
    "run_id, method, seed, step, split, protocol, problem_id, sample_idx, feedback_idx, round, feedback, "
    "attempt_reward, refined_reward, parent_run_id"
)
_FTS = "fts_main__binac_fts_probe"  # the schema of a one-row FTS index whose tokenizer and stop words are used


def root(ws: Workspace) -> Path:
    return ws.home / "feedback_index"


def _shards(ws: Workspace) -> list[Path]:
    storage.ensure_schema_shard(ws)
    return sorted(p for p in ws.shards.glob("*/*.parquet") if not p.name.startswith("."))


def index_files(ws: Workspace, shard: Path) -> tuple[Path, Path]:
    """The docs and terms files of `shard` as it is now (its identity: inode, mtime, size)."""
    st = shard.stat()
    base = root(ws) / shard.parent.name / f"{shard.stem}.{st.st_ino}-{st.st_mtime_ns}-{st.st_size}"
    return base.with_name(base.name + ".docs.parquet"), base.with_name(base.name + ".terms.parquet")


def _prepare(con: duckdb.DuckDBPyConnection) -> None:
    """FTS's tokenizer and stop words in this connection (the fts extension loaded), from a one-row FTS index."""
    if con.execute(f"SELECT count(*) FROM duckdb_tables() WHERE schema_name = '{_FTS}'").fetchone()[0]:
        return
    con.execute("CREATE OR REPLACE TEMP TABLE _binac_fts_probe AS SELECT 1 AS id, 'x' AS t")
    con.execute("PRAGMA create_fts_index('_binac_fts_probe', 'id', 't', overwrite = 1)")


def build(con: duckdb.DuckDBPyConnection, ws: Workspace, shard: Path) -> tuple[Path, Path]:
    """Write the index files of `shard` (atomically) and return them."""
    _prepare(con)
    docs, terms = index_files(ws, shard)
    key = storage.sql_string(f"{shard.parent.name}/{shard.name}")
    schema = storage.ensure_schema_shard(ws)
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _binac_rows AS "
        f"SELECT {key} AS shard, file_row_number AS row, {DOC_COLUMNS} "
        f"FROM read_parquet([{storage.sql_string(shard)}, {storage.sql_string(schema)}], union_by_name = true, "
        "file_row_number = true) WHERE feedback IS NOT NULL"
    )
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _binac_terms AS "
        "WITH words AS (SELECT row, unnest(" + _FTS + ".tokenize(feedback)) AS w FROM _binac_rows) "
        f"SELECT row, stem(w, 'porter') AS term, count(*) AS tf FROM words "
        f"WHERE w NOT IN (SELECT sw FROM {_FTS}.stopwords) AND w <> '' GROUP BY row, term"
    )
    with atomic_path(docs) as tmp:
        con.execute(
            f"COPY (SELECT r.*, coalesce(l.len, 0)::BIGINT AS len FROM _binac_rows r "
            "LEFT JOIN (SELECT row, sum(tf)::BIGINT AS len FROM _binac_terms GROUP BY row) l USING (row) "
            f"ORDER BY r.row) TO {storage.sql_string(tmp)} (FORMAT parquet)"
        )
    with atomic_path(terms) as tmp:
        con.execute(
            "COPY (SELECT r.shard, t.row, t.term, t.tf, sum(t.tf) OVER (PARTITION BY t.row)::BIGINT AS len, "
            "r.method, r.split, r.parent_run_id FROM _binac_terms t JOIN _binac_rows r USING (row) "
            f"ORDER BY t.term, t.row) TO {storage.sql_string(tmp)} (FORMAT parquet)"
        )
    con.execute("DROP TABLE _binac_rows; DROP TABLE _binac_terms")
    return docs, terms


STALE_AFTER_S = 3600
"""Index files no current shard uses are deleted once this old (mtime): far longer than any query that may still
be reading them, so a reader never loses a file it listed."""


def drop_stale(ws: Workspace, current: set[Path], now: float) -> list[Path]:
    """Delete the index files (and temporary files of killed writers) under the index folder that are not in
    `current` and older than `STALE_AFTER_S` at time `now`: those of rewritten or deleted shards. Returns them."""
    dropped = []
    for path in root(ws).glob("*/*"):
        try:
            if path not in current and path.stat().st_mtime < now - STALE_AFTER_S:
                path.unlink()
                dropped.append(path)
        except FileNotFoundError:  # another reader dropped it first
            continue
    return dropped


def refresh(con: duckdb.DuckDBPyConnection, ws: Workspace) -> tuple[list[Path], list[Path]]:
    """Index every shard not indexed in its current form, drop stale index files (`drop_stale`); the current
    docs and terms files."""
    docs, terms = [], []
    for shard in _shards(ws):
        try:
            d, t = index_files(ws, shard)
            if not (d.exists() and t.exists()):
                d, t = build(con, ws, shard)
        except FileNotFoundError:  # replaced while being indexed: the next query indexes its new form
            continue
        docs.append(d)
        terms.append(t)
    drop_stale(ws, set(docs) | set(terms), time.time())
    return docs, terms


def attach(con: duckdb.DuckDBPyConnection, ws: Workspace) -> None:
    """Bring the index up to date and define the views `feedback_docs` and `feedback_terms` over it in `con` (a
    connection with the fts extension loaded: `sqlrun.connect`)."""
    _prepare(con)  # the query tokenizes its words with FTS's tokenizer too
    docs, terms = refresh(con, ws)

    def files(paths: list[Path]) -> str:
        return "[" + ", ".join(storage.sql_string(p) for p in paths) + "]"

    con.execute(f"CREATE OR REPLACE TEMP VIEW feedback_docs AS SELECT * FROM read_parquet({files(docs)})")
    con.execute(f"CREATE OR REPLACE TEMP VIEW feedback_terms AS SELECT * FROM read_parquet({files(terms)})")
