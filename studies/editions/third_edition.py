"""The third edition (`hypotheses: third_edition`): H1-H8 of studies/sparse-feedback-v3.design.md, tested mechanically
on a study's finished main runs. The study report prints its section (binac_core/studies/editions.py). Areas under the
held-out curves, the trained and the frozen critic on the same attempts, the positive control inside the study. A study
with variants is an exploration here: none is tested.

Endpoints: `area`, the area under a run's held-out curve over the evaluations every `eval_every` iterations
(`pilot_rule.curve_area`: a mean accuracy over the run); the last evaluation; the equal-budget points
(`run_values.point_step`). Every comparison is paired by seed and printed with its per-seed differences; verdicts
follow `binac_core.studies.verdicts` (a claim of several comparisons, or over both regimes, is supported when all
are, not supported when any is). A comparison whose methods the study does not run reads "no data", so a study
with a subset of the methods (the second base's) gets the hypotheses it can test. It does not plot, and it does
not read the store: every number comes from the runs' logged metrics."""

from __future__ import annotations

import math
from functools import partial

from binac_core.rl.methods import method_spec
from binac_core.studies.editions import EXPLORATION
from binac_core.studies.run_values import AXES, area, curve_steps, last_eval, point_step, runs_of, values_at
from binac_core.studies.verdicts import NO_DATA, claim, combine, compared, margin_verdict

MARGIN = 0.05
"""H6: a rise of approves_wrong (or a fall of approves_right) whose interval ends within 5 points is "no worse"."""
EARLY = 10
"""The early evaluation H3 reports beside its final one (the design: "both at iteration 10")."""


def _at(step: int):
    """The reading point "this iteration" (for `values_at`)."""
    return lambda r: step


def section(st, done: list[dict], totals: dict[str, int]) -> list[str]:
    """The "Hypotheses" section over the finished runs `done` (variants left out)."""
    if st.variants:
        return list(EXPLORATION)
    main = [r for r in done if not r.get("variant")]
    by_regime = {reg.name: [r for r in main if r["regime"] == reg.name] for reg in st.regimes}
    sparse = by_regime.get("sparse", [])
    lines = [
        "## Hypotheses",
        "",
        "The rules of studies/sparse-feedback-v3.design.md, applied mechanically "
        "(studies/editions/third_edition.py): differences in points, paired by seed, mean ± 95 % t half-width "
        "with the per-seed differences; *area* is the area under the held-out curve over the evaluations at "
        f"{', '.join(map(str, curve_steps(st)))} divided by {st.iterations} (a mean accuracy); *last* is "
        f'iteration {st.iterations}. A comparison without paired seeds reads "{NO_DATA}".'
        + ("" if "sparse" in by_regime else " The study has no regime named `sparse`: H1, H2 and H5 have no data."),
        "",
    ]
    lines += _h1(st, sparse) + _h2(sparse, totals)
    lines += _per_regime(
        by_regime,
        "H3",
        "binac's held-out critic_hits_first_error at the last evaluation > the "
        "frozen base critic's on the same attempts",
        _h3,
    )
    lines += _per_regime(by_regime, "H4", "binac > binac_lam0 on acc_feedback's area", partial(_h4, st))
    lines += _h5(st, sparse)
    lines += _per_regime(
        by_regime,
        "H6",
        f"binac's critic_approves_wrong at the last evaluation no higher than at "
        f"step 0 and its critic_approves_right no lower (margin {100 * MARGIN:g} points)",
        _h6,
    )
    lines += _per_regime(
        by_regime,
        "H7",
        "critic_only's acc_feedback and critic_hits_first_error at the last "
        "evaluation > at step 0 (the positive control)",
        _h7,
    )
    lines += _per_regime(
        by_regime, "H8", "binac_disc's verdict balanced_accuracy at the last evaluation > binac's", _h8
    )
    return lines + [""]


def _per_regime(by_regime: dict, tag: str, text: str, test) -> list[str]:
    """A hypothesis over every regime: each regime's (verdict, detail) from `test(runs)`, combined."""
    parts = {name: test(rr) for name, rr in by_regime.items()}
    head = f"- **{tag}** (every regime: {text}): **{combine([v for v, _ in parts.values()])}**."
    return [head] + [f"  - {name}: **{v}**. {detail}" for name, (v, detail) in parts.items()]


def _h1(st, sparse: list[dict]) -> list[str]:
    b, f, g = (runs_of(sparse, m) for m in ("binac", "fixed_critic", "grpo"))
    d1, t1 = compared("binac − fixed_critic", area(st, b, "acc_single"), area(st, f, "acc_single"))
    d2, t2 = compared("fixed_critic − grpo", area(st, f, "acc_single"), area(st, g, "acc_single"))
    last = [
        compared(lbl, values_at(x, "acc_single", last_eval), values_at(y, "acc_single", last_eval))[1]
        for lbl, x, y in (("binac − fixed_critic", b, f), ("fixed_critic − grpo", f, g))
    ]
    greedy = [
        compared(lbl, area(st, x, "acc_single_greedy"), area(st, y, "acc_single_greedy"))[1]
        for lbl, x, y in (("binac − fixed_critic", b, f), ("fixed_critic − grpo", f, g))
    ]
    return [
        f"- **H1** (sparse, iterations: binac > fixed_critic and fixed_critic > grpo on acc_single's area): "
        f"**{claim([d1, d2])}**. {t1}; {t2}.",
        f"  - Beside it, not tested: at the last evaluation {'; '.join(last)}. Greedy (acc_single_greedy's "
        f"area): {'; '.join(greedy)}.",
    ]


def _h2(sparse: list[dict], totals: dict[str, int]) -> list[str]:
    diffs, texts = [], []
    b, f, g = (runs_of(sparse, m) for m in ("binac", "fixed_critic", "grpo"))
    for axis, (label, _) in AXES.items():
        at = partial(point_step, axis=axis, total=totals[axis])
        for lbl, x, y in (("binac − fixed_critic", b, f), ("fixed_critic − grpo", f, g)):
            d, t = compared(lbl, values_at(x, "acc_single", at), values_at(y, "acc_single", at))
            diffs.append(d)
            texts.append(f"{label} ({totals[axis]}): {t}")
    return [
        f"- **H2** (sparse: the same on acc_single at the equal-budget point of both sample axes): "
        f"**{claim(diffs)}**. " + "; ".join(texts) + "."
    ]


def _h3(rr: list[dict]) -> tuple[str, str]:
    binac, only = runs_of(rr, "binac"), runs_of(rr, "critic_only")
    name, frozen = "critic_hits_first_error", "frozen_critic_hits_first_error"
    d, t = compared(
        "binac − frozen critic, binac's attempts",
        values_at(binac, name, last_eval),
        values_at(binac, frozen, last_eval),
    )
    early = _at(EARLY)
    beside = [
        compared(
            "critic_only − frozen critic, the base actor's attempts",
            values_at(only, name, last_eval),
            values_at(only, frozen, last_eval),
        )[1],
        compared(
            f"binac − frozen at iteration {EARLY}", values_at(binac, name, early), values_at(binac, frozen, early)
        )[1],
        compared(
            f"critic_only − frozen at iteration {EARLY}", values_at(only, name, early), values_at(only, frozen, early)
        )[1],
    ]
    return claim([d]), f"{t}. Beside it: {'; '.join(beside)}."


def _h4(st, rr: list[dict]) -> tuple[str, str]:
    acc = "acc_feedback"
    d, t = compared("binac − binac_lam0", area(st, runs_of(rr, "binac"), acc), area(st, runs_of(rr, "binac_lam0"), acc))
    after = compared(
        "binac − binac_after", area(st, runs_of(rr, "binac"), acc), area(st, runs_of(rr, "binac_after"), acc)
    )[1]
    frozen = {m: area(st, runs_of(rr, m), "acc_feedback_frozen") for m in ("binac", "binac_lam0", "binac_after")}
    frozen["fixed_critic"] = area(st, runs_of(rr, "fixed_critic"), acc)  # its own source is the frozen critic
    one_source = compared(
        "binac − fixed_critic under the frozen critic's feedback", frozen["binac"], frozen["fixed_critic"]
    )[1]
    return claim([d]), f"{t}. Beside it: {after}; {one_source}."


def _h5(st, sparse: list[dict]) -> list[str]:
    grpo = {
        r["seed"]: v
        for r in runs_of(sparse, "grpo")
        if (v := r["metrics"].get("train/zero_adv_frac", {}).get(1)) is not None
    }
    methods = [m for m in st.methods if method_spec(m).feedback]
    diffs, texts = [], []
    for m in methods:
        refine = {
            r["seed"]: v
            for r in runs_of(sparse, m)
            if (v := r["metrics"].get("train/refine_zero_adv_frac", {}).get(1)) is not None
        }
        d, t = compared(f"grpo − {m}", grpo, refine)
        diffs.append(d)
        texts.append(t)
    first = sum(grpo.values()) / len(grpo) if grpo else math.nan
    if math.isnan(first):
        h5 = NO_DATA
    elif first < 0.5:
        h5 = "not supported"
    else:
        h5 = claim(diffs) if diffs else NO_DATA
    shown = "–" if math.isnan(first) else f"{100 * first:.1f} %"
    return [
        f"- **H5** (sparse: GRPO's zero_adv_frac at iteration 1 ≥ 0.5, mean over seeds, and every feedback "
        f"method's refine_zero_adv_frac at iteration 1 lower, paired): **{h5}**. GRPO: {shown}; "
        + ("; ".join(texts) or "no feedback method")
        + "."
    ]


def _h6(rr: list[dict]) -> tuple[str, str]:
    binac = runs_of(rr, "binac")
    wrong, tw = compared(
        "approves_wrong last − step 0",
        values_at(binac, "critic_approves_wrong", last_eval),
        values_at(binac, "critic_approves_wrong", _at(0)),
    )
    right, tr = compared(
        "approves_right last − step 0",
        values_at(binac, "critic_approves_right", last_eval),
        values_at(binac, "critic_approves_right", _at(0)),
    )
    fell = (-right[0], right[1], right[2])  # "no lower" is "its fall no higher"
    return combine([margin_verdict(wrong, MARGIN), margin_verdict(fell, MARGIN)]), f"{tw}; {tr}."


def _h7(rr: list[dict]) -> tuple[str, str]:
    only = runs_of(rr, "critic_only")
    parts = [
        compared(f"{name} last − step 0", values_at(only, name, last_eval), values_at(only, name, _at(0)))
        for name in ("acc_feedback", "critic_hits_first_error")
    ]
    return claim([d for d, _ in parts]), "; ".join(t for _, t in parts) + "."


def _h8(rr: list[dict]) -> tuple[str, str]:
    name = "critic/balanced_accuracy"
    d, t = compared(
        "binac_disc − binac",
        values_at(runs_of(rr, "binac_disc"), name, last_eval),
        values_at(runs_of(rr, "binac"), name, last_eval),
    )
    return claim([d]), f"{t}."
