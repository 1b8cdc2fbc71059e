"""`binac sql`: print a query's result as a table, or write it to CSV/Parquet with --out.

A query over one comparison (one that uses `$comparison`, as the summaries in sql/ do) first prints a header line
naming it (`comparison <parent run id> (latest): preset micro, 8 runs, rows from ... to ... UTC`); the table then
leaves out the `comparison` column when it only repeats that id (a file written with --out keeps it). An empty
result prints `(no rows)` and the parameters in effect, so that a filter that matched nothing is easy to spot.
"""

from __future__ import annotations

from pathlib import Path

from binac_core.errors import BinacError
from binac_core.foundation.workspace import workspace
from binac_core.store import sqlrun


def parse_params(items: list[str]) -> dict[str, str]:
    """`--param name=value` items as {name: value}."""
    params = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise BinacError(f"--param expects name=value (got {item!r})")
        params[name] = value
    return params


def filters_line(res: sqlrun.Result) -> str:
    """The parameters in effect, e.g. `filters: comparison=latest (-> 1f2e...), preset=%, method=%, per_run=0`."""
    parts = []
    for name, value in res.params.items():
        c = res.comparison
        if name == sqlrun.COMPARISON and c is not None and c.requested != c.id:
            parts.append(f"{name}={c.requested} (-> {c.id})")
        else:
            parts.append(f"{name}={value}")
    return "filters: " + (", ".join(parts) if parts else "none (the query has no parameters)")


def shown(res: sqlrun.Result):
    """The table to print: without the `comparison` column when it only repeats the header's comparison."""
    df, c = res.df, res.comparison
    if c is not None and "comparison" in df.columns:
        values = df["comparison"].unique()
        if len(values) == 1 and values[0] == c.id:
            return df.drop(columns="comparison")
    return df


def table_text(df) -> str:
    import pandas as pd

    with pd.option_context(
        "display.max_rows", 200, "display.max_columns", 50, "display.width", 200, "display.max_colwidth", 80
    ):
        return df.to_string(index=False)


def write_out(df, out: str) -> None:
    (df.to_csv(out, index=False) if out.endswith(".csv") else df.to_parquet(out, index=False))


def run_sql(query: str, param_items: list[str], out: str | None) -> int:
    params = parse_params(param_items)
    if out and Path(out).suffix not in (".csv", ".parquet"):
        raise BinacError(f"--out must end in .csv or .parquet (got {out!r})")
    res = sqlrun.execute(workspace(), sqlrun.read_query(query), params)
    if res.df is None:
        print("ok")
        return 0
    if res.comparison is not None:
        print(res.comparison.describe())
    if out:
        write_out(res.df, out)
        print(f"{len(res.df)} rows -> {out}")
    if res.df.empty:
        print("(no rows)")
        print(filters_line(res))
    elif not out:
        print(table_text(shown(res)))
    return 0
