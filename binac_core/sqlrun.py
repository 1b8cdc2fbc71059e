"""Running SQL over the trajectory store, for `binac sql` and for tests.

A query runs in a private in-memory DuckDB connection that defines the same `trajectories` view as
`trajectories.duckdb` (over the Parquet shards), so it never takes a lock on the store and works while training
runs are still writing. The full-text-search extension is installed from the pinned PyPI package
(`duckdb-extension-fts`), offline, into `$BINAC_HOME/duckdb_extensions`.

Query files declare parameters in comments, `-- @param name = default`; `$name` in the SQL refers to them.
A file may hold several statements; the result of the last one is returned.
"""

from __future__ import annotations

import re
from pathlib import Path

import duckdb

from binac_core import storage
from binac_core.errors import BinacError
from binac_core.workspace import Workspace

PARAM_RE = re.compile(r"^--\s*@param\s+(\w+)\s*=\s*(.*?)\s*$", re.M)


def connect(ws: Workspace) -> duckdb.DuckDBPyConnection:
    """`storage.connect` (in memory, no lock on the store) with the full-text-search extension loaded."""
    ext_dir = ws.home / "duckdb_extensions"
    ext_dir.mkdir(parents=True, exist_ok=True)
    con = storage.connect(ws, {"extension_directory": str(ext_dir)})
    try:
        con.execute("LOAD fts")
    except duckdb.Error:
        import duckdb_extensions

        duckdb_extensions.import_extension("fts", con=con)
        con.execute("LOAD fts")
    return con


def read_query(text_or_path: str) -> str:
    if text_or_path.strip().lower().endswith(".sql"):
        path = Path(text_or_path)
        if not path.exists():
            raise BinacError(f"SQL file not found: {text_or_path}")
        return path.read_text()
    return text_or_path


def declared_params(sql: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in PARAM_RE.finditer(sql)}


def _value(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text.strip("'\"")


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


def run(ws: Workspace, sql: str, params: dict[str, str] | None = None):
    """Run `sql` (with declared defaults overridden by `params`); returns a pandas DataFrame."""
    values = declared_params(sql)
    for name, value in (params or {}).items():
        if name not in values and f"${name}" not in sql:
            raise BinacError(f"unknown query parameter {name!r} (declared: {', '.join(values) or 'none'})")
        values[name] = value
    stmts = statements(sql)
    if not stmts:
        raise BinacError("empty SQL")
    missing = set().union(*(names for _, names in stmts)) - values.keys()
    if missing:
        raise BinacError(f"query parameter ${sorted(missing)[0]} has no value (declare it: -- @param name = ...)")
    con = connect(ws)
    try:
        result = None
        for stmt, names in stmts:
            used = {k: _value(values[k]) for k in names}
            result = con.execute(stmt, used) if used else con.execute(stmt)
        return result.df() if result.description else None
    except duckdb.Error as exc:
        raise BinacError(f"SQL error: {str(exc).splitlines()[0]}") from None
    finally:
        con.close()
