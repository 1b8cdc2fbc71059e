"""The full-text index of the stored feedback: per-shard postings and statistics beside the shards, merged at query
time.

For each trajectory shard `trajectories/<run>/<name>.parquet` the index holds three immutable Parquet files under
`$BINAC_HOME/feedback_index/<run>/`, named after the shard, its identity (inode, mtime in ns, size) and the layout
(`FORMAT`), so a rewritten shard (a re-run) gets new index files and the old ones are no longer read (and deleted an
hour later, `drop_stale`):
- `<name>.<id>.v<FORMAT>.docs.parquet`: one row per row of the shard whose feedback is not NULL: the shard
  (`run/name`), the row's position in it (`row`), `doc` (below), the columns `sql/feedback_search.sql` shows and
  filters on, and `len`, the number of index terms of the feedback; in `doc` order, in small row groups;
- `<name>.<id>.v<FORMAT>.terms.parquet`: the postings, one row per (row, term): `doc`, the term, its count in the
  feedback (`tf`), `len`, and the filter columns (method, split, parent_run_id); in (term, doc) order, so a query
  reads only the row groups of its words;
- `<name>.<id>.v<FORMAT>.stats.parquet`: the shard's corpus statistics, per value of the filter columns: rows with
  `term` NULL count the documents of each length (`n` documents of `len` terms), the other rows count the postings
  of each (term, tf, len). A query takes its document count, average length and document frequencies from these
  few rows instead of aggregating the docs and postings.
`doc` numbers a shard's rows in the order the search ranks rows of equal score (`ORDER`), under a 31-bit code of
the shard (`shard_code`), so within a shard `doc` order is that order, and `doc` values of different shards fall in
different row groups. It is unique only together with the shard: the views number the files (`shard_no`) and a
query joins on both.

Terms are made exactly as DuckDB FTS's `PRAGMA create_fts_index` makes them with its defaults (the extension's own
`tokenize` macro and English stop-word list: lower-cased, accents stripped, split at its ignore pattern, stop
words and empty tokens dropped, Porter-stemmed). BM25 is computed at query time over the union of the files with
the corpus statistics (document count, average length, document frequency) summed over the filter values the
query selects, so scores are those of an FTS index built over the same rows (tests/store/test_feedback_index.py):
the counts are exact integers, the average length is DuckDB's `avg` over the same lengths, and each term's share
of a score is FTS's expression over the same values. A score sums its terms' shares in the order DuckDB meets
them, as FTS's does, so two scores that are equal on paper may differ in their last bit (and rank either way),
from FTS and between runs.

The index is kept current lazily, by readers: `attach` indexes each shard that has no index files for its current
identity (a new shard, a rewritten one, a shard stored before the index existed or indexed in another layout),
then defines the views `feedback_docs`, `feedback_terms` and `feedback_stats` over exactly the current files. A
query after a shard lands indexes that one shard, never the whole store. Index files are written atomically
(`atomic_path`) and never modified, so no reader or writer takes a lock, and readers racing to index one shard
write identical files. Nothing is cached outside these files: the statistics of a shard live in its own files,
which a rewrite of the shard replaces.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import duckdb

from binac_core.foundation.files import atomic_path
from binac_core.foundation.workspace import Workspace
from binac_core.store import shard_store, storage

DOC_COLUMNS = (
    "run_id, method, seed, step, split, protocol, problem_id, sample_idx, feedback_idx, round, feedback, "
    "attempt_reward, refined_reward, parent_run_id"
)
FILTERS = "method, split, parent_run_id"
"""The columns `sql/feedback_search.sql` selects rows by: carried by the postings and the statistics."""
ORDER = "run_id, step, problem_id, sample_idx, feedback_idx"
"""The order `sql/feedback_search.sql` ranks rows of equal score in; `doc` numbers a shard's rows in this order."""
KINDS = ("docs", "terms", "stats")
"""The index files of a shard, in the order `index_files` returns them; each is a view `feedback_<kind>`."""
FORMAT = 2
"""The layout of the index files, part of their names: files of another layout are never read (and are dropped as
stale an hour later), so a store indexed by an older binac is indexed anew by its first query."""
DOCS_ROW_GROUP = 2048
"""Rows per row group of a docs file: small, so fetching a query's best rows by `doc` reads only their row groups
(DuckDB pushes the `doc` values of a join's small side into the scan and skips row groups by their min/max)."""
TERMS_ROW_GROUP = 16384
"""Rows per row group of a terms file (sorted by term): a query reads only the row groups its terms fall in."""
DYNAMIC_OR_FILTERS = 1024
"""How many distinct values of a join key DuckDB pushes into the scan of the join's other side
(`dynamic_or_filter_threshold`, 50 by default; `sqlrun.connect` sets it): the search joins up to k candidates per
shard to the docs files, and their row groups are skipped only when the `doc` values are pushed down."""
_FTS = "fts_main__binac_fts_probe"  # the schema of a one-row FTS index whose tokenizer and stop words are used


def root(ws: Workspace) -> Path:
    return ws.home / "feedback_index"


def _shards(ws: Workspace) -> list[Path]:
    """The shards to index: this host's, or with an object store a local copy of each of the store's
    (`shard_store.local_copies`)."""
    schema = storage.ensure_schema_shard(ws)
    where = shard_store.store()
    if where is not None:
        return sorted({schema, *shard_store.local_copies(ws, where)})
    return sorted(p for p in ws.shards.glob("*/*.parquet") if not p.name.startswith("."))


def index_files(ws: Workspace, shard: Path) -> tuple[Path, Path, Path]:
    """The docs, terms and stats files of `shard` as it is now (its identity: inode, mtime, size)."""
    st = shard.stat()
    base = f"{shard.stem}.{st.st_ino}-{st.st_mtime_ns}-{st.st_size}.v{FORMAT}"
    folder = root(ws) / shard.parent.name
    docs, terms, stats = (folder / f"{base}.{kind}.parquet" for kind in KINDS)
    return docs, terms, stats


def shard_code(key: str) -> int:
    """A 31-bit number of the shard `key` (`run/name`), the high half of each of its `doc` numbers. Two shards may
    share one: it serves to keep shards' `doc` values apart in row-group statistics, not to identify a shard."""
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) >> 1


def _prepare(con: duckdb.DuckDBPyConnection) -> None:
    """FTS's tokenizer and stop words in this connection (the fts extension loaded), from a one-row FTS index."""
    if con.execute(f"SELECT count(*) FROM duckdb_tables() WHERE schema_name = '{_FTS}'").fetchone()[0]:
        return
    con.execute("CREATE OR REPLACE TEMP TABLE _binac_fts_probe AS SELECT 1 AS id, 'x' AS t")
    con.execute("PRAGMA create_fts_index('_binac_fts_probe', 'id', 't', overwrite = 1)")


def _rows_sql(ws: Workspace, shard: Path, key: str) -> str:
    """The shard's rows whose feedback is not NULL: shard key, row, doc (the shard's code, then the row's rank in
    `ORDER`, ties by row), the columns of `DOC_COLUMNS`."""
    schema = storage.ensure_schema_shard(ws)
    rows = (
        f"SELECT {storage.sql_string(key)} AS shard, file_row_number AS row, {DOC_COLUMNS} "
        f"FROM read_parquet([{storage.sql_string(shard)}, {storage.sql_string(schema)}], union_by_name = true, "
        "file_row_number = true) WHERE feedback IS NOT NULL"
    )
    rank = f"row_number() OVER (ORDER BY {ORDER}, row) - 1"
    return (
        f"SELECT shard, row, ({shard_code(key)}::BIGINT << 32) | ({rank}) AS doc, * EXCLUDE (shard, row) FROM ({rows})"
    )


_TERMS_SQL = (
    f"WITH words AS MATERIALIZED (SELECT doc, unnest({_FTS}.tokenize(feedback)) AS w FROM _binac_rows), "
    "stems AS (SELECT w, stem(w, 'porter') AS term FROM (SELECT DISTINCT w FROM words) "
    f"WHERE w NOT IN (SELECT sw FROM {_FTS}.stopwords) AND w <> '') "
    "SELECT doc, term, count(*) AS tf FROM words JOIN stems USING (w) GROUP BY doc, term"
)
"""Each (feedback, term) with its count: FTS's tokens, stop words and empty tokens dropped, Porter-stemmed (each
distinct word stemmed once)."""

_STATS_SQL = (
    f"SELECT NULL::VARCHAR AS term, NULL::BIGINT AS tf, len, {FILTERS}, count(*) AS n FROM _binac_docs GROUP BY ALL "
    f"UNION ALL SELECT term, tf, len, {FILTERS}, count(*) AS n "
    "FROM _binac_terms JOIN _binac_docs USING (doc) GROUP BY ALL"
)
"""Per value of the filter columns: the documents of each length (term NULL) and the postings of each (term, tf,
len), `n` of each."""


def _copy(con: duckdb.DuckDBPyConnection, select: str, path: Path, row_group: int | None = None) -> None:
    """Write the result of `select` to `path` as Parquet, atomically."""
    options = "FORMAT parquet" + (f", ROW_GROUP_SIZE {row_group}" if row_group else "")
    with atomic_path(path) as tmp:
        con.execute(f"COPY ({select}) TO {storage.sql_string(tmp)} ({options})")


def build(con: duckdb.DuckDBPyConnection, ws: Workspace, shard: Path) -> tuple[Path, Path, Path]:
    """Write the index files of `shard` (each atomically) and return them."""
    _prepare(con)
    docs, terms, stats = index_files(ws, shard)
    key = f"{shard.parent.name}/{shard.name}"
    con.execute(f"CREATE OR REPLACE TEMP TABLE _binac_rows AS {_rows_sql(ws, shard, key)}")
    con.execute(f"CREATE OR REPLACE TEMP TABLE _binac_terms AS {_TERMS_SQL}")
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _binac_docs AS SELECT r.*, coalesce(l.len, 0)::BIGINT AS len FROM _binac_rows r "
        "LEFT JOIN (SELECT doc, sum(tf)::BIGINT AS len FROM _binac_terms GROUP BY doc) l USING (doc)"
    )
    _copy(con, "SELECT * FROM _binac_docs ORDER BY doc", docs, DOCS_ROW_GROUP)
    _copy(
        con,
        f"SELECT doc, term, tf, len, {FILTERS} FROM _binac_terms JOIN _binac_docs USING (doc) ORDER BY term, doc",
        terms,
        TERMS_ROW_GROUP,
    )
    _copy(con, f"{_STATS_SQL} ORDER BY term NULLS FIRST, tf, len", stats)
    con.execute("DROP TABLE _binac_rows; DROP TABLE _binac_terms; DROP TABLE _binac_docs")
    return docs, terms, stats


STALE_AFTER_S = 3600
"""Index files no current shard uses are deleted once this old (mtime): far longer than any query that may still
be reading them, so a reader never loses a file it listed."""


def drop_stale(ws: Workspace, current: set[Path], now: float) -> list[Path]:
    """Delete the index files (and temporary files of killed writers) under the index folder that are not in
    `current` and older than `STALE_AFTER_S` at time `now`: those of rewritten or deleted shards, and those of
    another layout. Returns them."""
    dropped = []
    for path in root(ws).glob("*/*"):
        try:
            if path not in current and path.stat().st_mtime < now - STALE_AFTER_S:
                path.unlink()
                dropped.append(path)
        except FileNotFoundError:  # another reader dropped it first
            continue
    return dropped


def refresh(con: duckdb.DuckDBPyConnection, ws: Workspace) -> list[tuple[Path, Path, Path]]:
    """Index every shard not indexed in its current form, drop stale index files (`drop_stale`); the current
    (docs, terms, stats) files, one triple per shard."""
    current = []
    for shard in _shards(ws):
        try:
            files = index_files(ws, shard)
            if not all(f.exists() for f in files):
                files = build(con, ws, shard)
        except FileNotFoundError:  # replaced while being indexed: the next query indexes its new form
            continue
        current.append(files)
    drop_stale(ws, {f for files in current for f in files}, time.time())
    return current


def attach(con: duckdb.DuckDBPyConnection, ws: Workspace) -> None:
    """Bring the index up to date and define the views `feedback_docs`, `feedback_terms` and `feedback_stats` over
    it in `con` (a connection with the fts extension loaded: `sqlrun.connect`). Each view adds `shard_no`, the
    shard's place in this query's list of shards: the same in the three views, so (shard_no, doc) names one row."""
    _prepare(con)  # the query tokenizes its words with FTS's tokenizer too
    current = refresh(con, ws)
    for i, kind in enumerate(KINDS):
        files = "[" + ", ".join(storage.sql_string(files[i]) for files in current) + "]"
        con.execute(
            f"CREATE OR REPLACE TEMP VIEW feedback_{kind} AS SELECT *, file_index AS shard_no FROM read_parquet({files})"
        )
