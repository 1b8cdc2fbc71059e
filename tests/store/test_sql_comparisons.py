"""`binac sql` over one comparison at a time, and errors that help: checked by hand on small stores built here
with `storage.write_shard` (no training, no MLflow). Every number below follows from the rows planted.

The store `three_runs`: comparison P1 (preset micro, started 10:00) with runs a (grpo, seed 0) and b (grpo,
seed 1); comparison P2 (preset micro, started 11:00, the latest) with run c (grpo, seed 0); a standalone run s
(no parent, started 12:00: the newest rows, yet not a comparison). Each run has one train step and one eval of
two samples; the eval rewards make each run's acc_single distinct: a 0.5, b 1.0, c 0.0, s 0.5."""

from __future__ import annotations

from datetime import datetime

import pandas as pd
import pytest
from conftest import REPO, run_binac
from trajectory_rows import trajectory_row

from binac_core.errors import BinacError
from binac_core.foundation.workspace import Workspace
from binac_core.store import sqlrun, storage
from flows import sql_cli

SUMMARY = (REPO / "sql" / "method_summary.sql").read_text()
P1, P2 = "p1aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "p2bbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"


def _row(run_id: str, parent: str | None, seed: int, when: str, **cols) -> dict:
    """One trajectory row: a step-0 grpo attempt under `single`, at `when` on 2025-01-02, unless `cols` say more."""
    created = datetime.fromisoformat(f"2025-01-02 {when}")
    return trajectory_row(run_id=run_id, parent_run_id=parent, seed=seed, created_at=created, **cols)


def _plant_run(ws: Workspace, run_id: str, parent: str | None, seed: int, hour: int, eval_rewards: list[float]):
    """A run's shards: its step-0 evaluation (two samples, reward 0), one train step, and the step-1 evaluation
    with `eval_rewards` (so its final acc_single is their mean)."""

    def at(minute):
        return f"{hour:02d}:{minute:02d}:00"

    storage.write_shard(
        ws, run_id, "eval-single", 0, [_row(run_id, parent, seed, at(0), sample_idx=i) for i in range(2)]
    )
    storage.write_shard(
        ws,
        run_id,
        "train",
        1,
        [_row(run_id, parent, seed, at(1), step=1, split="train", protocol="train", attempt_reward=1.0)],
    )
    storage.write_shard(
        ws,
        run_id,
        "eval-single",
        1,
        [_row(run_id, parent, seed, at(2), step=1, sample_idx=i, attempt_reward=r) for i, r in enumerate(eval_rewards)],
    )


@pytest.fixture
def three_runs(tmp_path) -> Workspace:
    ws = Workspace(tmp_path / "home")
    _plant_run(ws, "a", P1, 0, 10, [1.0, 0.0])
    _plant_run(ws, "b", P1, 1, 10, [1.0, 1.0])
    _plant_run(ws, "c", P2, 0, 11, [0.0, 0.0])
    _plant_run(ws, "s", None, 0, 12, [0.5, 0.5])
    return ws


def _summary(ws: Workspace, **params) -> sqlrun.Result:
    return sqlrun.execute(ws, SUMMARY, {k: str(v) for k, v in params.items()})


# --- which runs: latest, all, an id ---


def test_latest_is_the_comparison_whose_runs_started_last_not_the_newest_row(three_runs):
    res = _summary(three_runs)
    assert res.comparison.id == P2 and res.comparison.requested == "latest"
    assert res.df[["comparison", "method", "runs", "eval/acc_single"]].to_dict("records") == [
        {"comparison": P2, "method": "grpo", "runs": 1, "eval/acc_single": 0.0}
    ]
    assert pd.isna(res.df["eval/acc_single_ci95"][0])  # one seed: no interval, as MLflow logs none


def test_an_explicit_id_or_a_unique_prefix_selects_that_comparison(three_runs):
    for given in (P1, "p1a"):
        res = _summary(three_runs, comparison=given)
        row = res.df.iloc[0]
        assert res.comparison.id == P1 and row["comparison"] == P1
        assert (row["runs"], list(row["seeds"]), row["eval/acc_single"]) == (2, [0, 1], 0.75)  # (0.5 + 1.0) / 2
        # t(0.975, 1) * stdev(0.5, 1.0) / sqrt(2) = 12.7062 * 0.353553 / 1.414214
        assert row["eval/acc_single_ci95"] == pytest.approx(12.706204736174694 * 0.25)
        assert row["eval/acc_single_start"] == 0.0 and row["train/reward_first"] == 1.0


def test_all_pools_every_run_including_standalone_ones(three_runs):
    res = _summary(three_runs, comparison="all")
    row = res.df.iloc[0]
    assert res.comparison.id == "all" and row["comparison"] == "all"
    assert (row["runs"], row["eval/acc_single"]) == (4, pytest.approx((0.5 + 1.0 + 0.0 + 0.5) / 4))
    per_run = _summary(three_runs, comparison="all", per_run=1)
    assert sorted(per_run.df["run_id"]) == ["a", "b", "c", "s"]


def test_latest_without_any_comparison_in_the_store_means_all(tmp_path):
    ws = Workspace(tmp_path / "home")
    _plant_run(ws, "s", None, 0, 12, [1.0, 0.0])
    res = _summary(ws)
    assert res.comparison.id == "all" and res.df["runs"].tolist() == [1]
    assert res.comparison.describe() == (
        "comparison all (latest: no run in the store belongs to a comparison, so "
        "every run): preset micro, 1 run, rows from 2025-01-02 12:00:00 to "
        "2025-01-02 12:02:00 UTC"
    )


def test_every_query_over_runs_takes_the_comparison_and_returns_it(three_runs):
    for name, default in [
        ("method_summary", "latest"),
        ("feedback_over_training", "latest"),
        ("feedback_use", "latest"),
        ("study_measures", "latest"),
        ("feedback_top_gain", "latest"),
        ("study_endpoints", "latest"),
        ("feedback_search", "all"),
    ]:
        text = (REPO / "sql" / f"{name}.sql").read_text()
        assert sqlrun.declared_params(text)["comparison"] == default, name
        df = sqlrun.run(three_runs, text, {"comparison": P1})
        assert "comparison" in df.columns, name
    measures = sqlrun.run(three_runs, (REPO / "sql" / "study_measures.sql").read_text(), {"comparison": P1})
    assert sorted(measures["run_id"]) == ["a", "b"] and set(measures["comparison"]) == {P1}


# --- the header, the table, the empty result ---


def test_the_header_names_the_comparison_and_its_rows(three_runs):
    assert _summary(three_runs).comparison.describe() == (
        f"comparison {P2} (latest): preset micro, 1 run, rows from 2025-01-02 11:00:00 to 2025-01-02 11:02:00 UTC"
    )
    assert _summary(three_runs, comparison=P1).comparison.describe() == (
        f"comparison {P1}: preset micro, 2 runs, rows from 2025-01-02 10:00:00 to 2025-01-02 10:02:00 UTC"
    )
    assert _summary(three_runs, comparison="all").comparison.describe() == (
        "comparison all (every run in the store pooled: 2 comparisons, 1 standalone run): preset micro, 4 runs, "
        "rows from 2025-01-02 10:00:00 to 2025-01-02 12:02:00 UTC"
    )


def _cli(ws: Workspace, monkeypatch, capsys, query: str, *params: str, out: str | None = None) -> str:
    monkeypatch.setenv("BINAC_HOME", str(ws.home))
    assert sql_cli.run_sql(query, list(params), out) == 0
    return capsys.readouterr().out


def test_the_cli_prints_the_header_then_the_table_without_repeating_the_comparison(
    three_runs, monkeypatch, capsys, tmp_path
):
    out = _cli(three_runs, monkeypatch, capsys, str(REPO / "sql" / "method_summary.sql"))
    header, columns = out.splitlines()[:2]
    assert header.startswith(f"comparison {P2} (latest): preset micro, 1 run, rows from 2025-01-02 11:00:00")
    assert columns.split()[:3] == ["preset", "method", "run_id"] and P2 not in out.split("\n", 1)[1]
    csv = tmp_path / "s.csv"
    out = _cli(three_runs, monkeypatch, capsys, str(REPO / "sql" / "method_summary.sql"), out=str(csv))
    assert out.splitlines()[1] == f"1 rows -> {csv}"
    assert pd.read_csv(csv)["comparison"].tolist() == [P2]  # the file keeps the column


def test_an_empty_result_says_no_rows_and_the_filters(three_runs, monkeypatch, capsys):
    out = _cli(three_runs, monkeypatch, capsys, str(REPO / "sql" / "method_summary.sql"), "method=binac")
    assert "Empty DataFrame" not in out
    assert out.splitlines()[1:] == [
        "(no rows)",
        f"filters: comparison=latest (-> {P2}), preset=%, method=binac, per_run=0",
    ]
    out = _cli(three_runs, monkeypatch, capsys, "SELECT 1 AS x WHERE FALSE")
    assert out.splitlines() == ["(no rows)", "filters: none (the query has no parameters)"]


# --- errors that help ---


def test_a_misspelt_column_or_table_keeps_duckdbs_hint(three_runs):
    with pytest.raises(BinacError) as err:
        sqlrun.run(three_runs, "SELECT metod FROM trajectories")
    assert str(err.value).startswith('SQL error: Binder Error: Referenced column "metod" not found')
    assert 'Candidate bindings: "method"' in str(err.value)
    with pytest.raises(BinacError) as err:
        sqlrun.run(three_runs, "SELECT count(*) FROM trajectorie")
    assert str(err.value).startswith("SQL error: Catalog Error: Table with name trajectorie does not exist")
    assert 'Did you mean "trajectories"' in str(err.value)


def test_an_error_in_a_later_statement_says_which(three_runs):
    with pytest.raises(BinacError) as err:
        sqlrun.run(three_runs, "CREATE TEMP TABLE x AS SELECT 1 AS a;\n\nSELECT b FROM x")
    assert 'Candidate bindings: "a"' in str(err.value)
    assert str(err.value).endswith("(in statement 2 of 2, from line 3 of the query)")


def test_a_value_that_is_not_of_the_parameters_kind_names_the_parameter(three_runs):
    with pytest.raises(
        BinacError,
        match=r"^query parameter \$per_run: could not convert 'abc' to an integer "
        r"\(its default is 0\)$",
    ):
        _summary(three_runs, per_run="abc")
    top_gain = (REPO / "sql" / "feedback_top_gain.sql").read_text()
    with pytest.raises(BinacError, match=r"^query parameter \$k: could not convert '2.5' to an integer"):
        sqlrun.run(three_runs, top_gain, {"k": "2.5"})
    # An undeclared parameter that DuckDB cannot convert: named from DuckDB's message.
    with pytest.raises(BinacError, match=r"^query parameter \$n: Conversion Error: .*'many'"):
        sqlrun.run(three_runs, "SELECT 1 LIMIT $n", {"n": "many"})


def test_an_unknown_comparison_is_one_line_that_lists_the_recent_ones(three_runs):
    with pytest.raises(BinacError) as err:
        _summary(three_runs, comparison="nope")
    message = str(err.value)
    assert "\n" not in message and message.startswith("comparison 'nope' is not in the store; the most recent: ")
    assert message.index(P2) < message.index(P1)  # most recent first
    assert f"{P2} (micro, 1 run, started 2025-01-02 11:00:00)" in message and message.endswith("(or: latest, all)")
    with pytest.raises(BinacError, match=f"^comparison 'a' is a run of comparison {P1}, not a comparison"):
        _summary(three_runs, comparison="a")
    with pytest.raises(BinacError, match="^comparison 's' is a standalone run"):
        _summary(three_runs, comparison="s")
    with pytest.raises(BinacError, match="^comparison 'p' is the start of 2 comparisons' ids"):
        _summary(three_runs, comparison="p")


def test_the_cli_prints_errors_whole_after_error_colon(three_runs, tmp_path):
    env = {"BINAC_HOME": str(three_runs.home), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    proc = run_binac(["sql", "SELECT metod FROM trajectories"], env, check=False)
    assert proc.returncode == 2
    assert proc.stderr.startswith('error: SQL error: Binder Error: Referenced column "metod" not found')
    assert 'Candidate bindings: "method"' in proc.stderr


# --- old stores ---


def test_a_store_from_before_parent_run_ids_reads_them_as_null(tmp_path):
    """Shards and a schema shard written without the column: the current schema shard (named by the schema's
    digest) adds it, so the view has it and the old rows read NULL."""
    import duckdb

    ws = Workspace(tmp_path / "home")
    old = ws.shards / "old-run" / "train-step00001.parquet"
    old.parent.mkdir(parents=True)
    (ws.shards / "_schema").mkdir()
    row = {k: v for k, v in _row("old-run", None, 0, "09:00:00").items() if k != "parent_run_id"}
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE t AS SELECT * FROM (SELECT " + ", ".join(f"$v{i} AS {k}" for i, k in enumerate(row)) + ")",
        {f"v{i}": v for i, v in enumerate(row.values())},
    )
    con.execute(f"COPY t TO {storage.sql_string(old)} (FORMAT parquet)")
    con.execute(
        f"COPY (SELECT * FROM t LIMIT 0) TO {storage.sql_string(ws.shards / '_schema' / 'empty.parquet')} "
        "(FORMAT parquet)"
    )
    con.close()
    shard = storage.ensure_schema_shard(ws)
    assert shard.name.startswith("empty-") and len(shard.stem) == len("empty-") + 8
    assert sqlrun.run(ws, "SELECT run_id, parent_run_id FROM trajectories").to_dict("records") == [
        {"run_id": "old-run", "parent_run_id": None}
    ]
    assert _summary(ws).comparison.id == "all"  # no comparison in the store: latest means every run
