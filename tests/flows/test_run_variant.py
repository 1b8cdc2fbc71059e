"""A run's variant label travels into its stored rows (the `variant` column, sql/schema.sql): `train`'s `label` (a
study arm's) is the run identity's `variant` (flows/train.py `_set_up`), every row `trajectory_rows` writes for the run
carries it, and sql/critic_margin.sql names it, so two variants of one method are told apart by SQL alone. Rows of a
shard written before the column read NULL in it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import duckdb
import pandas as pd
import pytest
from conftest import REPO
from trajectory_rows import trajectory_row

import flows.train
from binac_core.foundation.config import load_config
from binac_core.foundation.workspace import Workspace
from binac_core.model.stage_io import Attempt, ScoredBatch
from binac_core.rl.methods import method_spec
from binac_core.store import sqlrun, storage
from binac_core.store.records import trajectory_rows

MARGIN = (REPO / "sql" / "critic_margin.sql").read_text()


@pytest.mark.parametrize(("label", "variant"), [("chosen", "chosen"), ("", None)])
def test_the_train_flow_gives_the_run_its_label_as_variant(monkeypatch, tmp_path, label, variant):
    """`_set_up` with everything that would build or start something replaced: the run identity it makes."""
    monkeypatch.setenv("BINAC_HOME", str(tmp_path / "home"))
    base = SimpleNamespace(path=Path(tmp_path / "base"))
    for name, value in {
        "build_base_model": lambda cfg_d: base,
        "base_weights": lambda b: "w" * 64,
        "check_built": lambda *a: None,
        "check_run": lambda *a: None,
        "prepare_data": lambda cfg_d: {"train": [], "eval": []},
        "start_run": lambda *a: "run-1",
    }.items():
        monkeypatch.setattr(flows.train, name, value)
    cfg = load_config("micro")
    request = flows.train.TrainRequest(preset="micro", method="binac", steps=1, seed=3, label=label)
    setup = flows.train._set_up(request, cfg, method_spec("binac"), 1, "code", "key")
    assert setup.run.variant == variant and setup.run.run_id == "run-1"


def test_every_row_of_a_run_carries_its_variant():
    from binac_core.store.identity import RunIdentity

    run = RunIdentity(run_id="r", method="binac", preset="p", seed=0, benchmark="synthetic", variant="chosen")
    a = Attempt(
        problem_id="q", sample_idx=0, prompt_text="p", prompt_ids=[1], text="A: 1", token_ids=[1], logprobs=[0.0]
    )
    (row,) = trajectory_rows(run, 1, ScoredBatch([a], [0.0]), split="eval", protocol="single")
    assert row["variant"] == "chosen"


def _bank_rows(run_id: str, variant: str | None, protocol: str, hits: int) -> list[dict]:
    """Two attempts wrong at step 2, the feedback naming it on the first `hits` of them, at step 10 of 10."""
    return [
        trajectory_row(
            run_id=run_id,
            parent_run_id="P",
            method="binac",
            variant=variant,
            step=10,
            split="bank_eval",
            protocol=protocol,
            problem_id=f"b{i}",
            first_wrong_step=2,
            feedback_step=2 if i < hits else 3,
        )
        for i in range(2)
    ]


def test_the_margin_query_names_each_variant_and_reads_older_rows_as_null(tmp_path):
    """Two binac variants on one seed (hits margins +0.5 and +1.0) and a run stored before the column existed."""
    ws = Workspace(tmp_path / "home")
    for run_id, variant, hits in (("c", "chosen", 1), ("r", "reference", 2)):
        storage.write_shard(ws, run_id, "bank", 10, _bank_rows(run_id, variant, "bank", hits))
        storage.write_shard(ws, run_id, "bank_frozen", 10, _bank_rows(run_id, variant, "bank_frozen", 0))
    old = storage.shard_path(ws, "o", "bank", 10)
    old.parent.mkdir(parents=True)
    con = duckdb.connect()
    con.execute(storage.schema_sql())
    con.execute("ALTER TABLE trajectory_rows DROP COLUMN variant")
    rows = _bank_rows("o", None, "bank", 1) + _bank_rows("o", None, "bank_frozen", 0)
    con.register("older", pd.DataFrame([{k: v for k, v in r.items() if k != "variant"} for r in rows]))
    con.execute("INSERT INTO trajectory_rows BY NAME SELECT * FROM older")
    con.execute(f"COPY trajectory_rows TO {storage.sql_string(old)} (FORMAT parquet)")
    con.close()
    df = sqlrun.run(ws, MARGIN, {"comparison": "P", "iterations": "10", "eval_every": "10"})
    got = {(r.run_id, r.variant if isinstance(r.variant, str) else None): r.hits_margin for r in df.itertuples()}
    assert got == {("o", None): 0.5, ("c", "chosen"): 0.5, ("r", "reference"): 1.0}
    assert list(df["run_id"]) == ["o", "c", "r"], "ordered by method, then variant (none first), seed, run"
