"""The report of a study (flows/study.py), by fixed rules applied mechanically. It gives the protocol, the base model's
regimes and the shortcut check, tables on both budget axes, the pre-registered hypotheses' verdicts (by the study's
edition: binac_core/studies/editions.py), a pilot's choice of settings, plots with seed bands.

Input: the study (`binac_core.studies.study.Study`), the base measurements by difficulty (`binac_core.studies.regimes`), the
regimes' difficulties, the study's own deviations, the base's identity (`BaseIdentity`: its weights hash, in the
header and the preconditions table), and per run {regime, difficulty, method, variant, seed, finished, state,
metrics: {MLflow metric: {step: value}}, actor_train_per_iteration, generated_per_iteration, base_weights}.
Only finished runs are read. Every number is a mean over the seeds with its 95 % Student-t interval
(`stats.t_interval`), followed by the per-seed values in seed order wherever the seeds split (`stats.seeds_split`:
at least 2 seeds whose values span 20 points or more; a t-interval over a bimodal set hides its modes);
comparisons between methods are paired by seed (the difference per seed, then its interval; `paired`). Verdicts
follow fixed rules, written before any result:

- a claim "A > B" is *supported* when the paired difference's interval lies above 0, *not supported* when it lies
  below 0, *inconclusive* otherwise (one seed: inconclusive); a claim made of several comparisons is supported
  when all are, not supported when any is, inconclusive otherwise (`verdict`); a hypothesis over both regimes is
  such a claim over the comparisons of both;
- a comparison without a paired seed has no data: a hypothesis with no data at all, or one whose available
  comparisons are not decisive (none is "not supported") while some lack data, reads *inconclusive (no data)*;
- a "no higher than" claim reads a margin (`margin_verdict`): *not supported* when the interval of the change
  has its lower end above 0 (checked first: a significant rise, however small), *supported* when its upper end is
  below the margin, *inconclusive* otherwise.

Reading points. "Equal iterations" reads each run's last evaluation (the study's final iteration). A run's
equal-budget point on an axis (actor training samples, generated samples; `binac_core.rl.methods`) is its first
evaluation at an iteration whose cumulative count (iteration × the run's per-iteration count) reaches the axis's
total (`study.equal_budget_totals`: GRPO's final counts); every table labels the iteration and the exact counts
reached there by that method, never the nominal total. A method with 0 per iteration on an axis (critic_only's
actor training samples) never reaches it. Step 0 is before any update (the same base for every method).

A pilot (a study with `variants` and `select`) gets a table per method with variants: the selection metric (`study.select`)
at each run's last evaluation, mean ± interval over seeds, and the chosen variant (`choose_variant`): the highest
mean; means within 0.001 (0.1 point) of it tie, and a tie goes to the variant whose override values sort
smallest (the values in the order of the override names, sorted: `train.critic_lr` before `train.t_high`, so the
smaller learning rate first, then fewer passes); with `select_rule: auc_paired` (`SelectRule`), the third
edition's rule instead (`binac_core.studies.pilot_rule`: areas under the held-out curve, paired ties, fewest fields
changed from the preset, the grid's edges). The section ends with the chosen values merged, for the main study
file. The hypotheses are not tested in a pilot.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from binac_core.foundation.config import load_config
from binac_core.foundation.stats import SPLIT, wilson_interval
from binac_core.reports.critic_health import EXPLAINED, health_table
from binac_core.reports.plots import METHOD_ORDER, seed_band
from binac_core.reports.report import sandbox_line
from binac_core.rl.evaluation import greedy_evaluated
from binac_core.rl.methods import method_spec
from binac_core.studies import critic_curves, editions
from binac_core.studies.critic_margin import MEASURES as MARGIN_MEASURES
from binac_core.studies.critic_margin import bank_split, margins
from binac_core.studies.critic_margin import window as margin_window
from binac_core.studies.pilot_rule import changed_fields, choose_paired, edges
from binac_core.studies.run_values import (
    AXES,
    area,
    curve_steps,
    evals,
    last_eval,
    never_reached,
    point_step,
    runs_of,
    seed_cell,
    train_at,
    train_mean,
    values_at,
)
from binac_core.studies.study import SelectRule, equal_budget_totals
from binac_core.studies.verdicts import diff_text

ACC = ("acc_single", "acc_feedback", "acc_gated_k2")
GREEDY_ACC = "acc_single_greedy"
"""The greedy protocol's accuracy (binac_core/rl/evaluation.py), a column beside `acc_single` where the study's
config evaluates it (`accuracy_columns`)."""
TIE = 0.001
"""A pilot's means within this of the highest tie (0.1 point; the design)."""
SOURCES = (
    ("initial_critic", "initial critic"),
    ("oracle", "oracle"),
    ("self_correct", "fixed self-correction"),
    ("approve", "approval"),
)
HELD_OUT_CRITIC = ("critic_hits_first_error", "critic_false_alarm", "critic_approves_wrong", "critic_approves_right")
"""The held-out critic table's measures (binac_core/reports/measures.py), each for the method's own critic and the
frozen base critic."""


@dataclass(frozen=True)
class BaseIdentity:
    """The study's base model as its report names it: the folder's name and the sha256 of its weights (its
    identity: binac_core/model/weights.py)."""

    folder: str
    weights: str


def build_study_report(
    st,
    measured: dict,
    difficulties: dict,
    deviations: list[str],
    runs: list[dict],
    out_dir: Path,
    base: BaseIdentity | None = None,
) -> dict:
    """The report (`report.md` and the plots under `out_dir`); returns {"text", "files"}. `base`: the base model
    the study measured, named in the header and the preconditions table (None: not named); a run's
    `base_weights` is the weights hash it recorded (None: none)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    done = [r for r in runs if r["finished"]]
    totals = equal_budget_totals(st)
    lines = [f"# Study `{st.name}`: results", ""]
    if len(done) < len(runs):
        lines += [
            f"**Partial: {len(done)} of {len(runs)} runs finished.** Every number below is over the finished "
            "runs only (the seed count is given per cell when it is not the study's).",
            "",
        ]
    lines += base_lines(base, done)
    lines += _protocol(st, totals, runs, len(done))
    lines += _regimes(st, measured, difficulties, base)
    files = []
    for regime in st.regimes:
        rr = [r for r in done if r["regime"] == regime.name]
        lines += [f"## Regime `{regime.name}` (difficulty {difficulties[regime.name]})", ""]
        lines += _accuracy_table(st, rr, "(a) equal iterations (each run's last evaluation)", last_eval)
        for axis, (label, _) in AXES.items():
            part = "(b)" if axis == "actor_train" else "(c)"
            lines += _accuracy_table(
                st,
                rr,
                f"{part} the equal-budget point on {label} ({totals[axis]} = {st.equal_samples_method}'s total)",
                partial(point_step, axis=axis, total=totals[axis]),
                axis=axis,
            )
        lines += _critic_tables(st, rr)
        curve_lines, curve_files = critic_curves.section(st, rr, _arms(st), out_dir, regime.name)
        lines += curve_lines
        files += curve_files
        lines += _gains(st, rr)
        png = out_dir / f"study-{regime.name}.png"
        if rr:
            _plot(st, rr, png, regime.name, totals)
            files.append(str(png))
            lines += [
                f"![{regime.name}: accuracy on both budget axes, zero_adv_frac, held-out critic measures]({png.name})",
                "",
            ]
    if st.variants and st.select:
        lines += _pilot(st, done)
        lines += ["## Hypotheses", "", "Not tested in a pilot: its runs only choose the main study's settings.", ""]
    else:
        lines += editions.section(st, done, totals)
    lines += ["## Deviations recorded by the study itself", ""]
    lines += [f"- {d}" for d in deviations] or ["- none"]
    failed = [r for r in runs if not r["finished"]]
    if failed:
        lines += [
            "",
            "Runs not finished: "
            + ", ".join(
                f"{r['regime']}/{_arm_name(r['method'], r.get('variant', ''))}/s{r['seed']} ({r.get('state')})"
                for r in failed
            ),
        ]
    text = "\n".join(lines) + "\n"
    (out_dir / "report.md").write_text(text)
    return {"text": text, "files": [str(out_dir / "report.md"), *files]}


def base_lines(base: BaseIdentity | None, done: list[dict]) -> list[str]:
    """The header's line on the base model: its folder and weights hash, and whether the finished runs recorded
    the same weights (runs that recorded none are counted, runs that recorded others named)."""
    if base is None:
        return []
    text = f"**Base model**: `{base.folder}`, weights sha256 `{base.weights}` (binac_core/model/weights.py)"
    recorded = [r.get("base_weights") for r in done]
    other = [r for r in done if r.get("base_weights") not in (None, base.weights)]
    missing = sum(v is None for v in recorded)
    if other:
        text += "; **runs on other base weights**: " + ", ".join(
            f"{r['regime']}/{_arm_name(r['method'], r.get('variant', ''))}/s{r['seed']} ({r['base_weights']})"
            for r in other
        )
    if missing:
        text += f"; {missing} of {len(done)} finished runs record no base weights (run before runs recorded them)"
    elif done and not other:
        text += f"; all {len(done)} finished runs recorded the same weights"
    return [text + ".", ""]


# --------------------------------------------------------------------------- reading runs


def _arms(st) -> list[tuple[str, str]]:
    """(method, variant) in report order: METHOD_ORDER, each method's variants in the study file's order."""
    methods = [m for m in METHOD_ORDER if m in st.methods] + [m for m in st.methods if m not in METHOD_ORDER]
    return [(m, v) for m in methods for v in (st.variants.get(m) or {"": {}})]


def _arm_name(method: str, variant: str) -> str:
    return f"{method} [{variant}]" if variant else method


def _per_iteration(st, runs: list[dict], method: str) -> dict[str, int]:
    """The method's per-iteration counts on both axes: as the runs carry them, else from the study's config."""
    for r in runs:
        if r["method"] == method:
            return {axis: r[key] for axis, (_, key) in AXES.items()}
    spec, cfg = method_spec(method), st.config()
    return {
        "actor_train": spec.actor_train_samples_per_iteration(cfg),
        "generated": spec.generated_samples_per_iteration(cfg),
    }


def _pct(v) -> str:
    return "–" if v is None else f"{100 * v:.1f} %"


# --------------------------------------------------------------------------- protocol and regimes


def _protocol(st, totals: dict[str, int], runs: list[dict], done: int) -> list[str]:
    cfg = st.config()
    g, t = cfg.generation, cfg.train
    mu = t.lam * (1 + t.alpha_shaping)
    lines = [
        "## Protocol",
        "",
        f"Study file `{st.path.as_posix()}` (key `{st.key()}`), preset `{st.preset}`; {len(runs)} runs "
        f"({len(st.regimes)} regimes × {len(_arms(st))} method arms × seeds {', '.join(map(str, st.seeds))}), "
        f"{done} finished. Every run: {st.iterations} iterations of B = {t.batch_problems} problems × "
        f"G = {t.group_size} attempts, K = {t.critic_group_size} feedbacks per attempt for every method with a second "
        f"turn. binac's critic reward: (1 + μ)·r1(θ) − μ·r1(θ⁺) with μ = train.lam·(1 + train.alpha_shaping) = "
        f"{t.lam:g}·(1 + {t.alpha_shaping:g}) = {mu:g}: this μ is the λ of the registered form (1 + λ)·r1(θ) − "
        f"λ·r1(θ⁺)."
        + (
            " **Negative control**: each iteration's critic rewards are permuted at random across the batch's "
            "feedbacks before the critic is trained on them (`train.critic_reward_shuffle`)."
            if t.critic_reward_shuffle
            else ""
        )
        + f" Held-out evaluation: {cfg.task.n_test} "
        f"problems × {g.eval_samples} sample(s), temperature {g.eval_temperature}, at step 0, every "
        f"{st.eval_every} iterations and at the equal-budget points of both axes. Protocols: `acc_single` (actor "
        f"alone, at temperature {g.eval_temperature}), "
        + (
            f"`{GREEDY_ACC}` (actor alone, one greedy answer per problem: temperature 0), "
            if GREEDY_ACC in accuracy_columns(st)
            else ""
        )
        + "`acc_feedback` (one feedback from the method's own feedback source, then one refinement; "
        "unassisted), `acc_gated_k2` (verifier-gated, up to 2 feedback rounds: oracle-assisted). Cells: mean ± 95 % "
        "t-interval over seeds, in % unless stated; where a cell's seeds split (at least 2 seeds whose values span "
        f"{100 * SPLIT:g} points or more; {SPLIT:g} for critic_signal), its per-seed values follow in seed order.",
        "",
        sandbox_line(cfg.grading.sandbox, [r.get("isolation") for r in runs]),
        "",
        f"**Budget axes** (binac_core/rl/methods.py): *actor training samples*, the sequences the actor's loss is "
        f"computed on (never the look-ahead refinements), and *generated samples*, every sequence sampled from the "
        f"actor or the critic. The equal-budget totals are {st.equal_samples_method}'s after {st.iterations} "
        f"iterations: **{totals['actor_train']} actor training samples** and **{totals['generated']} generated "
        "samples**. A method's equal-budget point on an axis is its first iteration whose cumulative count reaches "
        "the total (planned below; the tables give what each run reached).",
        "",
        "| method | actor training samples / iteration | generated samples / iteration | after all iterations "
        "(actor training, generated) | equal-budget point, actor training: iteration (count) | equal-budget point, "
        "generated: iteration (count) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for m in dict.fromkeys(m for m, _ in _arms(st)):
        per = _per_iteration(st, runs, m)
        planned = []
        for axis in AXES:
            if not per[axis]:
                planned.append("never (actor not trained)" if axis == "actor_train" else "never")
                continue
            it = math.ceil(totals[axis] / per[axis])
            planned.append(
                f"{it} ({it * per[axis]})" if it <= st.iterations else f"not within {st.iterations} iterations"
            )
        lines.append(
            f"| {m} | {per['actor_train']} | {per['generated']} | {per['actor_train'] * st.iterations}, "
            f"{per['generated'] * st.iterations} | {planned[0]} | {planned[1]} |"
        )
    return lines + [""]


def _rule_text(regime) -> str:
    if regime.rule is None:
        return "fixed in the study file"
    r = regime.rule
    what = {
        "all_wrong_frac_at_least": "the smallest difficulty whose all-wrong share is at least",
        "single_closest_to": "the difficulty whose single-turn accuracy is closest to",
    }.get(r.kind, r.kind)
    extra = f", otherwise `{r.otherwise}`" if r.kind == "all_wrong_frac_at_least" else ""
    return f"rule `{r.kind}: {r.value:g}` ({what} {r.value:g}, searched {r.search[0]}–{r.search[1]}{extra})"


def _wilson_cell(share, n) -> str:
    if share is None or not n:
        return "–" if not n else "– (n=0)"
    k = round(share * n)
    lo, hi = wilson_interval(k, n)
    return f"{100 * share:.1f} % [{100 * lo:.1f}, {100 * hi:.1f}] ({k} of {n})"


def _regimes(st, measured: dict, difficulties: dict, base: BaseIdentity | None = None) -> list[str]:
    lines = [
        "## The regimes (base model only, before any RL run)",
        "",
        f"Validation problems (the `val` split: never the held-out problems results are reported on), G = "
        f"{st.group_size} first attempts each, measurement seed {st.measure_seed}, the base model without "
        "adapters (binac_core/studies/regimes.py); greedy: one attempt per problem at temperature 0.",
        "",
        "| difficulty | single-turn | greedy | all-wrong groups | zero_adv_frac |",
        "| --- | --- | --- | --- | --- |",
    ]
    for d, m in sorted(measured.items()):
        zero = m.get("zero_adv_frac")
        lines.append(
            f"| {d} | {_pct(m.get('single'))} | {_pct(m.get('greedy_single'))} | "
            f"{_num(m.get('all_wrong_frac'))} | {_num(zero)} |"
        )
    by_name = {r.name: r for r in st.regimes}
    lines += ["", "Chosen:", ""]
    lines += [
        f"- `{name}` = difficulty {d}: {_rule_text(by_name[name])}"
        if name in by_name
        else f"- `{name}` = difficulty {d}"
        for name, d in difficulties.items()
    ]
    lines += [
        "",
        "Bounds of feedback at the chosen difficulties (each first attempt gets one second turn per source; "
        'fixed = wrong → right, broken = right → wrong, as shares of all attempts; approval = "Looks '
        "correct.\" whatever the attempt, in the critic's own form where it checks steps first):",
        "",
        "| regime | single-turn | " + " | ".join(label for _, label in SOURCES) + " |",
        "| --- | --- | " + " | ".join("---" for _ in SOURCES) + " |",
    ]
    for r, d in difficulties.items():
        m = measured.get(d, {})
        cells = [
            f"{_pct(m.get(s))} (fixed {_pct(m.get(s + '_fixed'))}, broken {_pct(m.get(s + '_broken'))})"
            if m.get(s) is not None
            else "–"
            for s, _ in SOURCES
        ]
        lines.append(f"| {r} (d{d}) | {_pct(m.get('single'))} | " + " | ".join(cells) + " |")
    lines += [
        "",
        '**The shortcut check.** Every first attempt is given "Looks correct."; over the attempts with a '
        "first wrong step, the share whose refinement is right (a base that copies after approval gives ~0; "
        "95 % Wilson interval) and the share of refinements that keep the attempt's answer (a copy of every step "
        "or of the answer line alone); then the same right-share "
        "over the wrong-step attempts the initial critic itself approved (refined after its own feedback):",
        "",
        "| regime | wrong-step attempts | right after approval | keeps the attempt's answer | wrong-step attempts the "
        "initial critic approved | right after its approval |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r, d in difficulties.items():
        m = measured.get(d, {})
        n, cn = m.get("shortcut_n"), m.get("critic_approved_wrong_n")
        lines.append(
            f"| {r} (d{d}) | {n if n is not None else '–'} | {_wilson_cell(m.get('shortcut_right'), n)} | "
            f"{_pct(m.get('shortcut_copy'))} | {cn if cn is not None else '–'} | "
            f"{_wilson_cell(m.get('critic_approved_wrong_right'), cn)} |"
        )
    lines += [
        "",
        "The initial critic (the base model in the critic role) on the same attempts:",
        "",
        "| regime | hits the first error | false alarm | approves wrong | approves right | agrees with the oracle |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r, d in difficulties.items():
        m = measured.get(d, {})
        lines.append(
            f"| {r} (d{d}) | "
            + " | ".join(
                _pct(m.get(k))
                for k in (
                    "critic_hits_first_error",
                    "critic_false_alarm",
                    "critic_approves_wrong",
                    "critic_approves_right",
                    "critic_agrees_with_oracle",
                )
            )
            + " |"
        )
    lines += [
        "",
        "(approves wrong: over attempts with a first wrong step; approves right: over attempts whose answer "
        "is right; a critic whose approval ignores the attempt gives both the same share.)",
    ]
    return lines + [""] + _preconditions(st, measured, difficulties, base)


def _preconditions(st, measured: dict, difficulties: dict, base: BaseIdentity | None = None) -> list[str]:
    """The precondition measures (binac_core/studies/preconditions.py) at each chosen difficulty, with their 95 %
    intervals, and each gate the study applies there with its verdict, on the base `base` names."""
    from binac_core.studies.preconditions import GATES as PRECONDITIONS
    from binac_core.studies.preconditions import Estimate
    from binac_core.studies.study import gates_at

    chosen = [(r, d) for r, d in difficulties.items() if "preconditions" in measured.get(d, {})]
    if not chosen:
        return []
    lines = [
        "**The preconditions** (G1-G4, binac_core/studies/preconditions.py: value [95 % interval]; a gate reads "
        "the interval's conservative end)"
        + (f" of the base with weights sha256 `{base.weights}` (`{base.folder}`)" if base else "")
        + ":",
        "",
        "| measure | " + " | ".join(f"{r} (d{d})" for r, d in chosen) + " |",
        "| --- |" + " --- |" * len(chosen),
    ]
    for name in measured[chosen[0][1]]["preconditions"]:
        cells = []
        for r, d in chosen:
            e = measured[d]["preconditions"][name]
            gates = [
                f"{g} {t:g}: {'holds' if PRECONDITIONS[g].holds(Estimate(**e), t) else 'FAILS'}"
                for g, t in gates_at(st, r).items()
                if g in PRECONDITIONS and PRECONDITIONS[g].measure == name
            ]
            cells.append(f"{e['value']:.3f} [{e['low']:.3f}, {e['high']:.3f}]" + "".join(f"; {g}" for g in gates))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines + [""]


def _num(v) -> str:
    return "–" if v is None else f"{v:.3f}"


# --------------------------------------------------------------------------- per regime


def accuracy_columns(st) -> tuple[str, ...]:
    """The accuracy tables' protocols: `ACC`, with `acc_single_greedy` after `acc_single` where the study's config
    evaluates the greedy protocol (`evaluation.greedy_evaluated`: the synthetic task by default)."""
    cfg = st.config()
    if not greedy_evaluated(cfg.generation.eval_greedy, cfg.task.benchmark):
        return ACC
    return (ACC[0], GREEDY_ACC, *ACC[1:])


def _accuracy_table(st, rr: list[dict], title: str, at, axis: str | None = None) -> list[str]:
    cell = partial(seed_cell, seeds=len(st.seeds))
    columns = accuracy_columns(st)
    lines = [
        f"**At {title}**",
        "",
        "| method | iteration | actor training samples | generated samples | " + " | ".join(columns) + " |",
        "| --- | --- | --- | --- | " + " | ".join("---" for _ in columns) + " |",
    ]
    for m, v in _arms(st):
        runs = runs_of(rr, m, v)
        if not runs:
            lines.append(f"| {_arm_name(m, v)} | – | – | – | " + " | ".join("–" for _ in columns) + " |")
            continue
        steps = sorted({at(r) for r in runs if at(r) is not None})
        if not steps:
            reasons = sorted({never_reached(r, axis) for r in runs}) if axis else ["no evaluation"]
            lines.append(
                f"| {_arm_name(m, v)} | {'; '.join(reasons)} | – | – | " + " | ".join("–" for _ in columns) + " |"
            )
            continue
        counts = {
            a: ", ".join(sorted({str(at(r) * r[key]) for r in runs if at(r) is not None}, key=int))
            for a, (_, key) in AXES.items()
        }
        lines.append(
            f"| {_arm_name(m, v)} | {', '.join(map(str, steps))} | {counts['actor_train']} | "
            f"{counts['generated']} | " + " | ".join(cell(values_at(runs, a, at)) for a in columns) + " |"
        )
    return lines + [""]


def _critic_tables(st, rr: list[dict]) -> list[str]:
    cell = partial(seed_cell, seeds=len(st.seeds))
    lines = [
        "**Advantage collapse and the critic, on the training batches** (iteration 1 = the base policies; means "
        "over all iterations; `critic_signal` in [−1, 1], the rest in %)",
        "",
        "| method | zero_adv_frac (it. 1) | refine_zero_adv_frac (it. 1) | critic_signal (mean) | "
        "critic_useful_mixed_frac (mean) | feedback_gain (mean, points) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    lines += _arm_rows(
        st,
        rr,
        lambda runs: [
            cell(train_at(runs, "zero_adv_frac", 1)),
            cell(train_at(runs, "refine_zero_adv_frac", 1)),
            cell(train_mean(runs, "critic_signal"), scale=1.0, digits=3, sign=True),
            cell(train_mean(runs, "critic_useful_mixed_frac")),
            cell(train_mean(runs, "feedback_gain"), sign=True),
        ],
    )
    lines += [
        "",
        "**The critic on held-out attempts** (the `feedback` protocol: the method's own feedback source on "
        "its actor's attempts, step 0 → last evaluation; the frozen base critic on the same attempts at the "
        "last evaluation, for the methods that train their critic; in %)",
        "",
        "| method | hits first error | false alarm | approves wrong | approves right | frozen critic: hits first "
        "error | frozen: false alarm | frozen: approves wrong | frozen: approves right |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    lines += _arm_rows(
        st,
        rr,
        lambda runs: (
            [
                f"{cell(values_at(runs, k, lambda r: 0))} → {cell(values_at(runs, k, last_eval))}"
                for k in HELD_OUT_CRITIC
            ]
            + [cell(values_at(runs, f"frozen_{k}", last_eval)) for k in HELD_OUT_CRITIC]
        ),
    )
    return lines + [""] + _critic_health(st, rr)


def _arm_rows(st, rr: list[dict], cells_of) -> list[str]:
    """One table row per arm of the study: its name, then `cells_of(its runs)`."""
    return [f"| {_arm_name(m, v)} | " + " | ".join(cells_of(runs_of(rr, m, v))) + " |" for m, v in _arms(st)]


GAINS = (
    "acc_single",
    "acc_single_greedy",
    "acc_feedback",
    "critic_hits_first_error",
    "critic_approves_wrong",
    "critic_approves_right",
)
"""The held-out metrics whose change over training the gains table gives (a control's endpoints among them)."""


def _gains(st, rr: list[dict]) -> list[str]:
    """Each arm's change of `GAINS` from step 0 to its last evaluation, paired by seed: mean ± 95 % t half-width of
    the per-seed differences (a control passes or fails on these: docs/results-testbed.md), the seeds' own values
    where they split. A metric no arm has is left out."""
    shown = set(accuracy_columns(st)) | set(GAINS[3:])
    names = [k for k in GAINS if k in shown and any(evals(r, k) for r in rr)]
    if not names:
        return []
    lines = [
        "**Change over training on held-out problems** (last evaluation − step 0, paired by seed, in points; "
        "the interval lies above 0 where the change is significant at 95 %)",
        "",
        "| method | " + " | ".join(names) + " |",
        "| --- |" + " --- |" * len(names),
    ]
    for m, v in _arms(st):
        runs = runs_of(rr, m, v)
        cells = []
        for k in names:
            first, last = values_at(runs, k, lambda r: 0), values_at(runs, k, last_eval)
            seeds = sorted(set(first) & set(last))
            diffs = {s: last[s] - first[s] for s in seeds}
            cells.append(seed_cell(diffs, seeds=len(st.seeds), sign=True))
        lines.append(f"| {_arm_name(m, v)} | " + " | ".join(cells) + " |")
    return lines + [""]


def _critic_health(st, rr: list[dict]) -> list[str]:
    """The critic health table (`binac_core.reports.critic_health`): per arm with verdicts, at step 0 and at its last
    evaluation."""

    def at(runs: list[dict], step) -> Callable[[str], list[float]]:
        return lambda measure: list(values_at(runs, f"critic/{measure}", step).values())

    rows = [
        (f"{_arm_name(m, v)}, {label}", at(runs_of(rr, m, v), step))
        for m, v in _arms(st)
        if any(evals(r, "critic/verdict_accuracy") for r in runs_of(rr, m, v))
        for label, step in (("step 0", lambda r: 0), ("last", last_eval))
    ]
    if not rows:
        return []
    return [
        "**Critic health on held-out attempts**, mean ± 95 % t-interval over seeds:",
        "",
        *health_table(rows),
        "",
        EXPLAINED,
        "",
    ]


# --------------------------------------------------------------------------- pilot


def _sort_key(overrides: dict) -> tuple:
    """The override values in the order of their names, sorted (numbers before anything else)."""
    return tuple(
        (0, v, "") if isinstance(v, int | float) and not isinstance(v, bool) else (1, 0, str(v))
        for _, v in sorted(overrides.items())
    )


def choose_variant(means: dict[str, float | None], overrides: dict[str, dict], tie: float = TIE) -> str | None:
    """The design's rule: the variant with the highest mean; means within `tie` of it tie, and a tie goes to the
    variant whose override values sort smallest (`_sort_key`). None when no variant has data."""
    scored = {v: m for v, m in means.items() if m is not None and not math.isnan(m)}
    if not scored:
        return None
    best = max(scored.values())
    tied = [v for v, m in scored.items() if best - m <= tie + 1e-12]
    return min(tied, key=lambda v: (_sort_key(overrides.get(v, {})), v))


def _pilot(st, done: list[dict]) -> list[str]:
    if st.select_rule == SelectRule.AUC_PAIRED:
        rule = (
            "The design's rule (`select_rule: auc_paired`, binac_core/studies/pilot_rule.py), applied "
            "mechanically: per method with variants, the area under its selection metric's held-out curve (study "
            "file `select`; the trapezoid over the evaluations every `eval_every` iterations, divided by the "
            "iterations: a mean accuracy), mean ± 95 % t-interval over seeds; the variant with the highest mean "
            "leads; a variant whose paired difference from the leader has an interval containing 0 ties with "
            "it; among the leader and its ties, the variant changing the fewest fields from the preset's values "
            "is chosen, then the higher mean."
        )
    elif st.select_rule == SelectRule.BANK_MARGIN_PAIRED:
        rule = (
            "The design's rule (`select_rule: bank_margin_paired`, binac_core/studies/critic_margin.py), applied "
            "mechanically: per method with variants, each run's critic margin (its critic's first-error hits − "
            "false alarm on the attempt bank, minus the frozen base critic's, averaged over the evaluations of the "
            "run's second half), mean ± 95 % t-interval over seeds; the variant with the highest mean leads; a "
            "variant whose paired difference from the leader has an interval containing 0 ties with it; among the "
            "leader and its ties, the variant changing the fewest fields from the preset's values is chosen, then "
            "the higher mean. The hits, false-alarm and balanced-accuracy margins are shown beside it, not used."
        )
    else:
        rule = (
            "The design's rule, applied mechanically: per method with variants, its selection metric (study "
            "file `select`) at each run's last evaluation, mean ± 95 % t-interval over seeds; the variant with the "
            f"highest mean is chosen, means within {TIE:g} ({100 * TIE:g} point) of it tie, and a tie goes to the "
            "variant whose override values sort smallest (the values in the order of the override names, "
            "sorted: `train.critic_lr` before `train.t_high`, so the smaller learning rate, then fewer passes)."
        )
    lines = ["## Pilot: the variants and the chosen settings", "", rule, ""]
    for regime in st.regimes:
        rr = [r for r in done if r["regime"] == regime.name]
        merged, conflicts = {}, []
        lines += [f"### Regime `{regime.name}`", ""]
        for method in dict.fromkeys(m for m, v in _arms(st) if v):
            named, metric = st.variants[method], st.select.get(method)
            if metric is None:
                lines += [f"**{method}**: no selection metric (study file `select`): nothing chosen.", ""]
                continue
            choose = {
                SelectRule.AUC_PAIRED: _choose_auc_paired,
                SelectRule.BANK_MARGIN_PAIRED: _choose_bank_margin,
            }.get(st.select_rule, _choose_last_mean)
            method_lines, chosen = choose(st, rr, method, metric)
            lines += method_lines
            if chosen is None:
                lines += [f"{method}: no variant has data: nothing chosen.", ""]
                continue
            for k, val in named[chosen].items():
                if k in merged and merged[k] != val:
                    conflicts.append(f"{k}: {merged[k]!r} vs {val!r} ({method})")
                merged.setdefault(k, val)
        if conflicts:
            lines += ["Conflicting chosen values (the first kept): " + "; ".join(conflicts) + ".", ""]
        lines += [f"main-study overrides: {json.dumps(merged, sort_keys=True)}", ""]
    return lines


def _choose_last_mean(st, rr: list[dict], method: str, metric: str) -> tuple[list[str], str | None]:
    """`SelectRule.LAST_MEAN`: the table of `metric` at each run's last evaluation and `choose_variant`'s pick."""
    named, rows, means = st.variants[method], [], {}
    for v, ov in named.items():
        runs = runs_of(rr, method, v)
        vals = values_at(runs, metric, last_eval)
        means[v] = statistics.fmean(vals.values()) if vals else None
        steps = sorted({last_eval(r) for r in runs} - {None})
        rows.append((v, ov, seed_cell(vals, seeds=len(st.seeds)), ", ".join(map(str, steps)) or "–"))
    chosen = choose_variant(means, named)
    best = max((m for m in means.values() if m is not None), default=None)
    lines = [
        f"**{method}** (selected by held-out `{metric}`)",
        "",
        f"| variant | overrides | {metric} (%) | iteration | chosen |",
        "| --- | --- | --- | --- | --- |",
    ]
    for v, ov, c, steps in rows:
        tied = v != chosen and means[v] is not None and best is not None and best - means[v] <= TIE + 1e-12
        mark = "**chosen**" if v == chosen else ("tie, not chosen" if tied else "")
        lines.append(f"| {v} | `{json.dumps(ov, sort_keys=True)}` | {c} | {steps} | {mark} |")
    return lines + [""], chosen


def preset_values(st, keys) -> dict:
    """{"section.field": the preset's value} for `keys` (the study's own `overrides` not applied)."""
    cfg = load_config(st.preset, {})
    return {k: getattr(getattr(cfg, k.split(".")[0]), k.split(".")[1]) for k in keys}


def _choose_auc_paired(st, rr: list[dict], method: str, metric: str) -> tuple[list[str], str | None]:
    """`SelectRule.AUC_PAIRED` (binac_core/studies/pilot_rule.py): the table of `metric`'s area under the held-out
    curve per variant, the leader, its paired ties, the fields each changes from the preset, the choice, and the
    grid's edges when the leader sits on one."""
    named, steps = st.variants[method], curve_steps(st)
    defaults = preset_values(st, {k for ov in named.values() for k in ov})
    values = {v: area(st, runs_of(rr, method, v), metric) for v in named}
    changes = {v: changed_fields(ov, defaults) for v, ov in named.items()}
    choice = choose_paired(values, changes)
    lines = [
        f"**{method}** (selected by the area under held-out `{metric}` over iterations "
        f"{steps[0]}-{steps[-1]}, evaluations at {', '.join(map(str, steps))})",
        "",
        f"| variant | overrides | fields changed | area of {metric} (%) | {metric} at the last evaluation (%) | "
        "leader − variant (points) | chosen |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for v, ov in named.items():
        last = values_at(runs_of(rr, method, v), metric, last_eval)
        diff, mark = _mark(choice, v)
        lines.append(
            f"| {v} | `{json.dumps(ov, sort_keys=True)}` | {changes[v]} | "
            f"{seed_cell(values[v], seeds=len(st.seeds))} | {seed_cell(last, seeds=len(st.seeds))} | {diff} | "
            f"{mark} |"
        )
    lines.append("")
    return lines + _edge_lines(choice, named, defaults), choice.chosen


def _mark(choice, v: str) -> tuple[str, str]:
    """(leader − variant cell, chosen/leader/tie mark) of variant `v` in a paired choice's table."""
    if v == choice.leader:
        diff, mark = "leader", "leader"
    else:
        diff = diff_text(choice.differences[v]) if v in choice.differences else "–"
        mark = "tie" if v in choice.ties else ""
    if v == choice.chosen:
        mark = "**chosen**" + (f" ({mark})" if mark else "")
    return diff, mark


def _edge_lines(choice, named: dict, defaults: dict) -> list[str]:
    """The report's line when the leader holds a grid's extreme value (`pilot_rule.edges`), else nothing."""
    at_edge = edges(choice.leader, named, defaults) if choice.leader is not None else []
    if not at_edge:
        return []
    where = "; ".join(f"the {end} `{k}` of the grid ({named[choice.leader][k]})" for k, end in at_edge)
    return [
        f"**Edge**: the leader `{choice.leader}` holds {where}. By the design the grid is widened along that "
        "field and the rule applied again before its choice is used.",
        "",
    ]


def _choose_bank_margin(st, rr: list[dict], method: str, metric: str) -> tuple[list[str], str | None]:
    """`SelectRule.BANK_MARGIN_PAIRED` (binac_core/studies/critic_margin.py): per variant, its critic's margin
    over the frozen critic on the bank (discrimination, the rule's measure; hits, false alarm and balanced
    accuracy beside it), the leader, its paired ties, the fields each changes, the choice, the edges."""
    named = st.variants[method]
    defaults = preset_values(st, {k for ov in named.values() for k in ov})
    by = {m: {v: margins(st, runs_of(rr, method, v), m) for v in named} for m in MARGIN_MEASURES}
    changes = {v: changed_fields(ov, defaults) for v, ov in named.items()}
    choice = choose_paired(by["discrimination"], changes)
    steps = ", ".join(map(str, margin_window(st)))
    lines = [
        f"**{method}** (selected by `{metric}`: its critic's discrimination, first-error hits − false alarm, minus "
        f"the frozen base critic's on the bank's `{bank_split(st)}` half, averaged over the evaluations at "
        f"{steps}; in points)",
        "",
        "| variant | overrides | fields changed | critic_margin | hits margin | false-alarm margin | "
        "balanced-accuracy margin | leader − variant (points) | chosen |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    n = len(st.seeds)
    for v, ov in named.items():
        diff, mark = _mark(choice, v)
        cells = " | ".join(seed_cell(by[m][v], seeds=n, sign=True) for m in MARGIN_MEASURES)
        lines.append(f"| {v} | `{json.dumps(ov, sort_keys=True)}` | {changes[v]} | {cells} | {diff} | {mark} |")
    lines.append("")
    return lines + _edge_lines(choice, named, defaults), choice.chosen


# --------------------------------------------------------------------------- plots


def _plot(st, rr: list[dict], png: Path, regime: str, totals: dict[str, int]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(18, 9), dpi=100)
    panels = [
        (axes[0][0], "eval/acc_single", None, "held-out acc_single (%)"),
        (axes[0][1], "eval/acc_single", "actor_train", "held-out acc_single (%)"),
        (axes[0][2], "eval/acc_single", "generated", "held-out acc_single (%)"),
        (axes[1][0], "train/zero_adv_frac", None, "zero_adv_frac of first-attempt groups (%)"),
        (axes[1][1], "eval/critic_hits_first_error", None, "held-out critic_hits_first_error (%)"),
        (axes[1][2], "eval/critic_approves_wrong", None, "held-out critic_approves_wrong (%)"),
    ]
    if not any(r[AXES["actor_train"][1]] for r in rr):  # no actor trains (a critic's control): its endpoint instead
        panels[1] = (axes[0][1], "eval/acc_feedback", None, "held-out acc_feedback (%)")
    styles = ("-", "--", ":", "-.")
    for ax, key, axis, ylabel in panels:
        for m, v in _arms(st):
            runs = [r for r in runs_of(rr, m, v) if r["metrics"].get(key) and (axis is None or r[AXES[axis][1]])]
            if not runs:
                continue
            points: dict[int, list[float]] = {}
            for r in runs:
                per = r[AXES[axis][1]] if axis else 1
                for step, value in r["metrics"][key].items():
                    points.setdefault(int(step) * per, []).append(value)
            variants = list(st.variants.get(m) or {"": {}})
            seed_band(
                ax,
                m,
                points,
                marker="o" if key.startswith("eval") else None,
                label=_arm_name(m, v),
                linestyle=styles[variants.index(v) % len(styles)],
            )
        if axis:
            ax.axvline(totals[axis], color="grey", linewidth=0.8, linestyle=":")
        ax.set_xlabel(AXES[axis][0] if axis else "iteration")
        ax.set_ylabel(ylabel)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(
        f"{st.name}, regime {regime}: mean over seeds, band = 95 % t-interval over seeds (dotted line: the "
        "equal-budget total)"
    )
    fig.tight_layout()
    fig.savefig(png)
    plt.close(fig)
