"""`binac sql` cannot change anything outside its private in-memory database (binac_core/store/sqlrun.py,
`ALLOWED`): each statement that could reach a file, an attached database or the configuration is refused with one
line before it runs, classified from DuckDB's own parse, and the store's files are byte for byte unchanged after
each attempt; TEMP tables, macros and an FTS index, which the shipped queries make, still work."""

from __future__ import annotations

import hashlib

import pytest
from trajectory_rows import trajectory_row

from binac_core.errors import BinacError
from binac_core.foundation.workspace import Workspace
from binac_core.store import sqlrun, storage


@pytest.fixture
def ws(tmp_path):
    ws = Workspace(tmp_path / "home")
    row = trajectory_row(run_id="r", protocol="feedback", feedback="Step 2 is wrong.")
    storage.write_shard(ws, "r", "eval-feedback", 0, [row])
    sqlrun.run(ws, "SELECT count(*) FROM trajectories")  # the first query installs the extension and the schema shard
    return ws


def _digests(root) -> dict:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


REFUSED = {
    "COPY (SELECT 1) TO '{dir}/x.csv'": "COPY",
    "COPY trajectories TO '{shard}'": "COPY",
    "EXPORT DATABASE '{dir}/dump'": "EXPORT",
    "ATTACH '{dir}/x.duckdb' AS x; CREATE TABLE x.t AS SELECT 1": "ATTACH",
    "ATTACH '{home}/trajectories.duckdb' AS store": "ATTACH",
    "DETACH memory": "DETACH",
    "INSTALL httpfs": "LOAD",
    "LOAD fts": "LOAD",
    "SET temp_directory = '{dir}'": "SET",
    "CALL duckdb_tables()": "CALL",
    "COPY FROM DATABASE memory TO x": "COPY_DATABASE",
}


@pytest.mark.parametrize("statement, kind", REFUSED.items())
def test_a_statement_that_could_write_outside_is_refused_before_it_runs(ws, tmp_path, statement, kind):
    shard = next((ws.home / "trajectories").rglob("*.parquet"))
    before = _digests(ws.home)
    sql = statement.format(dir=tmp_path, shard=shard, home=ws.home)
    with pytest.raises(BinacError) as err:
        sqlrun.execute(ws, sql, {})
    line = str(err.value)
    assert "\n" not in line and f"a {kind} statement" in line and "--out" in line
    assert _digests(ws.home) == before  # the store's files, byte for byte
    assert not (tmp_path / "x.csv").exists() and not (tmp_path / "x.duckdb").exists()
    assert not (tmp_path / "dump").exists()


def test_persistent_secrets_and_extension_installs_are_off_and_settings_locked(ws, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    before = _digests(ws.home)
    df = sqlrun.run(
        ws,
        "SELECT current_setting('allow_persistent_secrets') AS secrets, "
        "current_setting('autoinstall_known_extensions') AS installs, "
        "current_setting('lock_configuration') AS locked",
    )
    assert df.to_dict("list") == {"secrets": [False], "installs": [False], "locked": [True]}
    with pytest.raises(BinacError):
        sqlrun.execute(ws, "CREATE PERSISTENT SECRET s (TYPE s3, KEY_ID 'k', SECRET 's')", {})
    assert not (tmp_path / ".duckdb").exists() and _digests(ws.home) == before


def test_temp_tables_macros_and_an_fts_index_still_work(ws):
    before = _digests(ws.home)
    df = sqlrun.run(
        ws,
        "CREATE OR REPLACE TEMP TABLE docs AS SELECT problem_id AS id, feedback AS t FROM trajectories;"
        "CREATE OR REPLACE TEMP MACRO twice(x) AS 2 * x;"
        "PRAGMA create_fts_index('docs', 'id', 't', overwrite = 1);"
        "SELECT id, twice(1) AS two, fts_main_docs.match_bm25(id, 'wrong') IS NOT NULL AS hit "
        "FROM docs",
    )
    assert df.to_dict("list") == {"id": ["q0"], "two": [2], "hit": [True]}
    assert _digests(ws.home) == before
