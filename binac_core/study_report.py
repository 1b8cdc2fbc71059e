"""The report of a study (flows/study.py): tables, the pre-registered hypotheses' verdicts, plots with seed bands.

Input: per run {regime, method, seed, finished, metrics: {name: {step: value}}, samples_per_iteration}. Every
number is a mean over the seeds with its 95 % Student-t interval (`stats.t_interval`); comparisons between
methods are paired by seed (the difference per seed, then its interval). Verdicts follow fixed rules, written
before any result:

- an ordering claim "A > B" is *supported* when the paired difference's interval lies above 0, *not supported*
  when it lies below 0, *inconclusive* otherwise; a claim made of several such comparisons is supported when all
  are, not supported when any is, inconclusive otherwise;
- H5's first half ("GRPO's step-0 zero_adv_frac is at least 0.5") is read on the mean over seeds.

"Equal iterations" reads each run's last evaluation (the study's final iteration); "equal samples" reads each
run's evaluation at the first iteration whose cumulative actor samples reach the equal-samples total (GRPO's
final count), which for GRPO is its last. Step 0 is before any update (the same base for every method).
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from binac_core.plots import METHOD_ORDER, method_color
from binac_core.stats import t_interval
from binac_core.study import equal_samples_total

ACC = ("acc_single", "acc_feedback", "acc_gated_k2")
HYPOTHESIS_METHODS = {"grpo", "fixed_critic", "binac", "binac_lam0"}
"""H1-H5 (studies/sparse-feedback.design.md) are answered for a study with these methods and a `sparse` regime."""

def build_study_report(st, measured: dict, difficulties: dict, deviations: list[str], runs: list[dict],
                       out_dir: Path) -> dict:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    done = [r for r in runs if r["finished"]]
    equal = equal_samples_total(st)
    lines = [f"# Study `{st.name}`: results", ""]
    if len(done) < len(runs):
        lines += [f"**Partial: {len(done)} of {len(runs)} runs finished.** Every number below is over the finished "
                  "runs only (the seed count is given per cell).", ""]
    lines += _protocol(st, equal, len(done), len(runs))
    lines += _regimes(st, measured, difficulties)
    files = []
    for regime in st.regimes:
        rr = [r for r in done if r["regime"] == regime.name]
        lines += [f"## Regime `{regime.name}` (difficulty {difficulties[regime.name]})", ""]
        lines += _accuracy_table(st, rr, "equal iterations", lambda r: _last_eval(r))
        lines += _accuracy_table(st, rr, f"equal actor samples ({equal})", lambda r: _eval_at_samples(r, equal))
        lines += _critic_table(st, rr)
        png = out_dir / f"study-{regime.name}.png"
        if rr:
            _plot(st, rr, png, regime.name)
            files.append(str(png))
            lines += [f"![{regime.name}: accuracy, zero_adv_frac and critic_hits_first_error]({png.name})", ""]
    if HYPOTHESIS_METHODS <= set(st.methods) and "sparse" in {r.name for r in st.regimes}:
        lines += _hypotheses(st, done, equal)
    lines += ["## Deviations recorded by the study itself", ""]
    lines += [f"- {d}" for d in deviations] or ["- none"]
    failed = [r for r in runs if not r["finished"]]
    if failed:
        lines += ["", "Runs not finished: " + ", ".join(f"{r['regime']}/{r['method']}/s{r['seed']} ({r['state']})"
                                                        for r in failed)]
    text = "\n".join(lines) + "\n"
    (out_dir / "report.md").write_text(text)
    return {"text": text, "files": [str(out_dir / "report.md"), *files]}


# --------------------------------------------------------------------------- reading runs


def _evals(r: dict, name: str) -> dict[int, float]:
    return {int(k): v for k, v in r["metrics"].get(f"eval/{name}", {}).items()}


def _last_eval(r: dict) -> int | None:
    steps = _evals(r, "acc_single")
    return max(steps) if steps else None


def _eval_at_samples(r: dict, total: int) -> int | None:
    step = math.ceil(total / r["samples_per_iteration"])
    steps = _evals(r, "acc_single")
    candidates = [s for s in steps if s >= step]
    return min(candidates) if candidates else None


def _values(rr: list[dict], method: str, name: str, at) -> dict[int, float]:
    """seed -> value of eval metric `name` at step `at(run)` (runs of `method`)."""
    out = {}
    for r in rr:
        if r["method"] != method:
            continue
        step = at(r)
        v = _evals(r, name).get(step) if step is not None else None
        if v is not None:
            out[r["seed"]] = v
    return out


def _train_at(rr: list[dict], method: str, name: str, step: int) -> dict[int, float]:
    return {r["seed"]: r["metrics"][f"train/{name}"][step] for r in rr
            if r["method"] == method and step in r["metrics"].get(f"train/{name}", {})}


def _train_mean(rr: list[dict], method: str, name: str) -> dict[int, float]:
    return {r["seed"]: statistics.fmean(r["metrics"][f"train/{name}"].values()) for r in rr
            if r["method"] == method and r["metrics"].get(f"train/{name}")}


def _cell(values: dict[int, float], scale: float = 100.0, digits: int = 1) -> str:
    if not values:
        return "–"
    mean, half = t_interval(list(values.values()))
    n = f" (n={len(values)})" if len(values) != 5 else ""
    if math.isnan(half):
        return f"{scale * mean:.{digits}f}{n}"
    return f"{scale * mean:.{digits}f} ± {scale * half:.{digits}f}{n}"


# --------------------------------------------------------------------------- sections


def _protocol(st, equal: int, done: int, total: int) -> list[str]:
    cfg = st.config()
    g, t = cfg.generation, cfg.train
    return [
        "## Protocol", "",
        f"Study file `{st.path.as_posix()}` (key `{st.key()}`), preset `{st.preset}`; {total} runs "
        f"({len(st.regimes)} regimes × {len(st.methods)} methods × seeds {', '.join(map(str, st.seeds))}), "
        f"{done} finished. Every run: {st.iterations} iterations of B = {t.batch_problems} problems × "
        f"G = {t.group_size} attempts, K = {t.critic_group_size} feedbacks per attempt for every method with a second "
        f"turn. Held-out evaluation: {cfg.task.n_test} problems × {g.eval_samples} sample(s), temperature "
        f"{g.eval_temperature}, at step 0, every {st.eval_every} iterations and at the equal-samples point "
        f"({equal} actor samples = {st.equal_samples_method}'s total). Protocols: `acc_single` (actor alone), "
        f"`acc_feedback` (one feedback from the method's own feedback source, then one refinement; unassisted), "
        f"`acc_gated_k2` (verifier-gated, up to 2 feedback rounds: oracle-assisted). Cells: mean ± 95 % "
        "t-interval over seeds, in %.", "",
    ]


def _regimes(st, measured: dict, difficulties: dict) -> list[str]:
    lines = ["## The regimes (base model only, before any RL run)", "",
             f"Held-out problems, G = {st.group_size} first attempts each, measurement seed {st.measure_seed}, "
             "the base model without adapters (binac_core/regimes.py).", "",
             "| difficulty | single-turn | all-wrong groups |", "| --- | --- | --- |"]
    for d, m in sorted(measured.items()):
        lines.append(f"| {d} | {100 * m['single']:.1f} % | {m['all_wrong_frac']:.3f} |")
    lines += ["", "Chosen: " + ", ".join(f"`{r}` = difficulty {d}" for r, d in difficulties.items()) + ".", "",
              "Bounds of feedback at the chosen difficulties (each first attempt gets one second turn per source; "
              "fixed = wrong → right, broken = right → wrong, as shares of all attempts):", "",
              "| regime | single-turn | initial critic | oracle | fixed self-correction | critic names the first "
              "wrong step | critic false alarm |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for r, d in difficulties.items():
        m = measured[d]
        cells = [f"{100 * m[s]:.1f} % (fixed {100 * m[s + '_fixed']:.1f}, broken {100 * m[s + '_broken']:.1f})"
                 for s in ("initial_critic", "oracle", "self_correct")]
        lines.append(f"| {r} (d{d}) | {100 * m['single']:.1f} % | " + " | ".join(cells) +
                     f" | {_pct(m.get('critic_hits_first_error'))} | {_pct(m.get('critic_false_alarm'))} |")
    return lines + [""]


def _pct(v) -> str:
    return "–" if v is None else f"{100 * v:.1f} %"


def _methods(st) -> list[str]:
    return [m for m in METHOD_ORDER if m in st.methods] + [m for m in st.methods if m not in METHOD_ORDER]


def _accuracy_table(st, rr: list[dict], title: str, at) -> list[str]:
    lines = [f"**At {title}**", "", "| method | iteration | " + " | ".join(ACC) + " |",
             "| --- | --- | " + " | ".join("---" for _ in ACC) + " |"]
    for m in _methods(st):
        steps = sorted({at(r) for r in rr if r["method"] == m and at(r) is not None})
        cells = [_cell(_values(rr, m, a, at)) for a in ACC]
        lines.append(f"| {m} | {', '.join(map(str, steps)) or '–'} | " + " | ".join(cells) + " |")
    return lines + [""]


def _critic_table(st, rr: list[dict]) -> list[str]:
    lines = ["**Advantage collapse and the critic** (train measures: iteration 1 = the base policies, and the mean "
             "over all iterations; held-out measures: the `feedback` protocol at step 0 and at the last evaluation)",
             "", "| method | zero_adv_frac (it. 1) | refine_zero_adv_frac (it. 1) | critic_signal_frac (mean) | "
             "feedback_gain (mean) | hits first error, held-out: step 0 → last | false alarm, held-out: step 0 → "
             "last |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for m in _methods(st):
        h0 = _values(rr, m, "critic_hits_first_error", lambda r: 0)
        h1 = _values(rr, m, "critic_hits_first_error", _last_eval)
        f0 = _values(rr, m, "critic_false_alarm", lambda r: 0)
        f1 = _values(rr, m, "critic_false_alarm", _last_eval)
        lines.append(
            f"| {m} | {_cell(_train_at(rr, m, 'zero_adv_frac', 1))} | {_cell(_train_at(rr, m, 'refine_zero_adv_frac', 1))}"
            f" | {_cell(_train_mean(rr, m, 'critic_signal_frac'))} | {_cell(_train_mean(rr, m, 'feedback_gain'))} | "
            f"{_cell(h0)} → {_cell(h1)} | {_cell(f0)} → {_cell(f1)} |")
    return lines + ["", "(all in %)", ""]


# --------------------------------------------------------------------------- hypotheses


def paired(a: dict[int, float], b: dict[int, float]) -> tuple[float, float, int]:
    """(mean, half-width, n) of the per-seed differences a − b over the seeds both have."""
    seeds = sorted(set(a) & set(b))
    if not seeds:
        return math.nan, math.nan, 0
    mean, half = t_interval([a[s] - b[s] for s in seeds])
    return mean, half, len(seeds)


def verdict(diffs: list[tuple[float, float, int]]) -> str:
    """The fixed rule of the module doc over claims "difference > 0"."""
    states = []
    for mean, half, n in diffs:
        if n < 2 or math.isnan(half):
            states.append("inconclusive")
        elif mean - half > 0:
            states.append("supported")
        elif mean + half < 0:
            states.append("not supported")
        else:
            states.append("inconclusive")
    if "not supported" in states:
        return "not supported"
    return "supported" if states and all(s == "supported" for s in states) else "inconclusive"


def _d(diff: tuple[float, float, int], scale: float = 100.0) -> str:
    mean, half, n = diff
    if n == 0:
        return "no paired seeds"
    return f"{scale * mean:+.1f} ± {scale * half:.1f} (n={n})" if not math.isnan(half) else f"{scale * mean:+.1f} (n=1)"


def _hypotheses(st, done: list[dict], equal: int) -> list[str]:
    sparse = [r for r in done if r["regime"] == "sparse"]
    last, at_eq = _last_eval, (lambda r: _eval_at_samples(r, equal))
    lines = ["## Hypotheses (verdicts by the fixed rules above; differences in points, paired by seed)", ""]

    def order(rr, at, name="acc_single"):
        b, f, g = (_values(rr, m, name, at) for m in ("binac", "fixed_critic", "grpo"))
        return paired(b, f), paired(f, g)

    for tag, at, what in (("H1", last, "equal iterations"), ("H2", at_eq, "equal actor samples")):
        d1, d2 = order(sparse, at)
        lines.append(f"- **{tag}** (sparse, {what}: binac > fixed_critic > grpo on acc_single): **{verdict([d1, d2])}**"
                     f". binac − fixed_critic {_d(d1)}; fixed_critic − grpo {_d(d2)}.")
    for regime in st.regimes:
        rr = [r for r in done if r["regime"] == regime.name]
        hits = {m: _values(rr, m, "critic_hits_first_error", last) for m in ("binac", "fixed_critic")}
        start = _values(rr, "binac", "critic_hits_first_error", lambda r: 0)
        d_time, d_frozen = paired(hits["binac"], start), paired(hits["binac"], hits["fixed_critic"])
        lines.append(f"- **H3** ({regime.name}: binac's held-out critic_hits_first_error after the last iteration > "
                     f"at step 0, and > the frozen critic's, read on fixed_critic's run): "
                     f"**{verdict([d_time, d_frozen])}**. last − step 0 {_d(d_time)}; binac − frozen {_d(d_frozen)}.")
    for regime in st.regimes:
        rr = [r for r in done if r["regime"] == regime.name]
        d = paired(_values(rr, "binac", "acc_feedback", last), _values(rr, "binac_lam0", "acc_feedback", last))
        side = "; ".join(
            f"{m}: acc_feedback {_cell(_values(rr, m, 'acc_feedback', last))}, hits "
            f"{_cell(_values(rr, m, 'critic_hits_first_error', last))}"
            for m in ("binac", "binac_lam0", "binac_after") if m in st.methods)
        lines.append(f"- **H4** ({regime.name}: penalty-form binac > binac_lam0 on final acc_feedback): "
                     f"**{verdict([d])}**. binac − binac_lam0 {_d(d)}. Side by side: {side}.")
    grpo0 = _train_at(sparse, "grpo", "zero_adv_frac", 1)
    first = t_interval(list(grpo0.values())) if grpo0 else (math.nan, math.nan)
    diffs = {m: paired(_train_at(sparse, m, "refine_zero_adv_frac", 1), grpo0) for m in st.methods
             if m != "grpo" and _train_at(sparse, m, "refine_zero_adv_frac", 1)}
    lower = verdict([(-mean, half, n) for mean, half, n in diffs.values()])
    if math.isnan(first[0]):
        h5 = "inconclusive"
    elif first[0] < 0.5:
        h5 = "not supported"
    else:
        h5 = lower
    lines.append(f"- **H5** (sparse: GRPO's zero_adv_frac at iteration 1 ≥ 0.5, and the feedback methods' "
                 f"refinement groups lower): **{h5}**. GRPO: {_cell(grpo0)} %; refinement groups minus GRPO: " +
                 ("; ".join(f"{m} {_d(d)}" for m, d in diffs.items()) or "none") + ".")
    return lines + [""]


# --------------------------------------------------------------------------- plots


def _plot(st, rr: list[dict], png: Path, regime: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 8), dpi=100)
    panels = [(axes[0][0], "eval/acc_single", "iteration", "held-out acc_single (%)", False),
              (axes[0][1], "eval/acc_single", "actor samples", "held-out acc_single (%)", True),
              (axes[1][0], "train/zero_adv_frac", "iteration", "zero_adv_frac of first-attempt groups (%)", False),
              (axes[1][1], "eval/critic_hits_first_error", "iteration",
               "held-out critic_hits_first_error (%)", False)]
    for ax, key, xlabel, ylabel, by_samples in panels:
        for m in _methods(st):
            runs = [r for r in rr if r["method"] == m and r["metrics"].get(key)]
            if not runs:
                continue
            points: dict[int, list[float]] = {}
            for r in runs:
                for step, v in r["metrics"][key].items():
                    x = int(step) * (r["samples_per_iteration"] if by_samples else 1)
                    points.setdefault(x, []).append(100 * v)
            xs = sorted(points)
            mean = [statistics.fmean(points[x]) for x in xs]
            lo = [min(points[x]) for x in xs]
            hi = [max(points[x]) for x in xs]
            ax.plot(xs, mean, marker="o" if key.startswith("eval") else None, markersize=3, label=m,
                    color=method_color(m))
            ax.fill_between(xs, lo, hi, color=method_color(m), alpha=0.12)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"{st.name}, regime {regime}: mean over seeds, band = min–max over seeds")
    fig.tight_layout()
    fig.savefig(png)
    plt.close(fig)
