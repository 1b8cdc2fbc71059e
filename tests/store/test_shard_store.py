"""Trajectory shards in the object store (`binac_core.store.shard_store`) on a real S3 endpoint, `moto_server` (the
`object_store` fixture): rows written under one `$BINAC_HOME` are read, every row exactly once, under a second,
empty one, by the store's reader and by `binac sql`; one object per shard, replaced whole by a re-run. Without
`BINAC_STORE` nothing of the store runs (no boto3 import)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest
from conftest import REPO
from trajectory_rows import trajectory_row

from binac_core.foundation.objects import store_from_env
from binac_core.foundation.workspace import Workspace
from binac_core.store import sqlrun, storage

ROWS = "SELECT run_id, protocol, step, sample_idx, attempt_reward FROM trajectories ORDER BY ALL"


@pytest.fixture
def store_env(object_store, monkeypatch) -> dict:
    """`BINAC_STORE` naming a fresh bucket (prefix `lab`) on the session's moto_server, set in this process."""
    env = {**object_store, "BINAC_STORE": f"s3://t-{uuid.uuid4().hex[:12]}/lab"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    store_from_env().ensure_bucket()
    return env


def _write(ws: Workspace) -> None:
    """Run a: a train step of 2 samples (written twice: the re-run's rewards 1.0 replace the first's 0.0) and a
    step-1 evaluation of 1 sample; run b: one train step of 1 sample. 4 rows in 3 shards."""
    for reward in (0.0, 1.0):
        rows = [
            trajectory_row(run_id="a", step=1, split="train", protocol="train", sample_idx=i, attempt_reward=reward)
            for i in range(2)
        ]
        storage.write_shard(ws, "a", "train", 1, rows)
    storage.write_shard(ws, "a", "eval-single", 1, [trajectory_row(run_id="a", step=1, attempt_reward=0.5)])
    storage.write_shard(ws, "b", "train", 2, [trajectory_row(run_id="b", step=2, split="train", protocol="train")])


EXPECTED = [
    ("a", "single", 1, 0, 0.5),
    ("a", "train", 1, 0, 1.0),
    ("a", "train", 1, 1, 1.0),
    ("b", "train", 2, 0, 0.0),
]


def test_rows_written_under_one_home_are_read_under_another_exactly_once(store_env, tmp_path):
    _write(Workspace(tmp_path / "host-a"))
    store = store_from_env()
    keys = store.keys("trajectories")
    assert [k for k in keys if not k.startswith("trajectories/_schema/")] == [
        "trajectories/a/eval-single-step00001.parquet",
        "trajectories/a/train-step00001.parquet",
        "trajectories/b/train-step00002.parquet",
    ], "one object per shard, the re-run's replacing the first"
    assert len(keys) == 4, "and the schema shard"

    home_b = Workspace(tmp_path / "host-b")
    df = sqlrun.run(home_b, ROWS)
    assert list(df.itertuples(index=False, name=None)) == EXPECTED
    assert not [p for p in home_b.shards.glob("*/*.parquet") if p.parent.name != "_schema"], "read in place"

    env = {**os.environ, **store_env, "BINAC_HOME": str(tmp_path / "host-c")}
    query = "SELECT run_id, count(*) AS n, sum(attempt_reward) AS r FROM trajectories GROUP BY 1 ORDER BY 1"
    out = subprocess.run(
        [sys.executable, "-m", "flows.cli", "sql", query, "--out", str(tmp_path / "out.csv")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert (tmp_path / "out.csv").read_text().splitlines() == ["run_id,n,r", "a,3,2.5", "b,1,0.0"]


def test_the_feedback_search_finds_rows_another_host_wrote(store_env, tmp_path):
    """The feedback index indexes digest-checked local copies of the store's shards: a search under an empty home
    finds the other host's row, and finds the re-run's text, not the first's."""
    ws = Workspace(tmp_path / "host-a")
    rows = [trajectory_row(run_id="a", split="train", protocol="train", feedback="a zebra crossed step 2")]
    storage.write_shard(ws, "a", "train", 1, rows)
    home_b = Workspace(tmp_path / "host-b")
    search = (REPO / "sql" / "feedback_search.sql").read_text()
    assert sqlrun.run(home_b, search, {"query": "zebras"})["run_id"].tolist() == ["a"]
    rows = [trajectory_row(run_id="a", split="train", protocol="train", feedback="no striped animal here")]
    storage.write_shard(ws, "a", "train", 1, rows)  # a re-run on host a
    assert sqlrun.run(home_b, search, {"query": "zebras"}).empty
    assert sqlrun.run(home_b, search, {"query": "animal"})["run_id"].tolist() == ["a"]


def test_an_empty_store_reads_as_no_rows(store_env, tmp_path):
    """The schema shard keeps the view valid before any run wrote: zero rows, every column."""
    df = sqlrun.run(Workspace(tmp_path / "fresh"), "SELECT * FROM trajectories")
    assert len(df) == 0 and list(df.columns) == storage.columns()


def test_without_a_store_nothing_of_it_runs(tmp_path):
    """BINAC_STORE unset: the shards are local files, the view reads the folder, and boto3 is never imported."""
    code = (
        "import sys; from pathlib import Path; from trajectory_rows import trajectory_row; "
        "from binac_core.foundation.workspace import Workspace; from binac_core.store import sqlrun, storage; "
        f"ws = Workspace(Path({str(tmp_path / 'home')!r})); "
        "storage.write_shard(ws, 'a', 'train', 1, [trajectory_row(run_id='a')]); "
        "n = sqlrun.run(ws, 'SELECT count(*) AS n FROM trajectories').n[0]; "
        "assert 's3://' not in storage.view_sql(ws); "
        "print(n, 'boto3' in sys.modules, 'httpfs' in str(sqlrun.connect(ws).execute("
        '"SELECT list(extension_name) FROM duckdb_extensions() WHERE loaded").fetchone()))'
    )
    env = {k: v for k, v in os.environ.items() if k != "BINAC_STORE"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "tests")])
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["1", "False", "False"]
