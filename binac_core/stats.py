"""The one mean the stages' metrics use (`mean`: accuracies, rewards), and the one interval every report uses:
mean and 95 % Student-t half-width over seeds (`t_interval`)."""

from __future__ import annotations

import math
import statistics


def mean(values) -> float:
    """sum / count (in that order, so a metric is the same float wherever it is computed); 0.0 when empty."""
    values = list(values)
    return sum(values) / len(values) if values else 0.0


def t_interval(values: list[float]) -> tuple[float, float]:
    """(mean, half-width of the 95 % Student-t interval); half-width is NaN for a single seed."""
    centre = statistics.fmean(values)
    if len(values) < 2:
        return centre, math.nan
    from scipy.stats import t

    half = t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return centre, half
