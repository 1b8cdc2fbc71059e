"""Running SQL over the trajectory store, for `binac sql` and for tests.

A query runs in a private in-memory DuckDB connection that defines the same `trajectories` view as
`trajectories.duckdb` (over the Parquet shards), so it never takes a lock on the store and works while training
runs are still writing. The full-text-search extension is loaded from its pinned PyPI package
(`binac_core.store.extensions`).

Query files declare parameters in comments, `-- @param name = default`; `$name` in the SQL refers to them. A value
given for a parameter whose default is a number must be a number of that kind (checked before the query runs).
A file may hold several statements; the result of the last one is returned.

The parameter `$comparison` selects the runs of one comparison (one MLflow parent run: `binac compare` or
`binac study`): a query that uses it gets the parent run id, resolved here from what the user gave (`latest`, a
parent run id or a unique prefix of one, or `all`), and the result says which comparison that was
(`Result.comparison`).

A query that names `feedback_docs`, `feedback_terms` or `feedback_stats` (sql/feedback_search.sql) gets those views
over the feedback index (binac_core/store/feedback_index.py), first brought up to date with the shards written since
the last query; the index files are immutable, so this takes no lock either.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import duckdb

from binac_core.errors import BinacError
from binac_core.foundation.workspace import Workspace
from binac_core.store import extensions, feedback_index, storage

FEEDBACK_INDEX_RE = re.compile(r"\bfeedback_(docs|terms|stats)\b")  # a query that reads the feedback index
PARAM_RE = re.compile(r"^--\s*@param\s+(\w+)\s*=\s*(.*?)\s*$", re.M)
COMPARISON = "comparison"  # the parameter that selects one comparison's runs
RECENT = 3  # how many of the most recent comparisons an unknown comparison id's error lists


def connect(ws: Workspace) -> duckdb.DuckDBPyConnection:
    """`storage.connect` (in memory, no lock on the store) with the full-text-search extension loaded, persistent
    secrets and extension installs off (both write files), join keys pushed into scans up to
    `feedback_index.DYNAMIC_OR_FILTERS` values, and the configuration locked (`ALLOWED`)."""
    con = storage.connect(
        ws,
        {
            **extensions.CONFIG,
            "allow_persistent_secrets": False,
            "dynamic_or_filter_threshold": feedback_index.DYNAMIC_OR_FILTERS,
        },
    )
    extensions.load(con, extensions.Extension.FTS)
    con.execute("SET lock_configuration = true")  # a query cannot change a setting (the extension folder, say)
    return con


QUERY_DIR = storage.SQL_DIR
"""The schema and the analysis queries (the repository's `sql/`, shipped in the wheel): `binac sql
method_summary.sql` finds them by name from any folder, a wheel install included."""


def read_query(text_or_path: str) -> str:
    """The SQL of a query string, a `.sql` file, or the name of a query in `QUERY_DIR` (a path that does not
    exist, e.g. `critic_health.sql`, is looked up there by its file name)."""
    if text_or_path.strip().lower().endswith(".sql"):
        path = Path(text_or_path)
        packaged = QUERY_DIR / path.name
        if not path.exists() and packaged.is_file():
            path = packaged
        if not path.exists():
            known = ", ".join(sorted(p.name for p in QUERY_DIR.glob("*.sql") if p.name != "schema.sql"))
            raise BinacError(f"SQL file not found: {text_or_path} (binac's own queries: {known})")
        return path.read_text()
    return text_or_path


def declared_params(sql: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in PARAM_RE.finditer(sql)}


# --- parameter values ---


def _number_kind(text: str) -> type | None:
    """int or float when `text` (a declared default) is a number of that kind, else None (a text parameter)."""
    for kind in (int, float):
        try:
            kind(text)
            return kind
        except ValueError:
            pass
    return None


def _inferred(text: str):
    """An undeclared parameter's value: an int or a float when it reads as one, else the text (quotes stripped)."""
    kind = _number_kind(text)
    return kind(text) if kind else text.strip("'\"")


def convert(name: str, value, default: str | None):
    """The value bound to `$name`: of the declared default's kind (a number default takes only numbers: `abc`
    for `per_run = 0` is refused, naming the parameter), text for a text default, inferred when undeclared."""
    text = str(value)
    if default is None:
        return _inferred(text)
    kind = _number_kind(default)
    if kind is None:
        return text.strip("'\"")
    try:
        return kind(text)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise BinacError(
            f"query parameter ${name}: could not convert {text!r} to {what} (its default is {default})"
        ) from None


# --- statements ---

_TOKEN_RE = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|--[^\n]*|/\*.*?\*/|;|\$\w+|[^'\"\-/;$]+|.", re.S)


def statements(sql: str) -> list[tuple[str, set[str]]]:
    """`sql` split at the `;`s outside string literals, quoted identifiers and comments, each statement with the
    `$name` parameters it uses (a `$name` inside a literal or a comment is text, not a parameter). Whole-statement
    parsing is left to DuckDB at execution: its own `extract_statements` cannot split ahead of time, since it
    expands `PRAGMA create_fts_index` against tables that earlier statements create."""
    out, text, used, code = [], [], set(), False
    for tok in _TOKEN_RE.findall(sql):
        if tok == ";":
            if code:
                out.append(("".join(text).strip(), used))
            text, used, code = [], set(), False
            continue
        text.append(tok)
        if tok.startswith("$"):
            used.add(tok[1:])
        code = code or not (tok.isspace() or tok.startswith("--") or tok.startswith("/*"))
    if code:
        out.append(("".join(text).strip(), used))
    return out


def _first_lines(sql: str, stmts: list[tuple[str, set[str]]]) -> list[int]:
    """The line of `sql` on which each statement starts (1-based), for error messages."""
    lines, cursor = [], 0
    for stmt, _ in stmts:
        pos = sql.find(stmt, cursor)
        lines.append(sql.count("\n", 0, max(pos, 0)) + 1)
        cursor = max(pos, cursor)
    return lines


# --- the comparison a query runs on ---


@dataclass
class Comparison:
    """The runs a query that uses `$comparison` ran on. `requested`: as given (`latest`, `all`, a parent run id or a
    prefix of one); `id`: the parent run id it resolved to, or `all`; then the store's rows of those runs: the
    presets, the number of runs, the first and last `created_at` (UTC). With `all`, `comparisons` and
    `standalone` count the parent runs and the runs without one; `note` says why `latest` meant `all`."""

    requested: str
    id: str
    presets: list[str] = field(default_factory=list)
    runs: int = 0
    first: datetime | None = None
    last: datetime | None = None
    comparisons: int = 0
    standalone: int = 0
    note: str = ""

    def describe(self) -> str:
        """One line naming the comparison and its rows, e.g. `comparison 1f..: preset micro, 8 runs, rows from
        2025-01-02 10:00:01 to 2025-01-02 10:04:10 UTC` (the header `binac sql` prints)."""
        if self.id == "all":
            pooled = self.note or (
                f"every run in the store pooled: {_plural(self.comparisons, 'comparison')}, "
                f"{_plural(self.standalone, 'standalone run')}"
            )
            head = f"comparison all ({pooled})"
        else:
            head = f"comparison {self.id}" + (" (latest)" if self.requested == "latest" else "")
        if not self.runs:
            return f"{head}: no rows in the store"
        presets = f"preset{'s' if len(self.presets) > 1 else ''} {', '.join(self.presets)}"
        return (
            f"{head}: {presets}, {_plural(self.runs, 'run')}, rows from {self.first:%Y-%m-%d %H:%M:%S} "
            f"to {self.last:%Y-%m-%d %H:%M:%S} UTC"
        )


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


_STATS = (
    "list(DISTINCT preset ORDER BY preset), count(DISTINCT run_id), min(created_at), max(created_at), "
    "count(DISTINCT parent_run_id), count(DISTINCT run_id) FILTER (WHERE parent_run_id IS NULL)"
)


def comparisons(con: duckdb.DuckDBPyConnection) -> list[tuple]:
    """The store's comparisons, the most recently started first (the parent whose earliest row is newest):
    (parent run id, presets, runs, first created_at, last created_at) each."""
    return con.execute(
        "SELECT parent_run_id, list(DISTINCT preset ORDER BY preset), count(DISTINCT run_id), min(created_at), "
        "max(created_at) FROM trajectories WHERE parent_run_id IS NOT NULL GROUP BY parent_run_id "
        "ORDER BY min(created_at) DESC, parent_run_id"
    ).fetchall()


def _everything(con: duckdb.DuckDBPyConnection, requested: str, note: str = "") -> Comparison:
    presets, runs, first, last, parents, standalone = con.execute(f"SELECT {_STATS} FROM trajectories").fetchone()
    return Comparison(requested, "all", presets or [], runs, first, last, parents, standalone, note)


def resolve_comparison(con: duckdb.DuckDBPyConnection, requested: str) -> Comparison:
    """`latest` -> the most recently started comparison (`all` when no row has a parent run id: a store of
    standalone runs, or one written before rows carried it); `all` -> every run; otherwise a parent run id, or a
    unique prefix of one. An id that is not a comparison in the store is a one-line error listing the recent ones."""
    requested = requested.strip()
    if requested == "all":
        return _everything(con, requested)
    known = comparisons(con)
    if requested == "latest":
        if not known:
            return _everything(con, requested, "latest: no run in the store belongs to a comparison, so every run")
        parent, presets, runs, first, last = known[0]
        return Comparison(requested, parent, presets, runs, first, last)
    matches = [c for c in known if c[0] == requested] or [c for c in known if requested and c[0].startswith(requested)]
    if len(matches) == 1:
        parent, presets, runs, first, last = matches[0]
        return Comparison(requested, parent, presets, runs, first, last)
    if len(matches) > 1:
        raise BinacError(
            f"comparison {requested!r} is the start of {len(matches)} comparisons' ids: "
            f"{', '.join(c[0] for c in matches[:RECENT])}; give more of it"
        )
    raise BinacError(_unknown_comparison(con, requested, known))


def _unknown_comparison(con: duckdb.DuckDBPyConnection, requested: str, known: list[tuple]) -> str:
    """The one-line message for a comparison id the store does not have: what the id is instead (a run of a
    comparison, a standalone run) or the most recent comparisons to choose from."""
    run = con.execute(
        "SELECT any_value(parent_run_id) FROM trajectories WHERE run_id = ? GROUP BY run_id", [requested]
    ).fetchone()
    if run and run[0]:
        return (
            f"comparison {requested!r} is a run of comparison {run[0]}, not a comparison; "
            f"use --param comparison={run[0]}"
        )
    if run:
        return f"comparison {requested!r} is a standalone run (no parent run), not a comparison; use comparison=all"
    if not known:
        return (
            f"comparison {requested!r} is not in the store, and no run in it belongs to a comparison; "
            f"use comparison=all"
        )
    recent = "; ".join(
        f"{p} ({', '.join(presets)}, {_plural(n, 'run')}, started {first:%Y-%m-%d %H:%M:%S})"
        for p, presets, n, first, _ in known[:RECENT]
    )
    return f"comparison {requested!r} is not in the store; the most recent: {recent} (or: latest, all)"


# --- running ---


@dataclass
class Result:
    """A query's outcome: `df` (None for a statement without a result), the parameter values in effect (declared
    order first; `comparison` as resolved), and the comparison it ran on (None when it uses no `$comparison`)."""

    df: object
    params: dict[str, object]
    comparison: Comparison | None = None


def _given_values(sql: str, params: dict | None) -> tuple[dict[str, str], dict[str, str]]:
    """(declared defaults, the values in effect as text): the defaults overridden by `params`; a parameter the
    query neither declares nor uses is an error."""
    declared = declared_params(sql)
    values = dict(declared)
    for name, value in (params or {}).items():
        if name not in declared and f"${name}" not in sql:
            raise BinacError(f"unknown query parameter {name!r} (declared: {', '.join(declared) or 'none'})")
        values[name] = str(value)
    return declared, values


def execute(ws: Workspace, sql: str, params: dict | None = None) -> Result:
    """Run `sql` with its declared defaults overridden by `params`; `$comparison` is resolved first (see
    `resolve_comparison`). Bad parameters and SQL errors are BinacErrors that name what was wrong."""
    declared, values = _given_values(sql, params)
    stmts = statements(sql)
    if not stmts:
        raise BinacError("empty SQL")
    used_names = set().union(*(names for _, names in stmts))
    missing = used_names - values.keys()
    if missing:
        raise BinacError(f"query parameter ${sorted(missing)[0]} has no value (declare it: -- @param name = ...)")
    order = [*declared, *sorted(used_names - declared.keys())]
    bound = {k: convert(k, values[k], declared.get(k)) for k in order if k in used_names}
    con = connect(ws)
    try:
        if FEEDBACK_INDEX_RE.search(sql):
            feedback_index.attach(con, ws)
        comparison = resolve_comparison(con, str(bound[COMPARISON])) if COMPARISON in bound else None
        if comparison:
            bound[COMPARISON] = comparison.id
        return Result(_run_statements(con, sql, stmts, bound), bound, comparison)
    finally:
        con.close()


def run(ws: Workspace, sql: str, params: dict | None = None):
    """Run `sql` (with declared defaults overridden by `params`); returns a pandas DataFrame (None for a statement
    without a result)."""
    return execute(ws, sql, params).df


ALLOWED = frozenset(
    {
        "SELECT",
        "EXPLAIN",
        "CREATE",
        "INSERT",
        "UPDATE",
        "DELETE",
        "DROP",
        "ALTER",
        "PRAGMA",
        "PREPARE",
        "EXECUTE",
        "TRANSACTION",
        "VACUUM",
    }
)
"""The statement kinds (DuckDB's `StatementType`) a query may run: they read the store's shards or act on the
connection's private in-memory catalog (TEMP tables and macros, an FTS index), which lives and dies with the
process. Every other kind could reach a file, an attached database or the configuration (COPY ... TO, EXPORT,
ATTACH, DETACH, INSTALL and LOAD, SET, CALL, COPY FROM DATABASE, ...) and is refused before it runs
(`check_statement`); `--out` is the way to save a result. Persistent secrets, the one CREATE that writes a
file, are switched off on the connection, and its configuration is locked (`connect`)."""


def check_statement(con: duckdb.DuckDBPyConnection, stmt: str, where: str = "") -> None:
    """Refuse `stmt` with one line when DuckDB's own parse of it (`extract_statements`, on this connection, so a
    `PRAGMA` is expanded into what it runs) holds a kind outside `ALLOWED`. A statement DuckDB cannot parse is
    left to execution, which reports the parse error."""
    try:
        kinds = [s.type.name for s in con.extract_statements(stmt)]
    except duckdb.Error:
        return
    refused = [k for k in kinds if k not in ALLOWED]
    if refused:
        raise BinacError(
            f"binac sql runs read-only over the store: a {refused[0]} statement could change files or "
            f"databases outside its private in-memory one, and is refused{where} (save a result with "
            "--out)"
        )


def _run_statements(con: duckdb.DuckDBPyConnection, sql: str, stmts: list[tuple[str, set[str]]], bound: dict):
    """Each statement in turn with the parameters it uses, each checked before it runs (`check_statement`); the
    last one's result as a DataFrame."""
    result = None
    for i, (stmt, names) in enumerate(stmts):
        used = {k: bound[k] for k in names}
        check_statement(con, stmt, f" (statement {i + 1} of {len(stmts)})" if len(stmts) > 1 else "")
        try:
            result = con.execute(stmt, used) if used else con.execute(stmt)
        except duckdb.Error as exc:
            where = (
                f"\n(in statement {i + 1} of {len(stmts)}, from line {_first_lines(sql, stmts)[i]} of the query)"
                if len(stmts) > 1
                else ""
            )
            raise sql_error(exc, used, where) from None
    return result.df() if result.description else None


def sql_error(exc: duckdb.Error, used: dict, where: str = "") -> BinacError:
    """DuckDB's whole message (with its hints: "Candidate bindings", "Did you mean", the LINE marker), prefixed
    `SQL error:`; a value DuckDB could not convert names the parameter that carried it."""
    message = str(exc).strip()
    if isinstance(exc, duckdb.ConversionException):
        culprits = [k for k, v in used.items() if isinstance(v, str) and f"'{v}'" in message]
        if culprits:
            return BinacError(f"query parameter ${culprits[0]}: {message}")
    return BinacError(f"SQL error: {message}{where}")
