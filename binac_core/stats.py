"""The one interval every report uses: mean and 95 % Student-t half-width over seeds."""

from __future__ import annotations

import math
import statistics


def t_interval(values: list[float]) -> tuple[float, float]:
    """(mean, half-width of the 95 % Student-t interval); half-width is NaN for a single seed."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, math.nan
    from scipy.stats import t

    half = t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, half
