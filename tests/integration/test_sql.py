"""The analysis queries in sql/ against a store filled by a real micro comparison (`micro_compare`, conftest.py):
each runs with its defaults, the CLI runs them with parameters, the BM25 search finds a planted phrase, and the
per-method summary equals the numbers MLflow holds: per run, and, on a store with two comparisons, the latest
comparison's per-method numbers equal its parent run's metrics. (Comparison selection, headers and error messages
on small hand-built stores: test_sql_comparisons.py.)"""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import REPO, binac_env, home_with_micro_base, run_binac

from binac_core.errors import BinacError
from binac_core.foundation.workspace import Workspace
from binac_core.store import sqlrun, storage, tracking

QUERIES = sorted(p for p in (REPO / "sql").glob("*.sql") if p.name != "schema.sql")
EMPTY_ON_MICRO = {
    "bank_measures.sql": "the critic's attempt bank is off on micro; tests/integration/test_bank_run.py runs the query",
    "critic_margin.sql": "the critic's attempt bank is off on micro; tests/reports/test_critic_margin_sql.py plants it",
}
"""Queries over rows a micro comparison with its preset's settings does not store (file: why, and where it runs)."""
pytestmark = pytest.mark.integration


def test_there_are_the_promised_queries():
    names = {p.stem for p in QUERIES}
    assert {"feedback_search", "feedback_top_gain", "feedback_over_training", "feedback_use", "method_summary"} <= names


@pytest.mark.parametrize("path", QUERIES, ids=lambda p: p.name)
def test_each_query_is_documented_and_runs_with_its_defaults(micro_compare, path):
    text = path.read_text()
    assert text.startswith("-- Question: "), "each file starts by saying what question it answers"
    declared = sqlrun.declared_params(text)
    used = set().union(*(names for _, names in sqlrun.statements(text)))
    assert used == set(declared), f"every $param used is declared with a default and vice versa: {used} {declared}"
    df = sqlrun.run(Workspace(micro_compare["home"]), text)
    assert df is not None and (len(df) > 0 or path.name in EMPTY_ON_MICRO)


def test_queries_run_from_the_cli_with_parameters_and_out(micro_compare, tmp_path):
    out = tmp_path / "top.csv"
    env = binac_env(micro_compare["home"], tmp_path / "prefect")
    run_binac(["sql", "sql/feedback_top_gain.sql", "--param", "k=1", "--param", "split=eval", "--out", str(out)], env)
    import pandas as pd

    df = pd.read_csv(out)
    assert len(df) > 0 and (df["rank"] == 1).all() and df["method"].is_unique


def _stored_row(ws: Workspace, where: str = "TRUE") -> dict:
    """One stored trajectory row as a dict of Python values (NULL as None), to plant a modified copy."""
    con = sqlrun.connect(ws)
    try:
        cur = con.execute(f"SELECT * FROM trajectories WHERE {where} LIMIT 1")
        return dict(zip([d[0] for d in cur.description], cur.fetchone(), strict=True))
    finally:
        con.close()


def test_bm25_search_finds_a_planted_phrase(micro_compare, tmp_path):
    home = tmp_path / "home"  # a copy of the store: the shared one stays as the run wrote it
    shutil.copytree(micro_compare["home"] / "trajectories", home / "trajectories")
    ws = Workspace(home)
    row = _stored_row(ws, "feedback IS NOT NULL AND split = 'train'")
    planted = "Step 2 is wrong: carry the zebra quantum before multiplying"
    storage.write_shard(
        ws, "planted-run", "train", 1, [{**row, "run_id": "planted-run", "method": "binac", "feedback": planted}]
    )
    query = (REPO / "sql" / "feedback_search.sql").read_text()

    hits = sqlrun.run(ws, query, {"query": "quantum zebras"})  # stemmed: zebras -> zebra
    assert len(hits) == 1 and hits["run_id"][0] == "planted-run" and hits["feedback"][0] == planted
    assert hits["bm25"][0] > 0
    every_word = sqlrun.run(ws, query, {"query": "zebra step wrong", "all_words": "1"})
    assert every_word["run_id"].tolist() == ["planted-run"]  # the only text with all three words
    any_word = sqlrun.run(ws, query, {"query": "zebra step wrong", "k": "100000"})
    assert "planted-run" in any_word["run_id"].tolist() and len(any_word) > 1
    assert len(sqlrun.run(ws, query, {"query": "quantum zebras", "method": "grpo"})) == 0
    assert len(sqlrun.run(ws, query, {"query": "quantum zebras", "method": "bin%", "split": "train"})) == 1


def _parent_run_id(compare_stdout: str) -> str:
    """The comparison's MLflow parent run id, from what `binac compare` prints."""
    return re.search(r"\(parent run (\w+)\)", compare_stdout).group(1)


def _metric_at(history, step):
    values = [m.value for m in history if m.step == step]
    return values[-1] if values else None


def test_statements_split_by_the_parser_and_parameters_must_be_declared(micro_compare):
    ws = Workspace(micro_compare["home"])
    df = sqlrun.run(ws, "SELECT 'a;b' AS s; -- a comment; with a semicolon\nSELECT 'c;d' AS s, $k AS k", {"k": "3"})
    assert df.to_dict("records") == [{"s": "c;d", "k": 3}]
    with pytest.raises(BinacError, match=r"\$k has no value"):
        sqlrun.run(ws, "SELECT $k")
    with pytest.raises(BinacError, match="SQL error: Parser Error"):
        sqlrun.run(ws, "SELEC 1")


def test_statement_splitting_on_hand_written_cases():
    assert sqlrun.statements("SELECT 1; SELECT 2;") == [("SELECT 1", set()), ("SELECT 2", set())]
    assert sqlrun.statements("SELECT 'a;$x' AS \"b;c\" /* d; $y */ -- e; $z\n; ; -- only a comment") == [
        ("SELECT 'a;$x' AS \"b;c\" /* d; $y */ -- e; $z", set())
    ]
    assert sqlrun.statements("SELECT $a + $b, 'it''s;' WHERE x = $a") == [
        ("SELECT $a + $b, 'it''s;' WHERE x = $a", {"a", "b"})
    ]
    assert sqlrun.statements("-- nothing\n") == []


def test_method_summary_equals_the_mlflow_numbers(micro_compare):
    ws = Workspace(micro_compare["home"])
    query = (REPO / "sql" / "method_summary.sql").read_text()
    parent = _parent_run_id(micro_compare["stdout"])
    per_run = sqlrun.run(ws, query, {"per_run": "1", "comparison": parent})
    c = tracking.client(ws)
    # The comparison's training runs: the parent compare run has no rows of its own, and the benchmark evaluations
    # that share this store (tests/rl/test_evaluate.py, method "eval") belong to no comparison.
    children = [
        r for r in c.search_runs([tracking.experiment_id(c, ws)]) if r.data.tags.get("mlflow.parentRunId") == parent
    ]
    assert sorted(per_run["run_id"]) == sorted(r.info.run_id for r in children)
    compared = 0
    for row in per_run.to_dict("records"):
        keys = c.get_run(row["run_id"]).data.metrics.keys()
        gated = [k for k in keys if k.startswith("eval/acc_gated_k")]
        for column, key in [
            ("train/reward_first", "train/reward_first"),
            ("train/reward_refined", "train/reward_refined"),
            ("train/feedback_gain", "train/feedback_gain"),
            ("train/critic_reward", "train/critic_reward"),
            ("eval/acc_single", "eval/acc_single"),
            ("eval/acc_feedback", "eval/acc_feedback"),
            ("eval/acc_gated", gated[0] if gated else "eval/acc_gated"),
            ("eval/acc_single_start", "eval/acc_single"),
        ]:
            history = c.get_metric_history(row["run_id"], key)
            value = row[column]
            if value != value:  # NULL in SQL: MLflow has no such metric either
                assert not history, (row["method"], key)
                continue
            if column.startswith("train/"):
                step = row["iterations"]
            elif column == "eval/acc_single_start":
                step = 0
            else:
                step = max(m.step for m in history)
            assert value == _metric_at(history, step), (row["method"], column, step)  # exactly, not approximately
            compared += 1
    assert compared >= 5 * len(per_run)
    # The per-method summary against MLflow (not against the same SQL rows): the mean over a method's runs of
    # each run's last logged eval/acc_single, and the number of runs.
    per_method = sqlrun.run(ws, query, {"comparison": parent}).set_index("method")
    finals: dict[str, list[float]] = {}
    for r in children:
        history = c.get_metric_history(r.info.run_id, "eval/acc_single")
        finals.setdefault(r.data.tags["method"], []).append(max(history, key=lambda m: m.step).value)
    assert sorted(per_method.index) == sorted(finals)
    for method, values in finals.items():
        assert per_method.loc[method, "runs"] == len(values), method
        assert per_method.loc[method, "eval/acc_single"] == pytest.approx(sum(values) / len(values), abs=1e-12)


def test_queries_only_read(micro_compare):
    """Running every query leaves the store's files as they were (temporary tables live in memory)."""
    home = Path(micro_compare["home"])
    before = sorted(p.relative_to(home) for p in (home / "trajectories").rglob("*"))
    for path in QUERIES:
        sqlrun.run(Workspace(home), path.read_text())
    assert sorted(p.relative_to(home) for p in (home / "trajectories").rglob("*")) == before


def _shard_rows(home: Path) -> int:
    """Rows in the Parquet shards, read with pyarrow (not through DuckDB's view)."""
    import pyarrow.parquet as pq

    return sum(pq.read_metadata(p).num_rows for p in (home / "trajectories").glob("*/*.parquet"))


def test_a_quote_in_the_workspace_path_is_a_path_not_sql(micro_compare, tmp_path):
    home = tmp_path / "it's a home"
    shutil.copytree(micro_compare["home"] / "trajectories", home / "trajectories")
    ws = Workspace(home)
    assert sqlrun.run(ws, "SELECT count(*) n FROM trajectories")["n"][0] == _shard_rows(home) > 0
    storage.ensure_view(ws)
    import duckdb

    con = duckdb.connect(str(ws.duckdb_path), read_only=True)  # the file users open holds a working view too
    try:
        assert con.execute("SELECT count(*) FROM trajectories").fetchone()[0] == _shard_rows(home)
    finally:
        con.close()


def test_a_client_holding_the_store_file_blocks_no_query_and_no_run(micro_compare, tmp_path):
    """A user's DuckDB client keeps `trajectories.duckdb` open read-write (the exclusive lock): `binac sql`, a
    run starting (`ensure_view`) and a run storing a shard all go on."""
    home = tmp_path / "home"
    shutil.copytree(micro_compare["home"] / "trajectories", home / "trajectories")
    ws = Workspace(home)
    storage.ensure_view(ws)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import duckdb, sys\ncon = duckdb.connect(sys.argv[1])\n"
            "con.execute('SELECT count(*) FROM trajectories').fetchall()\nprint('holding', flush=True)\nsys.stdin.read()",
            str(ws.duckdb_path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "holding"
        env = binac_env(home, tmp_path / "prefect")
        proc = run_binac(["sql", "SELECT count(*) AS n FROM trajectories"], env)
        assert str(_shard_rows(home)) in proc.stdout, proc.stderr
        storage.ensure_view(ws)  # what `start-run` does
        row = _stored_row(ws)
        storage.write_shard(ws, "another-run", "train", 1, [{**row, "run_id": "another-run"}])
        assert sqlrun.run(ws, "SELECT count(*) n FROM trajectories WHERE run_id = 'another-run'")["n"][0] == 1
    finally:
        holder.stdin.close()
        holder.wait()


# --- two comparisons in one store: the summary is the latest one's, equal to its parent run's metrics ---

EVAL_COLUMNS = ["acc_single", "acc_feedback", "acc_gated", "acc_feedback_exec", "acc_gated_exec"]


def _parent_metrics(home: Path, parent: str) -> dict[str, dict[str, float]]:
    """The comparison's summary as its parent run logs it (`summary/<method>/<metric>`), as {method: {metric: value}}."""
    from mlflow.tracking import MlflowClient

    out: dict[str, dict[str, float]] = {}
    for name, value in MlflowClient(f"sqlite:///{home}/mlflow.db").get_run(parent).data.metrics.items():
        _, method, metric = name.split("/")
        out.setdefault(method, {})[metric] = value
    return out


def _metric_name(column: str, logged: dict[str, float]) -> str:
    """The parent-run metric of a summary column: `eval/acc_gated` is logged as `acc_gated_k<K>`."""
    if column in ("acc_gated", "acc_gated_exec"):
        named = [k for k in logged if re.fullmatch(rf"{column}_k\d+", k)]
        return named[0] if named else column
    return column


def _assert_summary_equals_parent_metrics(df, home: Path, parent: str, methods: list[str], seeds: list[int]) -> int:
    """Every eval mean and 95 % half-width of the SQL summary equals the parent run's metric of that method (a NULL
    where the parent has no such metric); returns how many numbers were compared."""
    logged = _parent_metrics(home, parent)
    assert set(df["comparison"]) == {parent}
    assert sorted(df["method"]) == sorted(methods) and set(methods) <= set(logged)
    compared = 0
    for row in df.to_dict("records"):
        assert row["runs"] == len(seeds) and [int(s) for s in re.findall(r"\d+", row["seeds"])] == seeds, row
        metrics = logged[row["method"]]
        for column in EVAL_COLUMNS:
            name = _metric_name(column, metrics)
            for suffix in ("", "_ci95"):
                value = row[f"eval/{column}{suffix}"]
                if pd.isna(value):
                    assert f"{name}{suffix}" not in metrics, (row["method"], name, suffix)
                    continue
                assert metrics[f"{name}{suffix}"] == pytest.approx(value, rel=1e-12, abs=1e-12), (row["method"], name)
                compared += 1
    return compared


def test_method_summary_of_the_latest_of_two_comparisons_equals_its_parent_runs_metrics(
    tmp_path_factory, prefect_home, micro_compare, tmp_path
):
    """Two real comparisons in one store; `binac sql sql/method_summary.sql` with its
    defaults summarises the later one only, and its numbers are the parent run's metrics in MLflow; the earlier
    one, asked for by id, equals its own parent's."""
    home = home_with_micro_base(tmp_path_factory, "binac-home-two-comparisons", micro_compare)
    env = binac_env(home, prefect_home)
    older = _parent_run_id(
        run_binac(["compare", "--preset", "micro", "--methods", "grpo", "--seeds", "0", "--steps", "1"], env).stdout
    )
    # fixed_critic: 48 actor samples per iteration on micro, the budget of 3 GRPO iterations
    latest = _parent_run_id(
        run_binac(
            ["compare", "--preset", "micro", "--methods", "grpo,fixed_critic", "--seeds", "0,1", "--steps", "3"], env
        ).stdout
    )
    out = tmp_path / "summary.csv"
    proc = run_binac(["sql", "sql/method_summary.sql", "--out", str(out)], env)
    assert proc.stdout.startswith(f"comparison {latest} (latest): preset micro, 4 runs, rows from "), proc.stdout
    compared = _assert_summary_equals_parent_metrics(pd.read_csv(out), home, latest, ["fixed_critic", "grpo"], [0, 1])
    assert compared >= 2 * 2 + 2  # acc_single of both methods with their half-widths, fixed_critic's acc_feedback

    printed = run_binac(["sql", "sql/method_summary.sql", "--param", f"comparison={older}"], env).stdout
    assert printed.startswith(f"comparison {older}: preset micro, 1 run, rows from ")
    run_binac(["sql", "sql/method_summary.sql", "--param", f"comparison={older}", "--out", str(out)], env)
    assert _assert_summary_equals_parent_metrics(pd.read_csv(out), home, older, ["grpo"], [0]) >= 1

    pooled = sqlrun.run(Workspace(home), (REPO / "sql" / "method_summary.sql").read_text(), {"comparison": "all"})
    assert pooled.set_index("method")["runs"].to_dict() == {"grpo": 3, "fixed_critic": 2}
