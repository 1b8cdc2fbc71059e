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


def wilson_interval(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """The 95 % Wilson score interval (low, high) of a proportion `successes / n` (Wilson 1927); (0, 1) for n = 0.
    Unlike the normal approximation it stays inside [0, 1] and is not empty at 0 successes."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)
