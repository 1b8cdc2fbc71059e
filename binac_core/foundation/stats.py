"""The one mean, the one interval and the one per-seed rule the metrics and reports use. The mean: `mean` (accuracies,
rewards); the interval: mean and 95 % Student-t half-width over seeds (`t_interval`); the rule for when a report also
gives the per-seed values behind such an interval: `seeds_split`, `per_seed`."""

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


SPLIT = 0.20
"""Seeds *split* when their values' range (max − min) is at least this, on the values' own scale: 20 points on a
share or an accuracy, 0.2 on `critic_signal`'s [−1, 1]."""


def seeds_split(values: list[float], split: float = SPLIT) -> bool:
    """Whether a cell's per-seed values split: at least 2 values and max − min ≥ `split` (`SPLIT`). A mechanical
    rule, not a test of bimodality: five seeds spread evenly over 20 points split as well as two clusters do, and
    a mean ± t-interval is shown beside the values either way."""
    return len(values) >= 2 and max(values) - min(values) >= split - 1e-12


def per_seed(values: list[float], scale: float = 100.0, digits: int = 1, sign: bool = False) -> str:
    """`" (per seed: v1, v2, ...)"`, the values in the order given (the reports give them by seed), scaled and
    formatted like the cell's mean, when they split (`seeds_split`); else ""."""
    if not seeds_split(values):
        return ""
    fmt = f"{'+' if sign else ''}.{digits}f"
    return " (per seed: " + ", ".join(f"{scale * v:{fmt}}" for v in values) + ")"
