"""Reading a study's finished runs: an arm's runs, a metric's values by seed at a reading point, the equal-budget
points, and the one table cell every study table uses. The runs are the run dicts flows/study.py's `collect` returns
({regime, difficulty, method, variant, seed, finished, state, metrics: {MLflow metric: {step: value}},
actor_train_per_iteration, generated_per_iteration}); the cell is the mean ± 95 % t-interval over seeds, with the seeds'
own values where they split. Nothing here judges a result (binac_core/studies/verdicts.py does)."""

from __future__ import annotations

import math
import statistics

from binac_core.foundation.stats import per_seed, t_interval
from binac_core.studies.pilot_rule import curve_area

AXES = {
    "actor_train": ("actor training samples", "actor_train_per_iteration"),
    "generated": ("generated samples", "generated_per_iteration"),
}
"""Budget axis -> (its name in the report, the run dict's per-iteration count)."""

LOGGED = {"actor_train": "train/actor_samples", "generated": "train/generated_samples"}
"""Budget axis -> the running total the run logged at every iteration (flows/bookkeeping.py `IterationLog`)."""


def evals(r: dict, name: str) -> dict[int, float]:
    return {int(k): v for k, v in r["metrics"].get(f"eval/{name}", {}).items()}


def last_eval(r: dict) -> int | None:
    """The run's last evaluation (its iteration), None without one."""
    steps = evals(r, "acc_single")
    return max(steps) if steps else None


def count_at(r: dict, axis: str, step: int) -> int:
    """The run's cumulative count on `axis` after iteration `step`: the running total it logged (`LOGGED`; exact
    under an alternation, whose critic iterations add no actor training samples), else `step` × its per-iteration
    count (a run that logged no totals)."""
    logged = r["metrics"].get(LOGGED[axis], {})
    if step in logged:
        return int(logged[step])
    return 0 if step == 0 else step * r[AXES[axis][1]]


def budget_point(r: dict, axis: str, total: int) -> tuple[int, int] | None:
    """(iteration, exact count reached) of the run's first evaluation whose cumulative count on `axis`
    (`actor_train` or `generated`; `count_at`) reaches `total`; None when it never does (0 per iteration, or no
    evaluation that far)."""
    if not r[AXES[axis][1]]:
        return None
    steps = [s for s in sorted(evals(r, "acc_single")) if count_at(r, axis, s) >= total]
    return (steps[0], count_at(r, axis, steps[0])) if steps else None


def point_step(r: dict, axis: str, total: int) -> int | None:
    point = budget_point(r, axis, total)
    return point[0] if point else None


def never_reached(r: dict, axis: str) -> str:
    if not r[AXES[axis][1]]:
        return "never (actor not trained)" if axis == "actor_train" else "never (nothing generated)"
    last = last_eval(r)
    return "not reached" + (f" (last evaluation: iteration {last})" if last is not None else "")


def runs_of(rr: list[dict], method: str, variant: str = "") -> list[dict]:
    return [r for r in rr if r["method"] == method and r.get("variant", "") == variant]


def values_at(runs: list[dict], name: str, at) -> dict[int, float]:
    """seed -> eval metric `name` at step `at(run)` (the runs of one arm)."""
    out = {}
    for r in runs:
        step = at(r)
        v = evals(r, name).get(step) if step is not None else None
        if v is not None:
            out[r["seed"]] = v
    return out


def train_at(runs: list[dict], name: str, step: int) -> dict[int, float]:
    return {
        r["seed"]: r["metrics"][f"train/{name}"][step] for r in runs if step in r["metrics"].get(f"train/{name}", {})
    }


def train_mean(runs: list[dict], name: str) -> dict[int, float]:
    out = {}
    for r in runs:
        vals = [v for v in r["metrics"].get(f"train/{name}", {}).values() if v is not None and not math.isnan(v)]
        if vals:
            out[r["seed"]] = statistics.fmean(vals)
    return out


def seed_cell(
    values: dict[int, float], scale: float = 100.0, digits: int = 1, seeds: int | None = None, sign: bool = False
) -> str:
    """mean ± 95 % t half-width over seeds (scaled); the seed count when it is not the study's; and the values
    seed by seed (in seed order) when the seeds split (`stats.seeds_split`: ≥ 2 seeds whose range is ≥ 20
    points), where a t-interval over a bimodal set would hide the modes."""
    if not values:
        return "–"
    mean, half = t_interval(list(values.values()))
    n = f" (n={len(values)})" if len(values) != seeds else ""
    fmt = f"{'+' if sign else ''}.{digits}f"
    seeds_shown = per_seed([values[s] for s in sorted(values)], scale, digits, sign)
    if math.isnan(half):
        return f"{scale * mean:{fmt}}{n}"
    return f"{scale * mean:{fmt}} ± {scale * half:.{digits}f}{seeds_shown}{n}"


def curve_steps(st) -> list[int]:
    """Step 0, every `eval_every` iterations, and the last: the grid every area under a curve is taken on (a
    method's extra equal-budget evaluations left out, so that every method is integrated alike)."""
    return sorted(set(range(0, st.iterations + 1, st.eval_every)) | {st.iterations})


def area(st, runs: list[dict], name: str) -> dict[int, float]:
    """seed -> the area under held-out `name` over `curve_steps(st)` (`pilot_rule.curve_area`: a mean accuracy over
    the run), for the runs that have every point."""
    steps = curve_steps(st)
    return {r["seed"]: a for r in runs if (a := curve_area(evals(r, name), steps)) is not None}
