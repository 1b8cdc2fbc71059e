"""The comparison report: accuracy per protocol and method, the samples each method needed to reach GRPO's accuracy, and
the curves. Accuracy is the mean and 95 % t-interval over seeds; the samples are the actor training samples each method
needed to reach GRPO's final single-turn accuracy; the accuracy-vs-samples curves (PNG) are on both budget axes.

Input: one dict per (method, seed) run with `evals` = {iteration: {"eval/acc_single": ..., ...}}, the
`feedback_source` its feedback protocols used (`MethodSpec.eval_feedback`; a row without one shows –),
`samples_per_iteration` (actor TRAINING samples: the sequences the actor's loss is computed on, never the
look-ahead refinements) and, optionally, `generated_per_iteration` (every sequence sampled from the actor or the
critic; binac_core/rl/methods.py); nothing is tuned or filtered here, every run given is reported. Every row names the
feedback source its feedback protocols used, and the text names each protocol shown (for code benchmarks:
`acc_feedback` is the unassisted critic, `acc_feedback_exec` the critic shown the graded tests' execution result;
`acc_single_greedy`, where evaluated, the actor's greedy answer beside `acc_single`'s sampled ones). A cell whose
seeds split (`stats.seeds_split`: at least 2 seeds whose values span 20 points or more) also gives its per-seed
values, in seed order.
"""

from __future__ import annotations

import base64
import math
import statistics
from collections.abc import Callable
from pathlib import Path

from binac_core.foundation.stats import SPLIT, per_seed, t_interval
from binac_core.reports.critic_health import EXPLAINED, health_table
from binac_core.reports.measures import CRITIC_INFORMATION
from binac_core.reports.plots import method_color, ordered, seed_band
from binac_core.rl.kinds import FeedbackSource
from binac_core.rl.schedule import actor_iterations_through

PROTOCOLS = [
    ("eval/acc_single", "single-turn (actor alone, at the evaluation temperature)"),
    (
        "eval/acc_single_greedy",
        "single-turn, greedy (actor alone, one answer per problem at temperature 0: its most likely answer)",
    ),
    (
        "eval/acc_feedback",
        "with feedback (actor → feedback → actor; unassisted: the critic sees the problem and the "
        "attempt only, no verifier or execution result)",
    ),
    (
        "eval/acc_feedback_exec",
        "with execution-assisted feedback (code: the critic also sees the execution result of "
        "the graded tests, so it is told whether the answer passes; verifier-assisted)",
    ),
]
SHOWN_WHERE_PRESENT = ("eval/acc_single_greedy", "eval/acc_feedback_exec")
"""Protocols of `PROTOCOLS` that only some benchmarks or settings evaluate: a column only where some run has them
(the others always get one)."""


def _fmt(values: list[float]) -> str:
    """mean ± 95 % t-interval in %, then the per-seed values in the order given where they split
    (`stats.per_seed`)."""
    mean, half = t_interval(values)
    return f"{100 * mean:.1f}" if math.isnan(half) else f"{100 * mean:.1f} ± {100 * half:.1f}{per_seed(values)}"


def _final(run: dict) -> dict:
    evals = {int(k): v for k, v in run["evals"].items()}
    return evals[max(evals)]


def curves(run: dict, key: str = "eval/acc_single", by_samples: bool | str = True) -> list[tuple[int, float]]:
    """(actor training samples, value) at each evaluation of the run, (generated samples, value) with
    `by_samples="generated"`, or (iteration, value) with `by_samples=False`."""
    evals = {int(k): v for k, v in run["evals"].items()}

    def x(step: int) -> int:
        if not by_samples:
            return step
        return step * run["generated_per_iteration"] if by_samples == "generated" else actor_samples_at(run, step)

    return [(x(step), evals[step][key]) for step in sorted(evals) if key in evals[step]]


def actor_samples_at(run: dict, step: int) -> int:
    """The run's actor training samples after iteration `step`: `samples_per_iteration` times its actor iterations
    (all of them, or under the run's `alternation` the actor ones, `schedule.actor_iterations_through`)."""
    alternation = run.get("alternation")
    return run["samples_per_iteration"] * actor_iterations_through(
        None if alternation is None else tuple(alternation), step
    )


def samples_to_reach(run: dict, target: float) -> int | None:
    for samples, acc in curves(run):
        if samples > 0 and acc >= target:
            return samples
    return None


def _protocols(runs: list[dict]) -> list[tuple[str, str]]:
    """The protocols with a final number in some run, each with the sentence that says what it is."""
    present = {k for r in runs for k in _final(r)}
    gated = sorted(k for k in present if k.startswith("eval/acc_gated"))
    return [(k, d) for k, d in PROTOCOLS if k in present or k not in SHOWN_WHERE_PRESENT] + [
        (
            k,
            f"verifier-gated, up to {k.rsplit('k', 1)[-1]} rounds (oracle-assisted)"
            + ("; critic shown the graded tests' execution result" if "_exec_" in k else "; unassisted critic"),
        )
        for k in gated
    ]


def _by_method(runs: list[dict]) -> dict[str, list[dict]]:
    return {m: [r for r in runs if r["method"] == m] for m in ordered(r["method"] for r in runs)}


def _grpo_target(by_method: dict[str, list[dict]]) -> float | None:
    """GRPO's final single-turn accuracy, mean over its seeds (None without grpo runs)."""
    if "grpo" not in by_method:
        return None
    return statistics.fmean(_final(r)["eval/acc_single"] for r in by_method["grpo"])


def _samples_used(run: dict) -> int:
    """The actor training samples of the run's whole training."""
    return actor_samples_at(run, max(int(k) for k in run["evals"]))


def _generated_used(run: dict) -> int | None:
    """The generated samples of the run's whole training (None for a run that does not give its count)."""
    per = run.get("generated_per_iteration")
    return None if per is None else max(int(k) for k in run["evals"]) * per


def summary_metrics(runs: list[dict]) -> dict[str, float]:
    """The report's numbers as metrics for the comparison's parent run, named `summary/<method>/<metric>` so that
    the MLflow runs table sorts them by method (and its chart view puts them in sections after the runs' own
    `eval/` and `eval_at_samples/` charts): per protocol the final accuracy's mean over seeds (`binac/acc_single`)
    and 95 % half-width (`binac/acc_single_ci95`, with two or more seeds), the actor training samples used
    (`actor_samples`) and generated samples (`generated_samples`), and the actor training samples to reach GRPO's
    final single-turn accuracy (mean over the seeds that reached it; `..._reached` counts them)."""
    by_method, out = _by_method(runs), {}
    target = _grpo_target(by_method)
    for m, rr in by_method.items():
        for key, _ in _protocols(runs):
            values = [_final(r)[key] for r in rr if key in _final(r)]
            if not values:
                continue
            mean, half = t_interval(values)
            name = f"summary/{m}/{key.removeprefix('eval/')}"
            out[name] = mean
            if not math.isnan(half):
                out[f"{name}_ci95"] = half
        out[f"summary/{m}/actor_samples"] = statistics.fmean(_samples_used(r) for r in rr)
        generated = [g for g in (_generated_used(r) for r in rr) if g is not None]
        if generated:
            out[f"summary/{m}/generated_samples"] = statistics.fmean(generated)
        if target is not None:
            reached = [s for s in (samples_to_reach(r, target) for r in rr) if s is not None]
            out[f"summary/{m}/samples_to_grpo_final_reached"] = len(reached)
            if reached:
                out[f"summary/{m}/samples_to_grpo_final"] = statistics.fmean(reached)
    return out


def build_report(runs: list[dict], meta: dict, out_dir: Path) -> dict:
    """Write report.md, report.html (the same, with the plot inline, for MLflow's artifact viewer) and
    accuracy_vs_samples.png into out_dir; return {"text", "files", "table", "metrics"}."""
    out_dir.mkdir(parents=True, exist_ok=True)
    by_method = _by_method(runs)
    protocols = _protocols(runs)
    lines = [
        f"# Comparison on preset `{meta['preset']}`",
        "",
        f"Seeds: {meta['seeds']}. "
        + (
            f"Equal iterations: every method trains {meta['steps']} iterations, evaluated every "
            f"{meta.get('eval_every')} and after the last; column `actor training samples`: the sequences the "
            "actor's loss was computed on (attempts, and refinements for a method trained on its second turn; "
            "never the look-ahead refinements that only reward the critic), which differ between methods. "
            if meta.get("equal") == "iterations"
            else f"Budget: {meta['budget']} actor training samples per run (= {meta['steps']} GRPO "
            "iterations), the sequences the actor's loss is computed on (attempts, and refinements for a method "
            "trained on its second turn; never the look-ahead refinements that only reward the critic); each "
            "method trains the whole iterations that fit in it (column `actor training samples`), critic_only, "
            "which trains no actor, the iterations GRPO runs. "
        )
        + "Column `generated samples`: every sequence sampled from the actor or "
        "the critic in training (feedback and look-ahead included), the compute spent. "
        f"Held-out problems: {meta['n_eval']} × {meta['eval_samples']} sample(s), temperature "
        f"{meta['eval_temperature']}; accuracy is pass@1 (mean over problems of correct/samples), in %, "
        "mean ± 95 % t-interval over seeds (no interval with one seed); where a cell's seeds split (at least 2 "
        f"seeds whose values span {100 * SPLIT:g} points or more), its per-seed values follow in seed order."
        + (
            " `acc_single_greedy`: one answer per problem at temperature 0, beside `acc_single` at temperature "
            f"{meta['eval_temperature']}."
            if any(k == "eval/acc_single_greedy" for k, _ in protocols)
            else ""
        ),
        "",
        sandbox_line(meta.get("grading_sandbox", "bwrap"), meta.get("isolation", [])),
        "",
        *_evaluation_points(meta),
        "| method | feedback source | "
        + " | ".join(k.removeprefix("eval/") for k, _ in protocols)
        + " | iterations | actor training samples | generated samples |",
        "| --- | --- | " + " | ".join("---" for _ in protocols) + " | --- | --- | --- |",
    ]
    table = {}
    for m, rr in by_method.items():
        cells = []
        for key, _ in protocols:
            vals = [_final(r)[key] for r in sorted(rr, key=lambda r: r.get("seed", 0)) if key in _final(r)]
            cells.append(_fmt(vals) if vals else "–")
            table[(m, key)] = vals
        iters = max(int(k) for k in rr[0]["evals"])
        source = FeedbackSource.parse(rr[0]["feedback_source"]).label if "feedback_source" in rr[0] else "–"
        lines.append(
            f"| {m} | {source} | "
            + " | ".join(cells)
            + f" | {iters} | {_samples_used(rr[0])} | {_generated_used(rr[0]) or '–'} |"
        )
    lines += [
        "",
        "Protocols: " + "; ".join(f"`{k.removeprefix('eval/')}` = {d}" for k, d in protocols) + ".",
        "",
        "Feedback source (each method is evaluated with the feedback it trains with): "
        f"`{FeedbackSource.CRITIC_TRAINED.label}` = the method's own learned critic adapter; "
        f"`{FeedbackSource.CRITIC_BASE.label}` = the initial critic "
        "(the base model in the critic role), never updated (grpo trains no critic and is shown with this "
        f"one, the fixed_critic's); `{FeedbackSource.FIXED.label}` = the self-correction text, no critic.",
        "",
    ]
    lines += _critic_health(by_method)
    target = _grpo_target(by_method)
    if target is not None:
        lines += [
            f"Actor training samples to reach GRPO's final single-turn accuracy ({100 * target:.1f} %), per seed "
            "(– = not reached within the budget):",
            "",
        ]
        for m, rr in by_method.items():
            lines.append(
                f"- {m}: " + ", ".join("–" if s is None else str(s) for s in (samples_to_reach(r, target) for r in rr))
            )
        lines.append("")
    png = out_dir / "accuracy_vs_samples.png"
    _plot(by_method, png)
    lines.append(
        f"![held-out single-turn accuracy vs iterations, actor training samples and generated samples]({png.name})"
    )
    files = [png]
    if any(r.get("critic_information") for r in runs):
        info_png = out_dir / "critic_information.png"
        _plot_critic_information(by_method, info_png)
        files.append(info_png)
        lines += [
            "",
            f"![the critic's reward information over training, in bins of {INFORMATION_BIN} iterations]"
            f"({info_png.name})",
        ]
    text = "\n".join(lines) + "\n"
    (out_dir / "report.md").write_text(text)
    html = out_dir / "report.html"
    html.write_text(render_html(text, out_dir, f"binac comparison ({meta['preset']})"))
    return {
        "text": text,
        "files": [str(out_dir / "report.md"), str(html), *map(str, files)],
        "table": table,
        "metrics": summary_metrics(runs),
    }


def sandbox_line(setting: str, used: list[str | None]) -> str:
    """The protocol's sentence on the code sandbox: the accepted isolation (`grading.sandbox`) and what the runs'
    grader actually isolated untrusted code with (their `grading.isolation` parameter; `none`: no code run)."""
    seen = sorted({u for u in used if u})
    actual = ", ".join(f"`{u}`" for u in seen) if seen else "not recorded"
    return (
        f"Code sandbox: `grading.sandbox: {setting}` (bwrap = bubblewrap required; rlimits = the weaker "
        f"fallback accepted; docs/sandbox.md); isolation used: {actual}."
    )


def _critic_health(by_method: dict[str, list[dict]]) -> list[str]:
    """The critic health table (`binac_core.reports.critic_health`): per method with a critic, at step 0 and at the final
    evaluation; nothing when no run has verdicts."""

    def at(rr: list[dict], step) -> Callable[[str], list[float]]:
        def values(measure: str) -> list[float]:
            evals = [{int(k): v for k, v in r["evals"].items()} for r in rr]
            found = [e[step if step is not None else max(e)].get(f"eval/critic/{measure}") for e in evals]
            return [v for v in found if v is not None]

        return values

    rows = [
        (f"{m}, {label}", at(rr, step))
        for m, rr in by_method.items()
        if any("eval/critic/verdict_accuracy" in e for r in rr for e in r["evals"].values())
        for label, step in (("step 0", 0), ("final", None))
    ]
    if not rows:
        return []
    return ["**Critic health**, mean ± 95 % t-interval over seeds:", "", *health_table(rows), "", EXPLAINED, ""]


def _evaluation_points(meta: dict) -> list[str]:
    """A sentence on where the methods were evaluated: at actor training sample counts they all share, or not (a
    method that trains no actor, its count always 0, is evaluated at evenly spaced iterations either way)."""
    shared = meta.get("shared_samples")
    if shared is None:
        return []
    if shared:
        return [
            "Every method that trains its actor was evaluated at the same actor training sample counts: 0, "
            f"{', '.join(map(str, shared))} (multiples of the methods' actor training samples per iteration "
            "that fit the budget), and after its last iteration; a method training no actor at evenly spaced "
            "iterations.",
            "",
        ]
    if not meta.get("common_samples"):
        return ["No method compared trains its actor: each was evaluated at evenly spaced iterations.", ""]
    return [
        "The methods share no actor training sample count within this budget except 0 (their actor training "
        f"samples per iteration have least common multiple {meta['common_samples']}); each was evaluated at "
        f"evenly spaced iterations instead. A budget of a multiple of {meta['common_samples']} actor training "
        "samples evaluates every method at the same counts.",
        "",
    ]


def render_html(markdown_text: str, folder: Path, title: str) -> str:
    """The report as one standalone HTML page: the markdown rendered (tables included) and every image that
    lies in `folder` inlined as a data URI, so MLflow's artifact viewer shows the plot instead of a raw link."""
    import markdown

    body = markdown.markdown(markdown_text, extensions=["tables"])
    for png in folder.glob("*.png"):
        data = base64.b64encode(png.read_bytes()).decode()
        body = body.replace(f'src="{png.name}"', f'src="data:image/png;base64,{data}"')
    style = (
        "body{font-family:sans-serif;max-width:1100px;margin:2em auto;line-height:1.4}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}"
        "td:first-child,th:first-child{text-align:left}img{max-width:100%}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title><style>{style}</style>"
        f"</head><body>{body}</body></html>\n"
    )


INFORMATION_BIN = 10
"""Iterations per bin of the critic information plot (`_plot_critic_information`)."""


def information_bins(information: dict, measure: str, width: int = INFORMATION_BIN) -> dict[int, float]:
    """{first iteration of the bin: the mean of the bin's per-iteration values of `measure`} of one run's
    `critic_information` ({iteration: {measure: value}}; keys may be strings, as read back from JSON); a bin
    where no iteration has a value is left out. A mean of per-iteration values, each weighting its iteration
    alike: sql/critic_information.sql pools the bin's rows instead, which differs where iterations have unequal
    counts (hint_value's rows)."""
    bins: dict[int, list[float]] = {}
    for step, measures in information.items():
        if measure in measures:
            bins.setdefault((int(step) - 1) // width * width + 1, []).append(measures[measure])
    return {b: sum(v) / len(v) for b, v in sorted(bins.items())}


def _plot_critic_information(by_method: dict, png: Path) -> None:
    """The critic's reward information over training (`measures.CRITIC_INFORMATION`), one panel per measure: per
    method the mean over seeds of each run's `information_bins`, with a 95 % band, against the bin's first
    iteration; methods without critic rewards are left out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(CRITIC_INFORMATION), figsize=(4 * len(CRITIC_INFORMATION), 4), dpi=100)
    for ax, measure in zip(axes, CRITIC_INFORMATION, strict=True):
        for m, runs in by_method.items():
            points: dict[int, list[float]] = {}
            for r in runs:
                for b, v in information_bins(r.get("critic_information") or {}, measure).items():
                    points.setdefault(b, []).append(v)
            if points:  # not `seed_band`, which cuts the band at 0: hint_value can be negative
                xs = sorted(points)
                stats = [t_interval(points[x]) for x in xs]
                mean = [mu for mu, _ in stats]
                half = [0.0 if math.isnan(h) else h for _, h in stats]
                ax.plot(xs, mean, marker="o", markersize=3, color=method_color(m), label=m)
                ax.fill_between(
                    xs,
                    [a - h for a, h in zip(mean, half, strict=True)],
                    [a + h for a, h in zip(mean, half, strict=True)],
                    color=method_color(m),
                    alpha=0.15,
                    linewidth=0,
                )
        ax.set_xlabel(f"iteration (bins of {INFORMATION_BIN})")
        ax.set_title(measure, fontsize=9)
    axes[0].legend(fontsize=8)
    fig.suptitle("the critic's reward information (binac_core/reports/measures.py): mean over seeds, 95 % band")
    fig.tight_layout()
    fig.savefig(png)
    plt.close(fig)


def _plot(by_method: dict, png: Path) -> None:
    """Held-out acc_single against iterations, against actor training samples and against generated samples: the
    mean over seeds with a 95 % band, one colour per method (binac_core/reports/plots.py). A method that trains no actor
    (0 actor training samples per iteration) is left out of the middle panel, where all its points would sit at
    0; runs that do not give their generated count are left out of the right one."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4), dpi=100)
    panels = (
        (axes[0], False, "iteration"),
        (axes[1], True, "actor training samples"),
        (axes[2], "generated", "generated samples"),
    )
    for ax, by_samples, xlabel in panels:
        for m, runs in by_method.items():
            if by_samples is True:
                shown = [r for r in runs if r["samples_per_iteration"]]
            else:
                shown = [r for r in runs if r.get("generated_per_iteration")] if by_samples else runs
            if not shown:
                continue
            points: dict[int, list[float]] = {}
            for r in shown:
                for x, acc in curves(r, by_samples=by_samples):
                    points.setdefault(x, []).append(acc)
            seed_band(ax, m, points)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("held-out acc_single (%)")
    axes[0].legend(fontsize=8)
    fig.suptitle("held-out single-turn accuracy: mean over seeds, band = 95 % t-interval over seeds")
    fig.tight_layout()
    fig.savefig(png)
    plt.close(fig)
