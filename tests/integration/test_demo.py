"""`binac demo` end to end on the micro preset (two iterations, so it stays a test): the three runs trained in
parallel processes under one parent run, the printed table equal to what MLflow logged, the curves' PNG written,
the parent's description naming the comparison and linking the children's curves, and a second `binac demo`
answered from the store without training."""

from __future__ import annotations

import re
import time
from urllib.parse import unquote

import pytest
from conftest import binac_env, run_binac

from binac_core.foundation.workspace import Workspace
from binac_core.store import tracking

pytestmark = pytest.mark.integration
DEMO = ["demo", "--preset", "micro", "--steps", "2", "--parallel", "2"]


@pytest.fixture(scope="module")
def demo(tmp_path_factory, prefect_home):
    home = tmp_path_factory.mktemp("binac-home-demo")  # the micro base: built once in the session's model cache
    env = binac_env(home, prefect_home)
    first = run_binac(DEMO, env)
    t0 = time.time()
    again = run_binac(DEMO, env)
    return {"home": home, "first": first.stdout, "again": again.stdout, "again_s": time.time() - t0}


def test_the_demo_trains_three_runs_in_parallel_under_one_described_parent(demo):
    ws = Workspace(demo["home"])
    c = tracking.client(ws)
    runs = c.search_runs([tracking.experiment_id(c, ws)])
    [parent] = [r for r in runs if r.data.tags.get("kind") == "compare"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert sorted(r.data.tags["method"] for r in children) == ["binac", "fixed_critic", "grpo"]
    assert all(r.info.status == "FINISHED" for r in children)
    # two processes at once: some run started before another ended
    spans = sorted((r.info.start_time, r.info.end_time) for r in children)
    assert any(b[0] < a[1] for a, b in zip(spans, spans[1:], strict=False)), spans
    note = unquote(parent.data.tags["mlflow.note.content"])
    assert "grpo, fixed_critic, binac" in note and "2 iterations each (equal iterations)" in note
    assert "report.md" in note and "#/metric?runs=" in note
    assert all(r.info.run_id in note for r in children)


def test_the_printed_table_is_what_mlflow_logged(demo):
    ws = Workspace(demo["home"])
    c = tracking.client(ws)
    out = demo["first"]
    blocks = re.findall(r"  (\w+) \(iterations ([\d, ]+)\):\n    held-out acc_single +(.+)\n", out)
    assert sorted(b[0] for b in blocks) == ["binac", "fixed_critic", "grpo"]
    runs = {
        r.data.tags["method"]: r.info.run_id
        for r in c.search_runs([tracking.experiment_id(c, ws)])
        if r.data.tags.get("kind") != "compare"
    }
    for method, steps, cells in blocks:
        printed = [float(v) for v in re.findall(r"(\S+) \(n=\d+\)", cells)]
        logged = {m.step: m.value for m in c.get_metric_history(runs[method], "eval/acc_single")}
        assert [int(s) for s in steps.split(", ")] == sorted(logged)
        assert printed == [round(100 * logged[s], 1) for s in sorted(logged)]
    png = re.search(r"^curves \(held-out, per method\): (\S+)$", out, re.M).group(1)
    assert png.endswith("demo_curves.png") and (demo["home"] / "reports").exists()
    assert "MLflow, the children's held-out curves: http" in out and "#/metric?runs=" in out


def test_a_second_demo_prints_from_the_store(demo):
    assert "this comparison finished before" in demo["again"]
    assert "[grpo" not in demo["again"]  # no iteration ran
    first = demo["first"][demo["first"].index("held-out evaluations") :].split("\ncurves")[0]
    assert first in demo["again"]
