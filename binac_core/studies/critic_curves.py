"""The critic's curves in a study report, for every arm (method and variant) that logged them: on the fixed attempt bank
and during training. On the bank, its measures beside the frozen base critic's (`bank_<split>/...`,
binac_core/reports/bank_measures.py); during training, its reward's information (`train/<name>`,
binac_core/reports/measures.py, "The critic's reward information"). Each is a table (mean ± 95 % t-interval over seeds,
the seeds' values where they split: `run_values.seed_cell`) and one PNG of curves (mean over seeds with its band).

The bank split shown is the study's evaluation split (`task.eval_split`): a pilot or an exploration reads `val`,
a main study `eval`. The frozen base critic is scored once per bank, so its values are the same at every
evaluation of every run on one base; its row is the mean over the runs' seeds like any other.
Reward information is per training iteration; the tables bin it by `BIN` iterations, each bin's value per run the
mean of its iterations' values (iterations where a measure had no rows, e.g. no right attempt was approved, left
out), which weights iterations alike; `sql/critic_information.sql` pools a bin's rows instead.
Nothing here judges a result."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from binac_core.foundation.stats import t_interval
from binac_core.studies.run_values import runs_of, seed_cell

BANK_SHOWN = ("hits_first_error", "false_alarm", "approves_wrong", "approves_right", "verdict_balanced_accuracy")
"""The bank measures, in the order shown (`bank_measures.BANK_MEASURES`)."""
REWARD_INFO = (
    "critic_flat_frac",
    "critic_reward_spread",
    "critic_wrong_frac",
    "hint_value",
    "r1_after_approving_right",
)
"""The reward-information measures, in the order shown (`measures.REWARD_INFORMATION`)."""
BIN = 10
"""Training iterations per bin of the reward-information table."""
FROZEN = "frozen base critic"


def bank_series(r: dict, split: str, critic: str, measure: str) -> dict[int, float]:
    """step -> the run's bank measure (`critic`: `critic` or `frozen_critic`) at each evaluation."""
    got = r["metrics"].get(f"bank_{split}/{critic}_{measure}", {})
    return {int(k): v for k, v in got.items() if v is not None and not math.isnan(v)}


def binned(r: dict, name: str, size: int = BIN) -> dict[int, float]:
    """first iteration of each bin -> the mean of `train/<name>` over the bin's iterations that have a value."""
    by_bin: dict[int, list[float]] = {}
    for step, v in r["metrics"].get(f"train/{name}", {}).items():
        if v is not None and not math.isnan(v) and int(step) >= 1:
            by_bin.setdefault((int(step) - 1) // size * size + 1, []).append(v)
    return {b: statistics.fmean(vs) for b, vs in sorted(by_bin.items())}


def _by_seed(runs: list[dict], series) -> dict[int, dict[int, float]]:
    """x -> seed -> value, from `series(run)` ({x: value})."""
    out: dict[int, dict[int, float]] = {}
    for r in runs:
        for x, v in series(r).items():
            out.setdefault(x, {})[r["seed"]] = v
    return out


def _arm_label(method: str, variant: str) -> str:
    return f"{method} [{variant}]" if variant else method


def _table(title: str, rows: list[tuple[str, dict[int, dict[int, float]]]], seeds: int, scale: float) -> list[str]:
    xs = sorted({x for _, pts in rows for x in pts})
    if not xs:
        return []
    lines = [title, "", "| arm | " + " | ".join(str(x) for x in xs) + " |", "| --- |" + " --- |" * len(xs)]
    for label, pts in rows:
        cells = [seed_cell(pts.get(x, {}), scale=scale, seeds=seeds) for x in xs]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def bank_rows(st, rr: list[dict], arms, split: str, measure: str) -> list[tuple[str, dict]]:
    """(label, step -> seed -> value): every arm's critic, then the frozen base critic (over all runs' seeds)."""
    rows = [
        (_arm_label(m, v), _by_seed(runs_of(rr, m, v), lambda r: bank_series(r, split, "critic", measure)))
        for m, v in arms
    ]
    frozen: dict[int, dict[int, float]] = {}
    for r in rr:
        for x, val in bank_series(r, split, "frozen_critic", measure).items():
            frozen.setdefault(x, {}).setdefault(r["seed"], val)
    return [(label, pts) for label, pts in rows if pts] + ([(FROZEN, frozen)] if frozen else [])


def section(st, rr: list[dict], arms, out_dir: Path, regime: str) -> tuple[list[str], list[str]]:
    """The report's lines and files (the PNG) for one regime's finished runs `rr`; nothing where no run logged
    either kind of curve."""
    split = st.config().task.eval_split
    seeds = len(st.seeds)
    lines: list[str] = []
    bank = {m: bank_rows(st, rr, arms, split, m) for m in BANK_SHOWN}
    if any(bank.values()):
        lines += [f"**The critic on the fixed attempt bank** (`{split}` split), in %, by evaluation (iteration):", ""]
        for m in BANK_SHOWN:
            lines += _table(f"`{m}`", bank[m], seeds, 100.0)
    info = {
        name: [(_arm_label(m, v), _by_seed(runs_of(rr, m, v), lambda r, n=name: binned(r, n))) for m, v in arms]
        for name in REWARD_INFO
    }
    info = {name: [(a, p) for a, p in rows if p] for name, rows in info.items()}
    if any(info.values()):
        lines += [
            f"**The critic's reward information** (`train/`), by bin of {BIN} iterations (its first iteration); "
            "shares and r1 in %, `critic_reward_spread` and `hint_value` in reward points × 100:",
            "",
        ]
        for name in REWARD_INFO:
            lines += _table(f"`{name}`", info[name], seeds, 100.0)
    if not lines:
        return [], []
    png = Path(out_dir) / f"critic-curves-{regime}.png"
    _plot(bank, info, png, split)
    return [*lines, f"![{regime}: the critic on the bank and its reward information]({png.name})", ""], [str(png)]


def _plot(bank: dict, info: dict, png: Path, split: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(f"bank {split}: {m}", rows) for m, rows in bank.items() if rows]
    panels += [(f"train: {n}", rows) for n, rows in info.items() if rows]
    cols = 5
    nrows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4 * cols, 3.2 * nrows), squeeze=False)
    labels = list(dict.fromkeys(label for _, rows in panels for label, _ in rows if label != FROZEN))
    colors = {label: plt.get_cmap("tab10")(i % 10) for i, label in enumerate(labels)}
    for ax, (title, rows) in zip(axes.flat, panels, strict=False):
        for label, pts in rows:
            xs = sorted(pts)
            stats = [t_interval(list(pts[x].values())) for x in xs]
            mean = [100 * m for m, _ in stats]
            half = [0.0 if math.isnan(h) else 100 * h for _, h in stats]
            frozen = label == FROZEN
            color = "black" if frozen else colors[label]
            ax.plot(xs, mean, marker="o", markersize=3, color=color, label=label, linestyle="--" if frozen else "-")
            if any(half):
                lo = [m - h for m, h in zip(mean, half, strict=True)]
                hi = [m + h for m, h in zip(mean, half, strict=True)]
                ax.fill_between(xs, lo, hi, color=color, alpha=0.12, linewidth=0)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("iteration")
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    handles, names = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=min(len(names), 7), fontsize=8)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(png, dpi=110)
    plt.close(fig)
