"""Where `binac sql` finds its files: the repository's top-level `sql/` holds the schema and the queries, one copy
each; from a checkout a query is read by its path (`sql/method_summary.sql`), and by its file name alone from any
folder (the wheel ships the same files as `binac_core/sql/`: tests/integration/test_wheel.py)."""

from __future__ import annotations

import subprocess

import pytest
from conftest import REPO

from binac_core.errors import BinacError
from binac_core.store import sqlrun, storage


def test_the_sql_files_live_in_the_top_level_sql_folder_once():
    tracked = subprocess.run(
        ["git", "ls-files", "*.sql"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    assert tracked and all(name.startswith("sql/") and name.count("/") == 1 for name in tracked), tracked
    assert storage.SQL_DIR == REPO / "sql" and sqlrun.QUERY_DIR == storage.SQL_DIR
    assert storage.SCHEMA_SQL == REPO / "sql" / "schema.sql" and "CREATE TABLE" in storage.schema_sql()


def test_a_query_by_its_checkout_path_and_by_its_name_from_any_folder(tmp_path, monkeypatch):
    text = (REPO / "sql" / "method_summary.sql").read_text()
    monkeypatch.chdir(REPO)
    assert sqlrun.read_query("sql/method_summary.sql") == text
    monkeypatch.chdir(tmp_path)
    assert sqlrun.read_query("method_summary.sql") == text
    assert sqlrun.read_query("sql/method_summary.sql") == text  # a missing path falls back to the name
    own = tmp_path / "method_summary.sql"
    own.write_text("SELECT 1 AS mine")
    assert sqlrun.read_query("method_summary.sql") == "SELECT 1 AS mine"  # a file that exists comes first


def test_an_unknown_query_file_names_binac_s_own(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(BinacError, match=r"SQL file not found: nope\.sql .*method_summary\.sql") as err:
        sqlrun.read_query("nope.sql")
    assert "schema.sql" not in str(err.value)
