"""The third edition's pilot rule (`SelectRule.AUC_PAIRED`, studies/sparse-feedback-v3.design.md), as plain functions
over per-seed values. They give the area under a held-out curve, the fields a variant changes from the preset's values,
the choice among variants with paired ties, and the grid's edges.

- `curve_area`: the trapezoid rule over the given evaluation steps, divided by their span: a mean accuracy over
  the run (an accuracy of 0.3 at every step has area 0.3). Only the steps given enter, so every method is
  integrated on the same grid (the evaluations every `eval_every` iterations), not on its extra equal-budget
  points.
- `choose_paired`: the *leader* is the variant with the highest mean over seeds; a variant *ties* with it when the
  95 % t-interval of their paired (by seed) difference contains 0 (`stats.t_interval`); among the leader and its
  ties the variant changing the fewest fields wins, then the higher mean, then the name.
- `edges`: the fields the leader changes whose value is the grid's lowest or highest for that field (the design
  widens such a grid before its choice is used).

It does not decide what a grid is widened to (the design says), nor run anything."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from binac_core.foundation.stats import t_interval


def curve_area(points: dict[int, float], steps: list[int]) -> float | None:
    """The trapezoid area under `points` (step -> value) over `steps` (sorted, at least two), divided by the span
    `steps[-1] - steps[0]`; None when a step has no value."""
    if len(steps) < 2 or any(points.get(s) is None for s in steps):
        return None
    area = sum((b - a) * (points[a] + points[b]) / 2 for a, b in zip(steps, steps[1:], strict=False))
    return area / (steps[-1] - steps[0])


def changed_fields(overrides: dict, defaults: dict) -> int:
    """How many of `overrides` ({"section.field": value}) differ from `defaults` (the same keys' preset values)."""
    return sum(1 for k, v in overrides.items() if defaults.get(k) != v)


@dataclass(frozen=True)
class Choice:
    """The rule's outcome over the variants with data."""

    chosen: str | None
    """The chosen variant; None when no variant has data."""
    leader: str | None
    """The variant with the highest mean."""
    ties: tuple[str, ...]
    """The variants (not the leader) whose paired difference from the leader has an interval containing 0."""
    means: dict[str, float]
    """variant -> mean over its seeds."""
    differences: dict[str, tuple[float, float, int]]
    """variant -> (mean, half-width, n) of leader − variant over their common seeds (not for the leader)."""


def _contains_zero(diff: tuple[float, float, int]) -> bool:
    mean, half, n = diff
    return n < 2 or math.isnan(half) or mean - half <= 0 <= mean + half


def choose_paired(values: dict[str, dict[int, float]], changes: dict[str, int]) -> Choice:
    """The rule of the module doc over `values` (variant -> seed -> value) and `changes` (variant -> fields
    changed from the defaults). A variant sharing fewer than two seeds with the leader ties with it (no interval
    can separate them)."""
    means = {v: statistics.fmean(by_seed.values()) for v, by_seed in values.items() if by_seed}
    if not means:
        return Choice(None, None, (), {}, {})
    leader = max(means, key=lambda v: (means[v], v))
    differences = {}
    for v in means:
        if v == leader:
            continue
        seeds = sorted(set(values[v]) & set(values[leader]))
        if seeds:
            mean, half = t_interval([values[leader][s] - values[v][s] for s in seeds])
            differences[v] = (mean, half, len(seeds))
        else:
            differences[v] = (math.nan, math.nan, 0)
    ties = tuple(v for v, d in differences.items() if _contains_zero(d))
    pool = [leader, *ties]
    chosen = min(pool, key=lambda v: (changes.get(v, 0), -means[v], v))
    return Choice(chosen, leader, ties, means, differences)


def edges(leader: str, grid: dict[str, dict], defaults: dict) -> list[tuple[str, str]]:
    """(field, "lowest" | "highest") for each field the leader changes from `defaults` whose value is the lowest or
    highest that field takes across `grid` (variant -> overrides; a variant without the field has its default)."""
    out = []
    for key, value in grid[leader].items():
        if defaults.get(key) == value or not isinstance(value, int | float) or isinstance(value, bool):
            continue
        taken = {ov.get(key, defaults.get(key)) for ov in grid.values()} - {None}
        if value <= min(taken):
            out.append((key, "lowest"))
        elif value >= max(taken):
            out.append((key, "highest"))
    return out
