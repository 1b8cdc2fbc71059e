"""The comparison report: accuracy per protocol and method (mean and 95 % t-interval over seeds), the actor
samples each method needed to reach GRPO's final single-turn accuracy, and accuracy-vs-samples curves (PNG).

Input: one dict per (method, seed) run with `evals` = {iteration: {"eval/acc_single": ..., ...}} and
`samples_per_iteration`; nothing is tuned or filtered here, every run given is reported. Every row names the
feedback source its feedback protocols used, and the text names each protocol shown (for code benchmarks:
`acc_feedback` is the unassisted critic, `acc_feedback_exec` the critic shown the graded tests' execution result).
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from binac_core.evaluation import CRITIC_BASE, CRITIC_TRAINED, FIXED_INSTRUCTION, method_feedback_source

PROTOCOLS = [
    ("eval/acc_single", "single-turn (actor alone)"),
    ("eval/acc_feedback", "with feedback (actor → feedback → actor; unassisted: the critic sees the problem and the "
                          "attempt only, no verifier or execution result)"),
    ("eval/acc_feedback_exec", "with execution-assisted feedback (code: the critic also sees the execution result of "
                               "the graded tests, so it is told whether the answer passes; verifier-assisted)"),
]


def t_interval(values: list[float]) -> tuple[float, float]:
    """(mean, half-width of the 95 % Student-t interval); half-width is NaN for a single seed."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, math.nan
    from scipy.stats import t

    half = t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, half


def _fmt(values: list[float]) -> str:
    mean, half = t_interval(values)
    return f"{100 * mean:.1f}" if math.isnan(half) else f"{100 * mean:.1f} ± {100 * half:.1f}"


def _final(run: dict) -> dict:
    evals = {int(k): v for k, v in run["evals"].items()}
    return evals[max(evals)]


def curves(run: dict, key: str = "eval/acc_single") -> list[tuple[int, float]]:
    evals = {int(k): v for k, v in run["evals"].items()}
    return [(step * run["samples_per_iteration"], evals[step][key]) for step in sorted(evals) if key in evals[step]]


def samples_to_reach(run: dict, target: float) -> int | None:
    for samples, acc in curves(run):
        if samples > 0 and acc >= target:
            return samples
    return None


def build_report(runs: list[dict], meta: dict, out_dir: Path) -> dict:
    """Write report.md and accuracy_vs_samples.png into out_dir; return {"text", "files", "table"}."""
    out_dir.mkdir(parents=True, exist_ok=True)
    methods = list(dict.fromkeys(r["method"] for r in runs))
    present = {k for r in runs for k in _final(r)}
    gated = sorted(k for k in present if k.startswith("eval/acc_gated"))
    protocols = [(k, d) for k, d in PROTOCOLS if k in present or k != "eval/acc_feedback_exec"] + [
        (k, f"verifier-gated, up to {k.rsplit('k', 1)[-1]} rounds (oracle-assisted)"
            + ("; critic shown the graded tests' execution result" if "_exec_" in k else "; unassisted critic"))
        for k in gated]
    by_method = {m: [r for r in runs if r["method"] == m] for m in methods}
    lines = [
        f"# Comparison on preset `{meta['preset']}`",
        "",
        f"Seeds: {meta['seeds']}. Budget: {meta['budget']} actor samples per run (= {meta['steps']} GRPO iterations). "
        f"Held-out problems: {meta['n_eval']} × {meta['eval_samples']} sample(s), temperature "
        f"{meta['eval_temperature']}; accuracy is pass@1 (mean over problems of correct/samples), in %, "
        "mean ± 95 % t-interval over seeds (no interval with one seed).",
        "",
        "| method | feedback source | " + " | ".join(k.removeprefix("eval/") for k, _ in protocols) + " | iterations |",
        "| --- | --- | " + " | ".join("---" for _ in protocols) + " | --- |",
    ]
    table = {}
    for m in methods:
        cells = []
        for key, _ in protocols:
            vals = [_final(r)[key] for r in by_method[m] if key in _final(r)]
            cells.append(_fmt(vals) if vals else "–")
            table[(m, key)] = vals
        iters = max(int(k) for k in by_method[m][0]["evals"])
        lines.append(f"| {m} | {method_feedback_source(m)} | " + " | ".join(cells) + f" | {iters} |")
    lines += ["", "Protocols: " + "; ".join(f"`{k.removeprefix('eval/')}` = {d}" for k, d in protocols) + ".", "",
              "Feedback source (each method is evaluated with the feedback it trains with): "
              f"`{CRITIC_TRAINED}` = the method's own learned critic adapter; `{CRITIC_BASE}` = the initial critic "
              "(the base model in the critic role), never updated (grpo trains no critic and is shown with this "
              f"one, the fixed_critic's); `{FIXED_INSTRUCTION}` = the self-correction text, no critic.", ""]
    if "grpo" in by_method:
        target = statistics.fmean(_final(r)["eval/acc_single"] for r in by_method["grpo"])
        lines += [f"Actor samples to reach GRPO's final single-turn accuracy ({100 * target:.1f} %), per seed "
                  "(– = not reached within the budget):", ""]
        for m in methods:
            per_seed = [samples_to_reach(r, target) for r in by_method[m]]
            lines.append(f"- {m}: " + ", ".join("–" if s is None else str(s) for s in per_seed))
        lines.append("")
    png = out_dir / "accuracy_vs_samples.png"
    _plot(by_method, png)
    lines.append(f"![held-out single-turn accuracy vs actor samples]({png.name})")
    text = "\n".join(lines) + "\n"
    (out_dir / "report.md").write_text(text)
    return {"text": text, "files": [str(out_dir / "report.md"), str(png)], "table": table}


def _plot(by_method: dict, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    for m, runs in by_method.items():
        points: dict[int, list[float]] = {}
        for r in runs:
            for s, acc in curves(r):
                points.setdefault(s, []).append(acc)
        xs = sorted(points)
        ax.plot(xs, [100 * statistics.fmean(points[x]) for x in xs], marker="o", label=m)
    ax.set_xlabel("actor samples")
    ax.set_ylabel("held-out acc_single (%)")
    ax.set_title("single-turn accuracy vs actor samples (mean over seeds)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(png)
    plt.close(fig)
