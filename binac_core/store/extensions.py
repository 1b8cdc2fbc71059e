"""The DuckDB extensions binac uses, `fts` (the feedback search) and `httpfs` (the object store's shards), loaded in
place from their pinned PyPI packages' files.

The packages are `duckdb-extension-fts` and `duckdb-extension-httpfs`, in the layout that
`duckdb_extensions.import_extension` reads (https://pypi.org/project/duckdb-extensions/). `LOAD '<file>'` reads the
package's signed extension file where it lies: nothing is downloaded, nothing is copied into an extension folder
(an `INSTALL` would write a 12-21 MB copy into every `$BINAC_HOME`), and the code loaded is the pinned package's,
whatever copy DuckDB may have installed elsewhere. `CONFIG` turns DuckDB's automatic installs off, so a query never
fetches or writes an extension either."""

from __future__ import annotations

import importlib
import importlib.resources
from enum import Enum
from pathlib import Path

import duckdb

from binac_core.errors import BinacError

CONFIG = {"autoinstall_known_extensions": False}
"""Connection settings for every connection that loads an extension: no automatic install (it writes files)."""


class Extension(str, Enum):
    """A DuckDB extension binac loads, by its DuckDB name."""

    FTS = "fts"
    HTTPFS = "httpfs"


def packaged_file(con: duckdb.DuckDBPyConnection, extension: Extension) -> Path:
    """The extension's file in its PyPI package, for the DuckDB version `con` runs; a one-line error naming the
    package when it is missing or was built for another DuckDB."""
    version = con.execute("PRAGMA version").fetchone()[0]
    package = f"duckdb-extension-{extension.value}"
    try:
        module = importlib.import_module(f"duckdb_extension_{extension.value}")
    except ImportError:
        raise BinacError(
            f"DuckDB's {extension.value} extension is missing: pip install {package} (make install does)"
        ) from None
    path = Path(str(importlib.resources.files(module))) / "extensions" / version / f"{extension.value}.duckdb_extension"
    if not path.is_file():
        raise BinacError(f"{package} has no build for DuckDB {version} ({path} missing): pin it to duckdb's version")
    return path


def load(con: duckdb.DuckDBPyConnection, extension: Extension) -> None:
    """Load the extension into `con` from its package's file (`packaged_file`), without installing it."""
    path = str(packaged_file(con, extension)).replace("'", "''")
    con.execute(f"LOAD '{path}'")
