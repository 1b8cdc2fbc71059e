"""The `meta` of a comparison for `binac_core.reports.report.build_report`, for the tests that render a report from
hand-made runs."""

from __future__ import annotations


def report_meta(**overrides) -> dict:
    """One seed (0) of preset `p`: a budget of 4 actor training samples, 1 step, 2 held-out problems sampled once at
    T = 1; `overrides` replace or add keys."""
    meta = dict(preset="p", seeds=[0], budget=4, steps=1, n_eval=2, eval_samples=1, eval_temperature=1.0)
    return meta | overrides
