"""bench/stage_costs.py's arithmetic on hand-made metric histories (the MLflow query runs in
tests/integration/test_micro_compare.py)."""

from bench.stage_costs import phase_totals, table
from binac_core.foundation.timing import PHASES


def test_each_phase_is_summed_over_the_iterations_and_a_missing_one_is_zero():
    got = phase_totals({"perf/sample_s": [1.0, 2.5], "perf/actor_update_s": [4.0], "perf/step_s": [99.0]})
    assert got == {p: 0.0 for p in PHASES} | {"sample": 3.5, "actor_update": 4.0}


def test_the_table_gives_each_phase_its_share():
    text = table([("grpo-micro-s0", {p: 0.0 for p in PHASES} | {"sample": 3.0, "score": 1.0})])
    assert "| grpo-micro-s0 | 4.0 | 3.0 (75 %) |" in text and "1.0 (25 %)" in text
