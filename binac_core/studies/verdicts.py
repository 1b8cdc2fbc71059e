"""The verdict rules every study report applies to paired differences (module doc of
binac_core/studies/study_report.py). A claim "A > B" is supported when the 95 % t-interval of the per-seed differences
lies above 0, not supported when it lies below 0, inconclusive otherwise; several comparisons combine as one claim; a
margin rule decides "no higher than" claims. Differences are (mean, half-width, n) tuples (`paired`), written with their
per-seed values by `compared`."""

from __future__ import annotations

import math

from binac_core.foundation.stats import t_interval

NO_DATA = "inconclusive (no data)"
Diff = tuple[float, float, int]
"""A paired difference: (mean, 95 % t half-width, seeds)."""


def paired(a: dict[int, float], b: dict[int, float]) -> tuple[float, float, int]:
    """(mean, half-width, n) of the per-seed differences a − b over the seeds both have."""
    seeds = sorted(set(a) & set(b))
    if not seeds:
        return math.nan, math.nan, 0
    mean, half = t_interval([a[s] - b[s] for s in seeds])
    return mean, half, len(seeds)


def state(diff: tuple[float, float, int]) -> str:
    mean, half, n = diff
    if n < 2 or math.isnan(half):
        return "inconclusive"
    if mean - half > 0:
        return "supported"
    if mean + half < 0:
        return "not supported"
    return "inconclusive"


def verdict(diffs: list[tuple[float, float, int]]) -> str:
    """The fixed rule of the module doc over claims "difference > 0"."""
    states = [state(d) for d in diffs]
    if "not supported" in states:
        return "not supported"
    return "supported" if states and all(s == "supported" for s in states) else "inconclusive"


def margin_verdict(diff: tuple[float, float, int], margin: float) -> str:
    """H6's rule over a difference (last − step 0): not supported when the interval's lower end is above 0 (a
    significant rise, however small: checked first), supported when its upper end is below `margin`,
    inconclusive otherwise (one seed: inconclusive; no seed: no data)."""
    mean, half, n = diff
    if n == 0:
        return NO_DATA
    if n < 2 or math.isnan(half):
        return "inconclusive"
    if mean - half > 0:
        return "not supported"
    if mean + half < margin:
        return "supported"
    return "inconclusive"


def claim(diffs: list[tuple[float, float, int]]) -> str:
    """`verdict` over the comparisons with data; without data for some: not supported when an available one is,
    inconclusive (no data) otherwise."""
    have = [d for d in diffs if d[2] > 0]
    if "not supported" in (state(d) for d in have):
        return "not supported"
    if not have or len(have) < len(diffs):
        return NO_DATA
    return verdict(have)


def combine(states: list[str]) -> str:
    """Per-part verdicts combined like the comparisons of one claim (no data as in `claim`)."""
    if "not supported" in states:
        return "not supported"
    if not states or NO_DATA in states:
        return NO_DATA
    return "supported" if all(s == "supported" for s in states) else "inconclusive"


def diff_text(diff: tuple[float, float, int], scale: float = 100.0) -> str:
    mean, half, n = diff
    if n == 0:
        return "no paired seeds"
    return f"{scale * mean:+.1f} ± {scale * half:.1f} (n={n})" if not math.isnan(half) else f"{scale * mean:+.1f} (n=1)"


def compared(label: str, a: dict[int, float], b: dict[int, float], scale: float = 100.0) -> tuple[Diff, str]:
    """The paired difference a − b and its text: mean ± half-width (n) and the per-seed differences."""
    diff = paired(a, b)
    mean, half, n = diff
    if n == 0:
        return diff, f"{label}: no paired seeds"
    seeds = sorted(set(a) & set(b))
    each = ", ".join(signed(scale * (a[s] - b[s])) for s in seeds)
    spread = f" ± {scale * half:.1f}" if not math.isnan(half) else ""
    return diff, f"{label} {signed(scale * mean)}{spread} (n={n}; per seed {each})"


def signed(x: float) -> str:
    """`x` with its sign and one decimal; a value that rounds to zero is +0.0 (never -0.0)."""
    return f"{round(x, 1) + 0.0:+.1f}"
