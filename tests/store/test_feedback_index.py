"""The trajectory store's columnar shard writes and its feedback index (binac_core/store/feedback_index.py), on small
stores built here with `storage.write_shard`: rows and types as the row-by-row writer stored them, BM25 scores
and ranking as DuckDB FTS's `PRAGMA create_fts_index` gives them, an index that follows the shards as they land,
and a reader that queries while a writer is stopped mid-write (fault points, no sleeps)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from datetime import datetime

import duckdb
import pytest
from conftest import REPO
from trajectory_rows import trajectory_row

from binac_core.foundation.workspace import Workspace
from binac_core.store import feedback_index, sqlrun, storage

SEARCH = (REPO / "sql" / "feedback_search.sql").read_text()

if str(REPO) not in sys.path:  # `bench` is a folder of the repository, not an installed package
    sys.path.insert(0, str(REPO))
from bench.store import OLD_SEARCH  # noqa: E402  (what the search did before the index: the bench's "old")

UNROUNDED = SEARCH.replace("round(score, 4) AS bm25", "score AS bm25")
OLD_UNROUNDED = OLD_SEARCH.replace("round(score, 4) AS bm25", "score AS bm25")
assert UNROUNDED != SEARCH and OLD_UNROUNDED != OLD_SEARCH

TEXTS = [
    "Step 3 is wrong.",
    "Looks correct.",
    "",
    "The the and of",
    "Naïve café résumé: step 2's sign is wrong!",
    "Check the sign in step 2; the carry was dropped before multiplying.",
    "wrong wrong wrong step",
    "Steps 1-4 are right, but the final answer forgets the remainder.",
    "Überprüfe Schritt 3",
    "12345 ... ???",
    "The multiplication in step 5 carries incorrectly; recompute the partial products and add them again.",
]


def _row(run_id: str, i: int, feedback, **cols) -> dict:
    """Sample i of run `run_id`'s step-1 binac training (round 1), carrying `feedback`, unless `cols` say otherwise."""
    sample = {"run_id": run_id, "problem_id": f"q{i}", "sample_idx": i, "feedback": feedback}
    training = {"method": "binac", "step": 1, "split": "train", "protocol": "train", "round": 1}
    return trajectory_row(**sample | training | {"created_at": datetime(2025, 1, 2, 10)} | cols)


def _store(ws: Workspace, seed: int = 0, runs: int = 3) -> None:
    rnd = random.Random(seed)
    words = "step sign carry wrong correct multiply answer remainder check final partial product the a is".split()
    for r in range(runs):
        for step in (1, 2):
            rows = []
            for i in range(12):
                text = rnd.choice(TEXTS) if rnd.random() < 0.5 else " ".join(rnd.choices(words, k=rnd.randint(1, 25)))
                rows.append(
                    _row(
                        f"run{r}",
                        i,
                        None if rnd.random() < 0.1 else text,
                        step=step,
                        method=rnd.choice(["binac", "fixed_critic"]),
                        split=rnd.choice(["train", "eval"]),
                        parent_run_id=rnd.choice([None, "P1", "P2"]),
                    )
                )
            storage.write_shard(ws, f"run{r}", "train", step, rows)


def _old(ws: Workspace, params: dict):
    return sqlrun.run(ws, OLD_UNROUNDED, params)


def test_columnar_write_stores_the_rows_and_types_of_the_row_by_row_writer(tmp_path):
    rows = [
        _row("r", 0, "Step 3 is wrong."),
        _row("r", 1, None, refined=None, refined_reward=None, critic_reward=None, parent_run_id="P"),
        _row(
            "r",
            2,
            "",
            attempt="",
            prompt="ünïcødé ✓ 漢字",
            refined="y1",
            refined_reward=1.0,
            attempt_reward=1,
            feedback_tokens=7,
            first_wrong_step=None,
            feedback_step=3,
        ),
        _row("r", 3, "x", attempt_reward=True),
    ]  # cast as DuckDB casts it
    new, old = tmp_path / "new.parquet", tmp_path / "old.parquet"
    storage._write_rows(new, rows)
    con = duckdb.connect()
    con.execute(storage.schema_sql())
    cols = storage.columns()
    con.executemany(
        f"INSERT INTO trajectory_rows VALUES ({', '.join('?' for _ in cols)})", [[r[c] for c in cols] for r in rows]
    )
    con.execute(f"COPY trajectory_rows TO {storage.sql_string(old)} (FORMAT parquet)")
    describe = "DESCRIBE SELECT * FROM read_parquet(?)"
    assert con.execute(describe, [str(new)]).fetchall() == con.execute(describe, [str(old)]).fetchall()
    select = "SELECT * FROM read_parquet(?)"
    assert con.execute(select, [str(new)]).fetchall() == con.execute(select, [str(old)]).fetchall()
    import pyarrow.parquet as pq

    assert pq.read_schema(new) == pq.read_schema(old)
    for odd in (
        [{**r, "created_at": "2025-01-02 10:00:01"} for r in rows],  # text for a timestamp: cast
        [{**r, "created_at": "2025-01-02 10:00:01"} for r in rows[:2]] + rows[2:],
    ):  # mixed: row by row
        storage._write_rows(tmp_path / "odd.parquet", odd)
        assert pq.read_schema(tmp_path / "odd.parquet") == pq.read_schema(old)
        stored = con.execute("SELECT created_at FROM read_parquet(?)", [str(tmp_path / "odd.parquet")]).fetchall()
        assert stored == [(datetime.fromisoformat(str(r["created_at"])),) for r in odd]
    storage._write_rows(tmp_path / "empty.parquet", [])
    assert pq.read_schema(tmp_path / "empty.parquet") == pq.read_schema(old)
    with pytest.raises(ValueError, match="lack columns"):
        storage._write_rows(tmp_path / "bad.parquet", [{"run_id": "r"}])
    with pytest.raises(duckdb.ConstraintException):  # NOT NULL still checked
        storage._write_rows(tmp_path / "bad.parquet", [{**rows[0], "attempt": None}])
    assert not (tmp_path / "bad.parquet").exists() and not list(tmp_path.glob(".bad*"))


@pytest.mark.parametrize(
    "params",
    [
        {"query": "step wrong"},
        {"query": "wrong"},
        {"query": "the sign"},
        {"query": "café naive"},
        {"query": "carry multiplying remainder", "k": "50"},
        {"query": "step wrong", "all_words": "1"},
        {"query": "step the wrong", "all_words": "1"},
        {"query": "sign", "method": "fixed%", "split": "eval"},
        {"query": "step answer", "comparison": "P1"},
        {"query": "zzz nothing"},
        {"query": "step", "k": "1000"},
    ],
)
def test_bm25_matches_a_fresh_fts_index(tmp_path, params):
    ws = Workspace(tmp_path / "home")
    _store(ws)
    new = sqlrun.run(ws, UNROUNDED, params)
    old = _old(ws, params)
    assert len(new) == len(old)
    assert new["bm25"].tolist() == pytest.approx(old["bm25"].tolist(), abs=1e-6)
    key = ["run_id", "step", "problem_id", "sample_idx", "feedback_idx", "feedback"]
    assert new[key].values.tolist() == old[key].values.tolist()
    rounded = sqlrun.run(ws, SEARCH, params)
    assert rounded["bm25"].tolist() == pytest.approx(old["bm25"].round(4).tolist(), abs=1e-9)


def _same_as_fts(ws: Workspace, params: dict) -> None:
    """The search's rows and scores are those of a fresh FTS index over the rows it selects."""
    new, old = sqlrun.run(ws, UNROUNDED, params), _old(ws, params)
    key = ["run_id", "step", "protocol", "problem_id", "sample_idx", "feedback_idx", "feedback"]
    assert new[key].values.tolist() == old[key].values.tolist()
    assert new["bm25"].tolist() == pytest.approx(old["bm25"].tolist(), abs=1e-9)


def test_index_follows_the_shards(tmp_path):
    """A shard that lands after the others were indexed is indexed alone, and its statistics join theirs; a shard
    rewritten after it was indexed is searched, and counted, as it is now."""
    ws = Workspace(tmp_path / "home")
    _store(ws, runs=1)
    assert sqlrun.run(ws, SEARCH, {"query": "zebra"}).empty
    indexed = sorted(feedback_index.root(ws).rglob("*.parquet"))
    storage.write_shard(ws, "late", "train", 7, [_row("late", 0, "a zebra crossed step 2"), _row("late", 1, "step")])
    hits = sqlrun.run(ws, SEARCH, {"query": "zebras"})
    assert hits["run_id"].tolist() == ["late"]
    now = sorted(feedback_index.root(ws).rglob("*.parquet"))
    assert set(indexed) < set(now) and len(now) == len(indexed) + 3  # only the new shard was indexed
    for params in ({"query": "step zebra", "k": "100"}, {"query": "step", "split": "train", "k": "100"}):
        _same_as_fts(ws, params)  # document count, average length, document frequencies: the late shard's too
    storage.write_shard(ws, "late", "train", 7, [_row("late", 0, "no striped animal here")])  # a re-run
    assert sqlrun.run(ws, SEARCH, {"query": "zebras"}).empty
    assert sqlrun.run(ws, SEARCH, {"query": "animal"})["run_id"].tolist() == ["late"]
    for params in ({"query": "step animal", "k": "100"}, {"query": "step", "split": "train", "k": "100"}):
        _same_as_fts(ws, params)  # the rewritten shard counted as it is now: one document, no `step`


def test_the_statistics_count_documents_by_length_and_postings_by_shape(tmp_path):
    """Hand-counted statistics of one shard: a document per row with feedback (stop words only: length 0; no
    feedback: no document), a posting count per (term, tf, len), each per value of the filter columns."""
    ws = Workspace(tmp_path / "home")
    rows = [
        _row("r", 0, "Step 3 is wrong.", split="train"),  # step, wrong
        _row("r", 1, "wrong wrong steps", split="eval"),  # wrong x2, step
        _row("r", 2, "The the and of", split="eval"),  # no index term
        _row("r", 3, None, split="eval"),
        _row("r", 4, "Wrong step!", split="train", method="grpo"),
    ]
    storage.write_shard(ws, "r", "train", 1, rows)
    con = sqlrun.connect(ws)
    try:
        feedback_index.attach(con, ws)
        stats = con.execute(
            "SELECT term, tf, len, method, split, n FROM feedback_stats "
            "ORDER BY term NULLS FIRST, tf, len, method, split"
        ).fetchall()
    finally:
        con.close()
    assert stats == [
        (None, None, 0, "binac", "eval", 1),
        (None, None, 2, "binac", "train", 1),
        (None, None, 2, "grpo", "train", 1),
        (None, None, 3, "binac", "eval", 1),
        ("step", 1, 2, "binac", "train", 1),
        ("step", 1, 2, "grpo", "train", 1),
        ("step", 1, 3, "binac", "eval", 1),
        ("wrong", 1, 2, "binac", "train", 1),
        ("wrong", 1, 2, "grpo", "train", 1),
        ("wrong", 2, 3, "binac", "eval", 1),
    ]
    for params in ({"query": "step wrong"}, {"query": "wrong", "method": "binac"}, {"query": "step", "split": "eval"}):
        _same_as_fts(ws, params)


def test_docs_are_numbered_in_the_order_ties_are_ranked_in(tmp_path):
    """`doc`: the shard's code, then the row's rank by (run_id, step, problem_id, sample_idx, feedback_idx), whatever
    order the rows were written in; the docs file is in `doc` order."""
    ws = Workspace(tmp_path / "home")
    ids = ["q2", "q0", "q1", "q0"]
    rows = [_row("r", i, "step", problem_id=p, sample_idx=9 - i) for i, p in enumerate(ids)]
    storage.write_shard(ws, "r", "train", 1, rows)
    con = sqlrun.connect(ws)
    try:
        feedback_index.attach(con, ws)
        docs = con.execute("SELECT row, doc >> 32, doc & 4294967295 FROM feedback_docs WHERE shard_no = 1").fetchall()
    finally:
        con.close()
    code = feedback_index.shard_code("r/train-step00001.parquet")
    assert docs == [(3, code, 0), (1, code, 1), (2, code, 2), (0, code, 3)]  # q0 (sample 6), q0 (8), q1, q2


def test_ties_are_ranked_as_fts_ranks_them_across_shards(tmp_path):
    """Rows of equal score in three shards, two of one (run, step) whose problem ids interleave (the protocols of
    an evaluation): whatever k cuts the ties at, the rows kept are those FTS's ranking keeps, in its order."""
    ws = Workspace(tmp_path / "home")
    for protocol, ids in (("single", range(0, 60, 2)), ("feedback", range(1, 60, 2))):
        rows = [_row("r", i, "Step 2 is wrong.", problem_id=f"q{i:03d}", protocol=protocol, step=3) for i in ids]
        storage.write_shard(ws, "r", protocol, 3, rows)
    texts = ("wrong step", "the sign is wrong", "Steps: wrong.")
    storage.write_shard(ws, "s", "train", 1, [_row("s", i, texts[i % 3], problem_id=f"q{i:03d}") for i in range(40)])
    for k in ("1", "5", "20", "45", "200"):
        _same_as_fts(ws, {"query": "step wrong", "k": k})
        _same_as_fts(ws, {"query": "wrong", "k": k, "comparison": "all"})


def test_shards_that_share_a_code_are_kept_apart(tmp_path, monkeypatch):
    """`doc` is unique only together with the shard: with every shard's code the same, rows of different shards
    with the same rank are still told apart."""
    monkeypatch.setattr(feedback_index, "shard_code", lambda key: 7)
    ws = Workspace(tmp_path / "home")
    _store(ws)
    for params in ({"query": "step wrong", "k": "100"}, {"query": "sign carry", "method": "fixed%", "k": "100"}):
        _same_as_fts(ws, params)


def test_index_files_of_another_layout_are_not_read_and_are_dropped(tmp_path):
    """Files named as an older binac named them (no layout in the name) are left out of the views, even when they
    are not Parquet at all, and dropped as stale an hour later."""
    ws = Workspace(tmp_path / "home")
    shard = storage.write_shard(ws, "r", "train", 1, [_row("r", 0, "zebra crossing")])
    st = shard.stat()
    old = feedback_index.root(ws) / "r" / f"train-step00001.{st.st_ino}-{st.st_mtime_ns}-{st.st_size}.docs.parquet"
    old.parent.mkdir(parents=True)
    old.write_bytes(b"not parquet")
    assert sqlrun.run(ws, SEARCH, {"query": "zebra"})["run_id"].tolist() == ["r"]
    assert old.exists()
    past = feedback_index.STALE_AFTER_S + 60
    os.utime(old, (st.st_atime - past, st.st_mtime - past))
    assert sqlrun.run(ws, SEARCH, {"query": "zebra"})["run_id"].tolist() == ["r"]
    assert not old.exists()


def test_index_files_of_rewritten_shards_are_dropped_an_hour_later(tmp_path):
    """The re-run shard's old index files stay while a query may still read them, and go once they are older than
    `STALE_AFTER_S` (their mtime set back here; the current files are kept however old)."""
    ws = Workspace(tmp_path / "home")
    run_files = lambda: set((feedback_index.root(ws) / "r").iterdir())  # noqa: E731
    storage.write_shard(ws, "r", "train", 1, [_row("r", 0, "zebra crossing")])
    sqlrun.run(ws, SEARCH, {"query": "zebra"})
    old = run_files()
    storage.write_shard(ws, "r", "train", 1, [_row("r", 0, "giraffe crossing")])  # a re-run
    assert sqlrun.run(ws, SEARCH, {"query": "giraffe"})["run_id"].tolist() == ["r"]
    current = run_files() - old
    assert len(old) == len(current) == 3 and old < run_files()  # docs, terms, stats each; the old ones kept for now
    leftover = feedback_index.root(ws) / "r" / ".train-step00001.docs.parquet.123.456.tmp"  # a killed indexer's
    leftover.write_bytes(b"partial")
    past = feedback_index.STALE_AFTER_S + 60
    for path in old | current | {leftover}:
        st = path.stat()
        os.utime(path, (st.st_atime - past, st.st_mtime - past))
    assert sqlrun.run(ws, SEARCH, {"query": "giraffe"})["run_id"].tolist() == ["r"]
    assert sqlrun.run(ws, SEARCH, {"query": "zebra"}).empty
    assert run_files() == current


def test_shards_without_index_files_are_indexed_on_first_query(tmp_path):
    ws = Workspace(tmp_path / "home")
    _store(ws, runs=1)  # written, never queried: no index files yet (as in a store from before the index)
    assert not feedback_index.root(ws).exists()
    params = {"query": "step wrong", "k": "100"}
    assert sqlrun.run(ws, UNROUNDED, params)["bm25"].tolist() == pytest.approx(
        _old(ws, params)["bm25"].tolist(), abs=1e-6
    )


def test_a_reader_searches_while_a_writer_is_stopped_mid_write(tmp_path):
    """A writer paused right after its shard is in place (fault point `shard:train@5`): a reader in this process
    searches (indexing that shard) without waiting on the writer; after the writer resumes and finishes, the
    next search still sees the shard, once."""
    home = tmp_path / "home"
    ws = Workspace(home)
    _store(ws, runs=1)
    assert sqlrun.run(ws, SEARCH, {"query": "giraffe"}).empty
    faults = tmp_path / "faults"
    faults.mkdir()
    code = (
        "import sys; sys.path[:0] = ['tests', 'tests/store'];"
        "from test_feedback_index import _row; from binac_core.store import storage; "
        "from binac_core.foundation.workspace import Workspace; from pathlib import Path; "
        f"ws = Workspace(Path({str(home)!r})); "
        "storage.write_shard(ws, 'w', 'train', 5, [_row('w', 0, 'giraffe step 5')]); "
        "storage.write_shard(ws, 'w', 'train', 6, [_row('w', 1, 'giraffe step 6')])"
    )
    env = {**os.environ, "BINAC_FAULT": "shard:train@5:pause", "BINAC_FAULT_DIR": str(faults)}
    writer = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=env)
    try:
        paused = faults / "shard:train@5.paused"
        while not paused.exists():  # the fault point, not a clock, says when
            assert writer.poll() is None, "the writer ended before its fault point"
            os.sched_yield()
        hits = sqlrun.run(ws, SEARCH, {"query": "giraffe"})
        assert hits["problem_id"].tolist() == ["q0"]
        (faults / "shard:train@5.resume").touch()
        assert writer.wait(timeout=120) == 0
    finally:
        if writer.poll() is None:
            writer.kill()
    hits = sqlrun.run(ws, SEARCH, {"query": "giraffe"})
    assert sorted(hits["problem_id"].tolist()) == ["q0", "q1"]
