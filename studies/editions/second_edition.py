"""The second edition (`hypotheses: second_edition`, the default): H1-H6 of studies/sparse-feedback-v2.design.md on the
final points, tested mechanically on a study's finished main runs. The study report prints its section
(binac_core/studies/editions.py). Tested only when the study runs grpo, fixed_critic and binac (`HYPOTHESIS_METHODS`); a
study with variants is an exploration here.

The verdict rules are those of binac_core/studies/study_report.py's module doc (`binac_core.studies.verdicts`),
and two of the design's own:

- H5's first half ("GRPO's zero_adv_frac at iteration 1 is at least 0.5") is read on the mean over seeds;
- H6 has its own margin rule (`margin_verdict`): *not supported* when the interval of binac's held-out
  `critic_approves_wrong` (last − step 0) has its lower end above 0 (checked first: a significant rise, however
  small, is drift), *supported* when its upper end is below +0.05, *inconclusive* otherwise.
"""

from __future__ import annotations

import math
import statistics
from functools import partial

from binac_core.rl.methods import method_spec
from binac_core.studies import run_values as rv
from binac_core.studies.editions import EXPLORATION
from binac_core.studies.run_values import runs_of, values_at
from binac_core.studies.verdicts import NO_DATA, claim, combine, diff_text, margin_verdict, paired

HYPOTHESIS_METHODS = frozenset({"grpo", "fixed_critic", "binac"})
"""The methods the hypotheses compare: a study without all of them gets none."""
H6_MARGIN = 0.05
"""H6: an increase of binac's approves_wrong below this (5 points) still counts as "no higher" (the design)."""
FEEDBACK_RUNS = ("binac", "binac_lam0", "binac_after")
"""H4's three critic rewards, side by side."""


def _points(runs: list[dict], axis: str, total: int) -> str:
    """The iterations and exact counts at which these runs reached the axis's total."""
    found = sorted({rv.budget_point(r, axis, total) for r in runs} - {None})
    if found:
        return ", ".join(f"iteration {it} ({count})" for it, count in found)
    return "; ".join(sorted({rv.never_reached(r, axis) for r in runs})) or "no runs"


def section(st, done: list[dict], totals: dict[str, int]) -> list[str]:
    """The "Hypotheses" section over the finished runs `done` (variants left out); none tested in an exploration
    or a study that does not run all of `HYPOTHESIS_METHODS`."""
    if st.variants:
        return list(EXPLORATION)
    if not HYPOTHESIS_METHODS <= set(st.methods):
        return _none_tested()
    return _hypotheses(st, done, totals)


def _none_tested() -> list[str]:
    """A control or a partial grid: the hypotheses compare methods it does not run."""
    return [
        "## Hypotheses",
        "",
        f"None tested: the pre-registered hypotheses compare {', '.join(sorted(HYPOTHESIS_METHODS))}, which this "
        "study does not all run; its endpoints are the change over training above.",
        "",
    ]


def _hypotheses(st, done: list[dict], totals: dict[str, int]) -> list[str]:
    main = [r for r in done if not r.get("variant")]
    by_regime = {reg.name: [r for r in main if r["regime"] == reg.name] for reg in st.regimes}
    sparse = by_regime.get("sparse", [])
    cell = partial(rv.seed_cell, seeds=len(st.seeds))
    at_last, at_0 = rv.last_eval, (lambda r: 0)
    lines = [
        "## Hypotheses",
        "",
        "The design's verdict rules (studies/sparse-feedback-v2.design.md, module doc of "
        "studies/editions/second_edition.py) are applied mechanically: nothing below is judged by hand. Differences in "
        'points, paired by seed, mean ± 95 % t half-width; "last" is each run\'s last evaluation '
        f'(iteration {st.iterations}). A hypothesis without data reads "{NO_DATA}".'
        + ("" if "sparse" in by_regime else " The study has no regime named `sparse`: H1, H2 and H5 have no data."),
        "",
    ]

    def order(rr, at, name="acc_single"):
        b, f, g = (values_at(runs_of(rr, m), name, at) for m in ("binac", "fixed_critic", "grpo"))
        return paired(b, f), paired(f, g)

    d1, d2 = order(sparse, at_last)
    lines.append(
        f"- **H1** (sparse, equal iterations, final acc_single: binac > fixed_critic and fixed_critic > "
        f"grpo): **{claim([d1, d2])}**. binac − fixed_critic {diff_text(d1)}; fixed_critic − grpo {diff_text(d2)}."
    )
    at = {axis: partial(rv.point_step, axis=axis, total=totals[axis]) for axis in rv.AXES}
    d1, d2 = order(sparse, at["actor_train"])
    g1, g2 = order(sparse, at["generated"])
    pts = {
        axis: "; ".join(
            f"{m} {_points(runs_of(sparse, m), axis, totals[axis])}" for m in ("binac", "fixed_critic", "grpo")
        )
        for axis in rv.AXES
    }
    lines.append(
        f"- **H2** (sparse, the same at the equal-budget point on actor training samples, "
        f"{totals['actor_train']}): **{claim([d1, d2])}**. binac − fixed_critic {diff_text(d1)}; fixed_critic − "
        f"grpo {diff_text(d2)}. Points reached: {pts['actor_train']}."
    )
    lines.append(
        f"  - Beside it, not a hypothesis: the same at the equal-budget point on generated samples "
        f"({totals['generated']}): binac − fixed_critic {diff_text(g1)}; fixed_critic − grpo {diff_text(g2)} (by the same "
        f"rule: {claim([g1, g2])}). Points reached: {pts['generated']}."
    )

    h3_parts, h3_lines = [], []
    for name, rr in by_regime.items():
        binac, fixed = runs_of(rr, "binac"), runs_of(rr, "fixed_critic")
        hits = values_at(binac, "critic_hits_first_error", at_last)
        d_time = paired(hits, values_at(binac, "critic_hits_first_error", at_0))
        d_frozen = paired(hits, values_at(binac, "frozen_critic_hits_first_error", at_last))
        d_fixed = paired(hits, values_at(fixed, "critic_hits_first_error", at_last))
        h3_parts.append(claim([d_time, d_frozen]))
        h3_lines.append(
            f"  - {name}: **{h3_parts[-1]}**. last − step 0 {diff_text(d_time)}; binac − frozen critic on "
            f"binac's own attempts {diff_text(d_frozen)}. Beside it: the frozen critic on fixed_critic's "
            f"attempts {cell(values_at(fixed, 'critic_hits_first_error', at_last))} %, binac − it "
            f"{diff_text(d_fixed)}."
        )
    lines.append(
        f"- **H3** (both regimes: binac's held-out critic_hits_first_error at the last evaluation > at step "
        f"0, and > the frozen base critic's on binac's own held-out attempts): **{combine(h3_parts)}**."
    )
    lines += h3_lines

    h4_parts, h4_lines = [], []
    for name, rr in by_regime.items():
        d = paired(
            values_at(runs_of(rr, "binac"), "acc_feedback", at_last),
            values_at(runs_of(rr, "binac_lam0"), "acc_feedback", at_last),
        )
        h4_parts.append(claim([d]))
        h4_lines.append(f"  - {name}: **{h4_parts[-1]}**. binac − binac_lam0 {diff_text(d)}.")
    lines.append(
        f"- **H4** (both regimes: penalty-form binac > binac_lam0 on final acc_feedback): **{combine(h4_parts)}**."
    )
    lines += h4_lines
    lines += [
        "",
        "  The three critic rewards side by side (last evaluation; critic_signal: mean over training "
        "iterations, in [−1, 1]):",
        "",
        "  | regime | method | acc_feedback | critic_hits_first_error | critic_approves_wrong | critic_signal |",
        "  | --- | --- | --- | --- | --- | --- |",
    ]
    for name, rr in by_regime.items():
        for m in FEEDBACK_RUNS:
            runs = runs_of(rr, m)
            lines.append(
                f"  | {name} | {m} | "
                + " | ".join(
                    cell(values_at(runs, k, at_last))
                    for k in ("acc_feedback", "critic_hits_first_error", "critic_approves_wrong")
                )
                + f" | {cell(rv.train_mean(runs, 'critic_signal'), scale=1.0, digits=3, sign=True)} |"
            )
    lines.append("")

    grpo0 = rv.train_at(runs_of(sparse, "grpo"), "zero_adv_frac", 1)
    feedback_methods = [m for m in st.methods if method_spec(m).feedback]
    diffs = {m: paired(grpo0, rv.train_at(runs_of(sparse, m), "refine_zero_adv_frac", 1)) for m in feedback_methods}
    first = statistics.fmean(grpo0.values()) if grpo0 else math.nan
    if math.isnan(first):
        h5 = NO_DATA
    elif first < 0.5:
        h5 = "not supported"
    else:
        h5 = claim(list(diffs.values())) if diffs else NO_DATA
    lines.append(
        f"- **H5** (sparse: GRPO's zero_adv_frac at iteration 1 ≥ 0.5 (mean over seeds), and every feedback "
        f"method's refine_zero_adv_frac at iteration 1 (G unshaped r1 per problem, GRPO's group size) lower "
        f"than GRPO's zero_adv_frac, paired): **{h5}**. GRPO: {cell(grpo0)} %; GRPO − refinement groups: "
        + ("; ".join(f"{m} {diff_text(d)}" for m, d in diffs.items()) or "no feedback method")
        + "."
    )

    h6_parts, h6_lines = [], []
    for name, rr in by_regime.items():
        binac = runs_of(rr, "binac")
        d = paired(values_at(binac, "critic_approves_wrong", at_last), values_at(binac, "critic_approves_wrong", at_0))
        h6_parts.append(margin_verdict(d, H6_MARGIN))
        h6_lines.append(f"  - {name}: **{h6_parts[-1]}**. last − step 0 {diff_text(d)}.")
    lines.append(
        f"- **H6** (both regimes, no approval drift: binac's held-out critic_approves_wrong at the last "
        f"evaluation no higher than at step 0; not supported when the interval of last − step 0 starts above "
        f"0, else supported when it ends below +{100 * H6_MARGIN:g} points): **{combine(h6_parts)}**."
    )
    lines += h6_lines
    return lines + [""]
