"""`binac sql`: print a query's result as a table, or write it to CSV/Parquet with --out."""

from __future__ import annotations

from pathlib import Path

from binac_core import sqlrun
from binac_core.errors import BinacError
from binac_core.workspace import workspace


def run_sql(query: str, param_items: list[str], out: str | None) -> int:
    params = {}
    for item in param_items:
        name, sep, value = item.partition("=")
        if not sep:
            raise BinacError(f"--param expects name=value (got {item!r})")
        params[name] = value
    if out and Path(out).suffix not in (".csv", ".parquet"):
        raise BinacError(f"--out must end in .csv or .parquet (got {out!r})")
    df = sqlrun.run(workspace(), sqlrun.read_query(query), params)
    if df is None:
        print("ok")
    elif out:
        (df.to_csv(out, index=False) if out.endswith(".csv") else df.to_parquet(out, index=False))
        print(f"{len(df)} rows -> {out}")
    else:
        import pandas as pd

        with pd.option_context("display.max_rows", 200, "display.max_columns", 50, "display.width", 200,
                               "display.max_colwidth", 80):
            print(df.to_string(index=False))
    return 0
