"""Curves over seeds, drawn the same way in every report. Each plot has one colour per method (the same in every plot),
the mean over seeds as a line with markers, and a band of mean ± 95 % Student-t half-width over seeds
(`stats.t_interval`; no band where a point has one seed)."""

from __future__ import annotations

import math

from binac_core.foundation.stats import t_interval

METHOD_ORDER = (
    "grpo",
    "self_correct",
    "fixed_critic",
    "critic_only",
    "binac",
    "binac_lam0",
    "binac_after",
    "oracle_critic",
    "binac_disc",
)
"""Reports list methods in this order: baselines first, then the learned critics, the oracle ceiling, and the
option added after it (`binac_disc`, last so that every other method keeps its colour)."""

_PALETTE = (
    "#1f77b4",
    "#8c564b",
    "#ff7f0e",
    "#7f7f7f",
    "#d62728",
    "#9467bd",
    "#e377c2",
    "#2ca02c",
    "#17becf",
    "#bcbd22",
)


def method_color(method: str) -> str:
    """A fixed colour per method: METHOD_ORDER's methods get their own; another name gets one from the rest of
    the palette, chosen by its characters (stable across runs and plots)."""
    if method in METHOD_ORDER:
        return _PALETTE[METHOD_ORDER.index(method)]
    rest = _PALETTE[len(METHOD_ORDER) :]
    return rest[sum(map(ord, method)) % len(rest)]


def ordered(methods) -> list[str]:
    methods = list(dict.fromkeys(methods))
    return [m for m in METHOD_ORDER if m in methods] + [m for m in methods if m not in METHOD_ORDER]


def seed_band(
    ax,
    method: str,
    points: dict[int, list[float]],
    scale: float = 100.0,
    marker: str | None = "o",
    label: str | None = None,
    linestyle: str = "-",
):
    """Draw `points` ({x: one fraction in [0, 1] per seed}) on `ax` in %: the mean line and its 95 % band, in the
    method's colour; the band is cut at 0 and 100 % (a t-interval over few seeds can reach past them). `label`
    (default: the method) and `linestyle` tell apart several curves of one method (a pilot's variants)."""
    xs = sorted(points)
    stats = [t_interval(points[x]) for x in xs]
    mean = [scale * m for m, _ in stats]
    half = [0.0 if math.isnan(h) else scale * h for _, h in stats]
    color = method_color(method)
    ax.plot(xs, mean, marker=marker, markersize=3, color=color, label=label or method, linestyle=linestyle)
    if any(half):
        lo = [max(0.0, m - h) for m, h in zip(mean, half, strict=True)]
        hi = [min(scale, m + h) for m, h in zip(mean, half, strict=True)]
        ax.fill_between(xs, lo, hi, color=color, alpha=0.15, linewidth=0)
