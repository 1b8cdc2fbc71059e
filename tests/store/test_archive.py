"""The study archive (`binac_core/store/archive.py`) on stores built here: a finished run exported from one store
and restored into a fresh one reads back the same tags, parameters, metric points and trajectory rows (ids
rewritten to the new runs); only finished runs are archived, each once; a restore killed half-way (fault points)
is redone without a duplicate; a run of the store's own is never replaced; base model folders travel byte for
byte, with their weights hashes, and a base whose weights differ from the archive's record, or from the store's
folder of the same name, refuses in one line naming both hashes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime

import duckdb
import pytest
from conftest import REPO
from trajectory_rows import trajectory_row

from binac_core.errors import BinacError
from binac_core.foundation.files import file_digest
from binac_core.foundation.workspace import Workspace
from binac_core.model import weights
from binac_core.store import archive, storage, tracking

METRICS = {"eval/acc_single": {0: 0.25, 5: 0.5, 10: 0.75}, "train/loss": {1: 2.0, 2: float("nan")}}


def _row(run_id: str, parent: str, step: int, split: str, protocol: str, i: int, reward: float) -> dict:
    """Sample i of binac seed 3 on `2+i=`: feedback on odd i, a first wrong step where `reward` is 0."""
    return trajectory_row(
        run_id=run_id,
        parent_run_id=parent,
        method="binac",
        seed=3,
        step=step,
        split=split,
        protocol=protocol,
        problem_id=f"q{i}",
        sample_idx=i,
        prompt=f"2+{i}=",
        attempt=str(2 + i),
        attempt_reward=reward,
        attempt_tokens=2,
        feedback="step 1 is wrong" if i % 2 else None,
        first_wrong_step=1 if reward == 0 else None,
        created_at=datetime(2026, 1, 2, 10, step, i),
    )


def _ws(home) -> Workspace:
    home.mkdir(parents=True, exist_ok=True)
    return Workspace(home)


def _clean_env(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("BINAC_MODEL_CACHE", raising=False)


def _study_parent(ws: Workspace) -> str:
    return tracking.find_or_create_run(ws, "study-x", "study-x", {"kind": "study"}, {"study": "x"})


def _plant(ws: Workspace, key: str, parent: str, finished: bool) -> str:
    """A training run: two parameters, the points of METRICS, shards `eval-single-step00000` (3 rows, the second
    and third reversed in problem order so row order is checked) and `train-step00001` (1 row)."""
    run_id = tracking.find_or_create_run(
        ws,
        key,
        f"binac-{key}",
        {"method": "binac", "seed": "3"},
        {"train.actor_lr": "0.005", "train.group_size": "8"},
        parent,
    )
    for name, points in METRICS.items():
        for step, value in points.items():
            tracking.log_metrics_once(ws, run_id, {name: value}, step)
    storage.write_shard(
        ws,
        run_id,
        "eval-single",
        0,
        [_row(run_id, parent, 0, "eval", "single", i, r) for i, r in ((0, 1.0), (2, 0.0), (1, 1.0))],
    )
    storage.write_shard(ws, run_id, "train", 1, [_row(run_id, parent, 1, "train", "train", 0, 0.0)])
    if finished:
        tracking.finish(ws, run_id, "FINISHED")
    return run_id


def _rows(ws: Workspace, run_id: str) -> list[tuple]:
    """The run's rows shard by shard in file order, ids left out (they change on restore)."""
    con = storage.connect(ws)
    try:
        cols = [c for c in storage.columns() if c not in ("run_id", "parent_run_id")]
        return con.execute(
            f"SELECT regexp_extract(filename, '[^/]+$'), {', '.join(cols)} FROM read_parquet("
            f"{storage.sql_string(ws.shards / run_id / '*.parquet')}, filename = true) "
            "ORDER BY filename, file_row_number"
        ).fetchall()
    finally:
        con.close()


def _ids(ws: Workspace, run_id: str) -> set[tuple]:
    con = storage.connect(ws)
    try:
        return set(
            con.execute("SELECT DISTINCT run_id, parent_run_id FROM trajectories WHERE run_id = ?", [run_id]).fetchall()
        )
    finally:
        con.close()


def _points(ws: Workspace, run_id: str) -> dict:
    c = tracking.client(ws)
    return {
        k: sorted((m.step, str(m.value), m.timestamp) for m in c.get_metric_history(run_id, k))
        for k in c.get_run(run_id).data.metrics
    }


def _active(ws: Workspace, key: str) -> list:
    c = tracking.client(ws)
    return c.search_runs([tracking.experiment_id(c, ws)], filter_string=f"tags.`binac.run_key` = '{key}'")


@pytest.fixture
def exported(tmp_path, monkeypatch):
    """Store A with a finished run k1 and an unfinished k2, exported to an archive."""
    _clean_env(monkeypatch)
    ws = _ws(tmp_path / "a")
    parent = _study_parent(ws)
    done = _plant(ws, "k1", parent, finished=True)
    _plant(ws, "k2", parent, finished=False)
    folder = tmp_path / "archive"
    written = archive.export_finished(ws, folder, ["k1", "k2"])
    return ws, done, folder, written


def test_only_finished_runs_are_archived_and_each_once(exported):
    ws, _, folder, written = exported
    assert written == ["k1"] and archive.archived_keys(folder) == {"k1"}
    before = {p.name: p.stat().st_mtime_ns for p in archive.run_folder(folder, "k1").iterdir()}
    assert sorted(before) == ["metrics.parquet", "run.json", "trajectories.parquet"]
    assert archive.export_finished(ws, folder, ["k1", "k2"]) == []
    assert {p.name: p.stat().st_mtime_ns for p in archive.run_folder(folder, "k1").iterdir()} == before
    assert not [p for p in (folder / "runs").iterdir() if p.name.startswith(".")]  # no temporary folder left


def test_a_restored_run_reads_back_what_was_archived(exported, tmp_path):
    ws_a, run_a, folder, _ = exported
    ws_b = _ws(tmp_path / "b")
    parent_b = _study_parent(ws_b)
    assert archive.restore_runs(ws_b, folder, parent_b, ["k1", "k2"]) == ["k1"]
    (run_b,) = _active(ws_b, "k1")
    a = tracking.client(ws_a).get_run(run_a)
    assert run_b.info.status == "FINISHED" and run_b.info.run_name == "binac-k1"
    assert (run_b.info.start_time, run_b.info.end_time) == (a.info.start_time, a.info.end_time)
    assert run_b.data.params == a.data.params == {"train.actor_lr": "0.005", "train.group_size": "8"}
    assert run_b.data.tags.pop("mlflow.parentRunId") == parent_b and run_b.data.tags.pop(archive.RESTORE_TAG) == "done"
    assert run_b.data.tags == {k: v for k, v in a.data.tags.items() if k != "mlflow.parentRunId"}
    assert _points(ws_b, run_b.info.run_id) == _points(ws_a, run_a)
    assert _points(ws_b, run_b.info.run_id)["eval/acc_single"] == [
        (s, str(v), _points(ws_a, run_a)["eval/acc_single"][i][2])
        for i, (s, v) in enumerate(METRICS["eval/acc_single"].items())
    ]
    assert _rows(ws_b, run_b.info.run_id) == _rows(ws_a, run_a)
    assert [r[0] for r in _rows(ws_b, run_b.info.run_id)] == ["eval-single-step00000.parquet"] * 3 + [
        "train-step00001.parquet"
    ]
    problem = [c for c in storage.columns() if c not in ("run_id", "parent_run_id")].index("problem_id") + 1
    assert [r[problem] for r in _rows(ws_b, run_b.info.run_id)][:3] == ["q0", "q2", "q1"]  # the shard's own row order
    assert _ids(ws_b, run_b.info.run_id) == {(run_b.info.run_id, parent_b)}
    assert archive.restore_runs(ws_b, folder, parent_b, ["k1"]) == []  # finished there now: left alone
    assert len(_active(ws_b, "k1")) == 1


def test_a_run_of_the_stores_own_is_never_replaced(exported, tmp_path):
    _, _, folder, _ = exported
    ws_c = _ws(tmp_path / "c")
    parent = _study_parent(ws_c)
    own = tracking.find_or_create_run(ws_c, "k1", "binac-k1", {}, {}, parent)  # a run resumed here, unfinished
    assert archive.restore_runs(ws_c, folder, parent, ["k1"]) == []
    assert [r.info.run_id for r in _active(ws_c, "k1")] == [own]


@pytest.mark.parametrize("point", ["restore:metrics@0", "restore:shards@0"])
def test_a_killed_restore_is_redone_without_a_duplicate(exported, tmp_path, point):
    ws_a, run_a, folder, _ = exported
    home = tmp_path / "d"
    code = (
        "from pathlib import Path; from binac_core.foundation.workspace import Workspace; "
        "from binac_core.store import archive, tracking; "
        f"home = Path({str(home)!r}); home.mkdir(); ws = Workspace(home); "
        "p = tracking.find_or_create_run(ws, 'study-x', 'study-x', {'kind': 'study'}, {'study': 'x'}); "
        f"archive.restore_runs(ws, Path({str(folder)!r}), p, ['k1'])"
    )
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env={**env, "BINAC_FAULT": f"{point}:kill"})
    assert proc.returncode == -9
    ws_d = Workspace(home)  # made by the killed process
    (cut,) = _active(ws_d, "k1")
    assert cut.info.status == "RUNNING" and cut.data.tags[archive.RESTORE_TAG] == "started"
    assert archive.restore_runs(ws_d, folder, _study_parent(ws_d), ["k1"]) == ["k1"]
    (run_d,) = _active(ws_d, "k1")
    assert run_d.info.status == "FINISHED" and run_d.info.run_id != cut.info.run_id
    assert not (ws_d.shards / cut.info.run_id).exists()
    assert _rows(ws_d, run_d.info.run_id) == _rows(ws_a, run_a)
    assert _points(ws_d, run_d.info.run_id) == _points(ws_a, run_a)
    con = storage.connect(ws_d)
    try:
        assert con.execute("SELECT count(*) FROM trajectories").fetchone() == (4,)  # the cut restore's rows are gone
    finally:
        con.close()


def _base(folder, data: bytes):
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(data)
    (folder / "config.json").write_text('{"n": 1}')
    return folder


def test_base_models_travel_byte_for_byte(tmp_path, monkeypatch):
    _clean_env(monkeypatch)
    model = _base(_ws(tmp_path / "a").base_model_dir("0123abcd"), bytes(range(256)))
    folder = tmp_path / "archive"
    digest = weights.weights_sha256(model)
    assert archive.export_model(folder, model, digest) and not archive.export_model(folder, model, digest)
    assert archive.weights_index(folder) == {"base-0123abcd": digest}
    ws_b = _ws(tmp_path / "b")
    assert archive.restore_models(ws_b, folder) == ["base-0123abcd"]
    assert file_digest(ws_b.base_model_dir("0123abcd")) == file_digest(model)
    assert archive.restore_models(ws_b, folder) == []
    half = folder / "models" / "base-ffff"  # an archived folder without config.json is not a model: skipped
    half.mkdir()
    (half / "model.safetensors").write_bytes(b"x")
    assert archive.restore_models(_ws(tmp_path / "c"), folder) == ["base-0123abcd"]


ABC = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
"""sha256 of b"abc"."""
EMPTY = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
"""sha256 of no bytes."""


def test_a_store_holding_another_base_under_the_archives_name_refuses_naming_both(tmp_path, monkeypatch):
    _clean_env(monkeypatch)
    folder = tmp_path / "archive"
    assert archive.export_model(folder, _base(tmp_path / "a" / "base-0123abcd", b"abc"), ABC)
    other = _base(tmp_path / "a" / "base-0000", b"x")
    assert archive.export_model(folder, other, weights.weights_sha256(other))  # the store lacks this one
    ws = _ws(tmp_path / "store")
    _base(ws.base_model_dir("0123abcd"), b"")  # the same config digest, built again with other weights
    with pytest.raises(BinacError) as err:
        archive.restore_models(ws, folder)
    assert not ws.base_model_dir("0000").exists()  # every base is checked before any is copied
    line = str(err.value)
    assert "\n" not in line and f"base-0123abcd has weights sha256 {ABC}, but the store's" in line
    assert f"has {EMPTY} (two bases under one folder name)" in line
    with pytest.raises(BinacError, match=f"its base base-0123abcd has weights sha256 {ABC}, but this study's base"):
        archive.export_model(folder, ws.base_model_dir("0123abcd"), EMPTY)


def test_an_archived_base_whose_weights_changed_refuses_naming_both(tmp_path, monkeypatch):
    _clean_env(monkeypatch)
    folder = tmp_path / "archive"
    archive.export_model(folder, _base(tmp_path / "a" / "base-0123abcd", b"abc"), ABC)
    (folder / "models" / "base-0123abcd" / "model.safetensors").write_bytes(b"")
    with pytest.raises(BinacError) as err:
        archive.restore_models(_ws(tmp_path / "b"), folder)
    assert f"recorded with weights sha256 {ABC} but its weights hash to {EMPTY}" in str(err.value)
    assert not (tmp_path / "b" / "models").exists()


def test_an_archived_base_without_a_record_is_hashed_and_recorded_when_archived_again(tmp_path, monkeypatch):
    _clean_env(monkeypatch)
    folder = tmp_path / "archive"
    old = _base(folder / "models" / "base-0123abcd", b"abc")  # archived before the archive kept hashes
    assert archive.weights_index(folder) == {}
    assert archive.restore_models(_ws(tmp_path / "b"), folder) == ["base-0123abcd"]
    assert not archive.export_model(folder, old, ABC) and archive.weights_index(folder) == {"base-0123abcd": ABC}


def test_archived_runs_give_back_the_base_weights_they_recorded(tmp_path):
    for key, params in (("k1", {weights.PARAM: ABC, "seed": "0"}), ("k2", {"seed": "1"})):
        run = archive.run_folder(tmp_path, key)
        run.mkdir(parents=True)
        (run / "run.json").write_text(json.dumps({"params": params}))
    assert archive.recorded_params(tmp_path, ["k1", "k2", "k3"], weights.PARAM) == {"k1": ABC}


def test_a_bases_attempt_banks_are_archived_and_restored_once(tmp_path):
    """binac_core/store/archive.py `export_banks` / `restore_banks`: the banks of the base by its weights hash, not
    another base's; a file the target holds is left alone."""
    from binac_core.store.archive import export_banks, restore_banks

    store, archive, fresh = Workspace(tmp_path / "a"), tmp_path / "archive", Workspace(tmp_path / "b")
    banks = store.models_root / "banks"
    banks.mkdir(parents=True)
    mine, frozen, other = "bank-" + "ab" * 6 + "-k1", "bank-" + "ab" * 6 + "-k1-frozen-f1", "bank-" + "cd" * 6 + "-k2"
    for name in (mine, frozen, other):
        (banks / f"{name}.json").write_text(name)
    assert export_banks(store, archive, "ab" * 32) == [f"{frozen}.json", f"{mine}.json"]
    assert export_banks(store, archive, "ab" * 32) == []
    assert restore_banks(fresh, archive) == [f"{frozen}.json", f"{mine}.json"]
    assert (fresh.models_root / "banks" / f"{mine}.json").read_text() == mine
    assert restore_banks(fresh, archive) == []


@pytest.mark.parametrize(("tag", "expected"), [("chosen", "chosen"), (None, None)])
def test_rows_archived_before_the_variant_column_get_the_runs_variant_tag(exported, tmp_path, tag, expected):
    """An archive written before `variant` existed (its rows lack the column): the restored rows read the run's
    `variant` tag there, NULL without one."""
    _, _, folder, _ = exported
    run_dir = archive.run_folder(folder, "k1")
    record = json.loads((run_dir / "run.json").read_text())
    record["tags"] |= {"variant": tag} if tag else {}
    (run_dir / "run.json").write_text(json.dumps(record))
    rows = run_dir / "trajectories.parquet"
    con = duckdb.connect()
    con.execute(f"CREATE TABLE t AS SELECT * EXCLUDE (variant) FROM read_parquet({storage.sql_string(rows)})")
    con.execute(f"COPY t TO {storage.sql_string(rows)} (FORMAT parquet)")
    con.close()
    ws_b = _ws(tmp_path / "b")
    assert archive.restore_runs(ws_b, folder, _study_parent(ws_b), ["k1"]) == ["k1"]
    (run_b,) = _active(ws_b, "k1")
    con = storage.connect(ws_b)
    try:
        got = con.execute("SELECT DISTINCT variant FROM trajectories WHERE run_id = ?", [run_b.info.run_id]).fetchall()
    finally:
        con.close()
    assert got == [(expected,)]
