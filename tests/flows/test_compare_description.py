"""The comparison parent run's description (`flows.compare.parent_description`, MLflow's note): what was compared,
at which budget, where the report is, and once the runs are done links that open their held-out curves side by
side (MLflow's metric page) and the actor training samples each used."""

from __future__ import annotations

import json
import re
from urllib.parse import parse_qs, unquote

from flows.compare import CURVES, parent_description

RUNS = [
    {"run_id": "r-grpo", "method": "grpo", "seed": 0, "evals": {"0": {}, "15": {}}, "samples_per_iteration": 64},
    {"run_id": "r-binac", "method": "binac", "seed": 0, "evals": {"0": {}, "15": {}}, "samples_per_iteration": 320},
]


def test_before_the_runs_it_says_what_is_compared_and_where_the_report_goes():
    text = parent_description("demo", ["grpo", "binac"], [0], 15, "iterations", 960, "/h/reports/r.md")
    assert "Comparison on preset `demo`: grpo, binac; seed(s) 0; 15 iterations each (equal iterations)." in text
    assert "`/h/reports/r.md`" in text and "#/metric" not in text
    budget = parent_description("tiny", ["grpo"], [0, 1], 30, "samples", 1920, "r.md")
    assert "an equal budget of 1920 actor training samples (30 GRPO iterations)" in budget


def test_after_the_runs_it_links_every_curve_over_every_child():
    text = parent_description("demo", ["grpo", "binac"], [0], 15, "iterations", 960, "r.md", RUNS, "7")
    links = [line for line in text.split("\n\n") if line.startswith("The children's held-out curves")]
    assert len(links) == 1 and text.index(links[0]) < text.index("Report:")  # shown before "Show more"
    found = re.findall(r"\[(eval/[\w/]+)\]\(([^)\s]+)\)", links[0])
    assert [k for k, _ in found] == list(CURVES)
    for key, href in found:
        assert href.startswith("/#/metric?")
        query = parse_qs(href.split("?", 1)[1])
        assert json.loads(unquote(query["runs"][0])) == ["r-grpo", "r-binac"]
        assert json.loads(unquote(query["plot_metric_keys"][0])) == [key]
        assert json.loads(unquote(query["experiments"][0])) == ["7"]
    assert "Actor training samples used: grpo s0 960, binac s0 4800." in text
