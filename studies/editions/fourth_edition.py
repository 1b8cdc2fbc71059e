"""The fourth edition (`hypotheses: fourth_edition`): V1-V5 of studies/sparse-feedback-v4.design.md, tested mechanically
on one base's finished main runs. The study report prints its section (binac_core/studies/editions.py). The critic
margin over the frozen critic on the attempt bank, binac's `chosen` against its `reference` variant and against
fixed_critic, the reward information, the positive control.

The arms: `binac` variants `reference` (the third edition's binac) and `chosen` (the pilot's choice), `fixed_critic`,
`critic_only` (its variant `chosen` where the study has one, else its plain runs), at the `sparse` regime.
Endpoints: the critic margin (`critic_margin.margins`: the critic's first-error hits − false alarm minus the
frozen base critic's on the bank's half of the study's evaluation split, averaged over the evaluations of the
run's second half); `run_values.area` of a held-out accuracy; the equal-budget points (`run_values.point_step`,
from the runs' logged running totals); a training measure's mean over the iterations of the second half
(`late_mean`). Comparisons are paired by seed with their per-seed differences (`verdicts.compared`);
verdicts follow `binac_core.studies.verdicts`. An arm the study lacks reads "no data". It judges one base: the
results page says which verdicts hold on both."""

from __future__ import annotations

import math
import statistics
from functools import partial

from binac_core.studies.critic_curves import bank_series
from binac_core.studies.critic_margin import bank_split, margins, window
from binac_core.studies.run_values import AXES, area, last_eval, point_step, runs_of, values_at
from binac_core.studies.verdicts import claim, compared

REGIME = "sparse"


def late_mean(st, runs: list[dict], name: str) -> dict[int, float]:
    """seed -> the mean of `train/<name>` over the iterations of the run's second half (from `iterations / 2`
    on; iterations without a value left out), for the runs that have any."""
    out = {}
    for r in runs:
        got = r["metrics"].get(f"train/{name}", {})
        vals = [v for s, v in got.items() if 2 * int(s) >= st.iterations and v is not None and not math.isnan(v)]
        if vals:
            out[r["seed"]] = statistics.fmean(vals)
    return out


def _arms(rr: list[dict]) -> dict[str, list[dict]]:
    only = runs_of(rr, "critic_only", "chosen") or runs_of(rr, "critic_only")
    return {
        "chosen": runs_of(rr, "binac", "chosen"),
        "reference": runs_of(rr, "binac", "reference"),
        "fixed_critic": runs_of(rr, "fixed_critic"),
        "critic_only": only,
    }


def _zero(values: dict[int, float]) -> dict[int, float]:
    return dict.fromkeys(values, 0.0)


def section(st, done: list[dict], totals: dict[str, int]) -> list[str]:
    """The "Hypotheses" section over the finished runs `done` of the `sparse` regime."""
    arms = _arms([r for r in done if r["regime"] == REGIME])
    steps = ", ".join(map(str, window(st)))
    lines = [
        "## Hypotheses",
        "",
        "The rules of studies/sparse-feedback-v4.design.md, applied mechanically "
        "(studies/editions/fourth_edition.py), on this study's base: differences in points, paired by seed, "
        "mean ± 95 % t half-width with the per-seed differences. The *margin* is a run's critic's first-error hits "
        f"− false alarm on the bank's `{bank_split(st)}` half minus the frozen base critic's, averaged over the "
        f"evaluations at {steps} (binac_core/studies/critic_margin.py). `chosen` and `reference` are binac's "
        "variants.",
        "",
    ]
    for fn in (_v1, _v2, _v3, _v4, _v5):
        lines += fn(st, arms, totals)
    return lines + [""]


def _v1(st, arms, totals) -> list[str]:
    m = margins(st, arms["chosen"])
    d, t = compared("margin of binac [chosen]", m, _zero(m))
    hits = margins(st, arms["chosen"], "hits_first_error")
    beside = compared("its hits margin", hits, _zero(hits))[1]
    return [
        f"- **V1** (binac [chosen]'s critic ahead of the frozen critic: margin > 0): **{claim([d])}**. {t}. "
        f"Beside it: {beside}."
    ]


def _v2(st, arms, totals) -> list[str]:
    d, t = compared("chosen − reference margin", margins(st, arms["chosen"]), margins(st, arms["reference"]))
    return [f"- **V2** (binac [chosen]'s margin > binac [reference]'s): **{claim([d])}**. {t}."]


def _v3(st, arms, totals) -> list[str]:
    chosen, fixed = arms["chosen"], arms["fixed_critic"]
    diffs, texts = [], []
    d, t = compared(
        "area of acc_single, chosen − fixed_critic", area(st, chosen, "acc_single"), area(st, fixed, "acc_single")
    )
    diffs.append(d)
    texts.append(t)
    for axis, (label, _) in AXES.items():
        at = partial(point_step, axis=axis, total=totals[axis])
        d, t = compared(
            f"acc_single at the equal-budget point on {label} ({totals[axis]})",
            values_at(chosen, "acc_single", at),
            values_at(fixed, "acc_single", at),
        )
        diffs.append(d)
        texts.append(t)
    return [
        "- **V3** (binac [chosen] > fixed_critic on acc_single's area and at both equal-budget points): "
        f"**{claim(diffs)}**. " + "; ".join(texts) + "."
    ]


def _v4(st, arms, totals) -> list[str]:
    spread, t1 = compared(
        "critic_reward_spread, chosen − reference",
        late_mean(st, arms["chosen"], "critic_reward_spread"),
        late_mean(st, arms["reference"], "critic_reward_spread"),
    )
    hint = late_mean(st, arms["chosen"], "hint_value")
    value, t2 = compared("hint_value of binac [chosen]", hint, _zero(hint))
    return [
        "- **V4** (over the second half's iterations: binac [chosen]'s mean within-group critic-reward spread > "
        f"binac [reference]'s, and its mean hint value > 0): **{claim([spread, value])}**. {t1}; {t2}."
    ]


def _v5(st, arms, totals) -> list[str]:
    split, only = bank_split(st), arms["critic_only"]
    hits = "hits_first_error"
    last = {r["seed"]: v for r in only if (v := bank_series(r, split, "critic", hits).get(last_eval(r))) is not None}
    first = {r["seed"]: v for r in only if (v := bank_series(r, split, "critic", hits).get(0)) is not None}
    d, t = compared("critic_only's bank hits, last − step 0", last, first)
    m = margins(st, only)
    beside = compared("its margin", m, _zero(m))[1]
    return [
        f"- **V5** (the positive control: critic_only's bank first-error hits at the last evaluation > at step 0): "
        f"**{claim([d])}**. {t}. Beside it: {beside}."
    ]
