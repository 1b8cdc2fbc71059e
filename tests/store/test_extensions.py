"""DuckDB's extensions load from their pinned PyPI packages' files in place (`binac_core.store.extensions`):
nothing is installed or copied under `$BINAC_HOME`, a missing package or a build for another DuckDB is a one-line
error naming the package."""

from __future__ import annotations

import duckdb
import pytest
from trajectory_rows import trajectory_row

from binac_core.errors import BinacError
from binac_core.foundation.workspace import Workspace
from binac_core.store import extensions, sqlrun, storage

LOADED = "SELECT extension_name FROM duckdb_extensions() WHERE loaded AND extension_name = ?"


@pytest.mark.parametrize("extension", list(extensions.Extension))
def test_each_extension_loads_from_its_package_without_writing_a_file(extension, tmp_path):
    """Loaded from the package's file: the connection reports it loaded, and its extension folder stays empty."""
    folder = tmp_path / "ext"
    folder.mkdir()
    con = duckdb.connect(config={**extensions.CONFIG, "extension_directory": str(folder)})
    path = extensions.packaged_file(con, extension)
    assert path.name == f"{extension.value}.duckdb_extension" and duckdb.__version__ in path.parent.name
    extensions.load(con, extension)
    assert con.execute(LOADED, [extension.value]).fetchall() == [(extension.value,)]
    assert list(folder.iterdir()) == []


def test_a_query_leaves_nothing_but_the_store_under_the_home(tmp_path):
    """`binac sql`'s connection (fts loaded) writes no extension copy into `$BINAC_HOME` (each copy was 12 MB)."""
    ws = Workspace(tmp_path / "home")
    storage.write_shard(ws, "a", "train", 1, [trajectory_row(run_id="a", feedback="a zebra crossed step 2")])
    assert sqlrun.run(ws, "SELECT count(*) AS n FROM trajectories").n[0] == 1
    assert list(ws.home.rglob("*duckdb_extension*")) == []


def test_a_missing_package_is_a_one_line_error_naming_it(monkeypatch):
    real_import = extensions.importlib.import_module

    def without_fts(name):
        if name == "duckdb_extension_fts":
            raise ImportError(name)
        return real_import(name)

    monkeypatch.setattr(extensions.importlib, "import_module", without_fts)
    with pytest.raises(BinacError, match=r"pip install duckdb-extension-fts") as err:
        extensions.load(duckdb.connect(), extensions.Extension.FTS)
    assert "\n" not in str(err.value)


def test_a_build_for_another_duckdb_is_refused_naming_both_versions(tmp_path, monkeypatch):
    """A package whose files are for another DuckDB version (a pin out of step with duckdb's) is refused."""
    other = tmp_path / "duckdb_extension_fts"
    (other / "extensions" / "v0.0.1").mkdir(parents=True)
    (other / "extensions" / "v0.0.1" / "fts.duckdb_extension").write_bytes(b"")
    monkeypatch.setattr(extensions.importlib.resources, "files", lambda module: other)
    con = duckdb.connect()
    with pytest.raises(BinacError, match=rf"no build for DuckDB v{duckdb.__version__}"):
        extensions.load(con, extensions.Extension.FTS)
