"""The testbed before/after harness's report (`bench/testbed_run.py`) on hand-made pairs: wall and CPU ratios per
seed and their medians, the per-phase medians, and the paired difference of the areas. No run is started and no
timing is asserted."""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # `bench` is a folder of the repository, not an installed package
    sys.path.insert(0, str(REPO))

from bench import testbed_run  # noqa: E402
from binac_core.foundation.timing import PHASES  # noqa: E402


def _pair(seed, wall, cpu):
    return {
        "seed": seed,
        "load": 2.0,
        "wall": dict(zip(("before", "after"), wall, strict=True)),
        "cpu": dict(zip(("before", "after"), cpu, strict=True)),
        "end_load": {"before": 1.0, "after": 3.0},
    }


def _values(scale, areas):
    return {
        s: {"phases": dict.fromkeys(PHASES, scale), "acc_single": a, "acc_feedback": a + 0.1} for s, a in areas.items()
    }


def test_report_ratios_phases_and_paired_areas():
    pairs = [_pair(0, (600, 300), (500, 200)), _pair(1, (500, 200), (400, 200)), _pair(2, (400, 250), (300, 100))]
    values = {"before": _values(2.0, {0: 0.5, 1: 0.6, 2: 0.7}), "after": _values(1.0, {0: 0.52, 1: 0.6, 2: 0.69})}
    text = testbed_run.report(pairs, values)
    assert "| 0 | 2.0 / 3.0 / 1.0 | 600 | 300 | 2.00 | 500 | 200 | 2.50 |" in text
    # wall ratios 2.0, 2.5, 1.6: median 2.0; CPU ratios 2.5, 2.0, 3.0: median 2.5
    assert "median before / after (wall): **2.00** [1.60-2.50]" in text
    assert "median before / after (cpu): **2.50** [2.00-3.00]" in text
    assert "| before (median s) | " + " | ".join("2.0" for _ in PHASES) + " |" in text
    # after - before: +2.0, 0.0, -1.0 points: mean +0.3, sd 1.53, t(0.975, 2) 1.53 / sqrt(3) = 3.8: [-3.5, +4.1]
    assert "| acc_single area | 50.0 / 52.0 | 60.0 / 60.0 | 70.0 / 69.0 | +0.3 [-3.5, +4.1] |" in text
