"""`binac demo`'s summary: per method, the held-out measures at every evaluation, read from the stored eval rows of the
trajectory store (`trajectories`). They are printed as a table (step 0 -> last) and drawn as curves from that one set of
numbers, so the table and the picture cannot disagree (tests/reports/test_demo_summary.py compares them).

The measures, each with the number of problems behind it:
- `acc_single`: the actor alone (protocol `single`): mean reward of the first attempts, over the held-out problems;
- `acc_feedback`: actor -> the method's feedback source -> actor (protocol `feedback`): mean reward of the
  refinements, over the same problems;
- `critic_hits_first_error`: on the `feedback` rows whose first attempt has a wrong step, the share whose feedback
  names the first wrong step (`measures.critic_error_measures`, the study report's "hits first error"), over those
  wrong attempts; for grpo and fixed_critic that critic is the frozen base critic, for binac its trained one;
- `frozen_critic_hits_first_error`: the same, of the frozen base critic on the same attempts (protocol
  `feedback_frozen`, run for a method that trains its critic).
They are the numbers MLflow shows as `eval/<measure>` (`binac_core.reports.step_metrics.eval_metrics` computes
those from the same rows). The wrong first attempts behind the critic's hits are the current actor's: as it
learns, fewer and harder ones remain, so these hits move with the actor as well as with the critic.

Where the run scores its critic on the fixed attempt bank (`bank.enabled`, binac_core/rl/bank.py), also, on the
bank's `eval` half (the base actor's attempts, the same at every step; `bank_measures`' definitions):
- `bank_critic_hits_first_error`, `bank_critic_false_alarm`: the method's critic (protocol `bank`): the share of
  the bank's attempts with a wrong step whose feedback names the first one, and of those whose every step is
  right whose feedback names a step anyway;
- `bank_frozen_critic_hits_first_error`, `bank_frozen_critic_false_alarm`: the same of the frozen base critic
  (protocol `bank_frozen`). They are MLflow's `bank_eval/<critic>_<measure>`.
"""

from __future__ import annotations

from pathlib import Path

from binac_core.foundation.workspace import Workspace
from binac_core.reports.bank_measures import bank_measures
from binac_core.reports.measures import critic_error_measures
from binac_core.reports.plots import METHOD_ORDER, method_color
from binac_core.rl.kinds import EvalProtocol
from binac_core.store import storage

BANK_SPLIT = "bank_eval"
"""The bank half the demo reads (the results half; `val` is for choices)."""
BANK_CRITICS = {EvalProtocol.BANK: "bank_critic", EvalProtocol.BANK_FROZEN: "bank_frozen_critic"}
"""Bank protocol -> the prefix of its measures."""
MEASURES = (
    "acc_single",
    "acc_feedback",
    "critic_hits_first_error",
    "frozen_critic_hits_first_error",
    "bank_critic_hits_first_error",
    "bank_frozen_critic_hits_first_error",
    "bank_critic_false_alarm",
    "bank_frozen_critic_false_alarm",
)
LABELS = {
    "acc_single": "held-out acc_single",
    "acc_feedback": "held-out acc_feedback",
    "critic_hits_first_error": "critic hits first error",
    "frozen_critic_hits_first_error": "frozen critic hits first error",
    "bank_critic_hits_first_error": "bank: critic hits first error",
    "bank_frozen_critic_hits_first_error": "bank: frozen critic hits",
    "bank_critic_false_alarm": "bank: critic false alarm",
    "bank_frozen_critic_false_alarm": "bank: frozen critic false alarm",
}
PROTOCOLS = (EvalProtocol.SINGLE, EvalProtocol.FEEDBACK, EvalProtocol.FEEDBACK_FROZEN, *BANK_CRITICS)
COLUMNS = (
    "attempt_reward",
    "refined_reward",
    "first_wrong_step",
    "feedback_step",
    "feedback_approves",
    "feedback_verdict",
)

Curves = dict[str, dict[int, dict[str, tuple[float, int]]]]
"""{method: {step: {measure: (value in [0, 1], problems behind it)}}}; a measure without rows is absent."""


def held_out_curves(ws: Workspace, runs: dict[str, str]) -> Curves:
    """The measures of the module docstring at every evaluated step of each run ({method: run id}), from the
    stored eval rows."""
    con = storage.connect(ws)
    try:
        cur = con.execute(
            f"SELECT run_id, protocol, step, {', '.join(COLUMNS)} FROM trajectories WHERE run_id IN "
            f"({', '.join('?' for _ in runs)}) AND protocol IN ({', '.join('?' for _ in PROTOCOLS)}) "
            "AND split IN ('eval', ?) ORDER BY run_id, step, protocol, problem_id, sample_idx",
            [*runs.values(), *(p.value for p in PROTOCOLS), BANK_SPLIT],
        )
        names = [d[0] for d in cur.description]
        rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    finally:
        con.close()
    method_of = {rid: m for m, rid in runs.items()}
    grouped: dict[tuple[str, int, str], list[dict]] = {}
    for r in rows:
        grouped.setdefault((method_of[r["run_id"]], r["step"], r["protocol"]), []).append(r)
    out: Curves = {m: {} for m in runs}
    for (method, step, protocol), rr in grouped.items():
        at = out[method].setdefault(step, {})
        if protocol in BANK_CRITICS:
            for name, e in bank_measures(rr).items():
                if name in ("hits_first_error", "false_alarm") and e is not None:
                    at[f"{BANK_CRITICS[protocol]}_{name}"] = (e.value, e.n)
            continue
        wrong = sum(r["first_wrong_step"] is not None for r in rr)
        hits = critic_error_measures(rr)["critic_hits_first_error"]
        if protocol == EvalProtocol.SINGLE:
            at["acc_single"] = (sum(r["attempt_reward"] for r in rr) / len(rr), len(rr))
        elif protocol == EvalProtocol.FEEDBACK:
            at["acc_feedback"] = (sum(r["refined_reward"] for r in rr) / len(rr), len(rr))
            if hits is not None:
                at["critic_hits_first_error"] = (hits, wrong)
        elif hits is not None:
            at["frozen_critic_hits_first_error"] = (hits, wrong)
    return out


def _ordered(curves: Curves) -> list[str]:
    return sorted(curves, key=lambda m: (METHOD_ORDER.index(m) if m in METHOD_ORDER else len(METHOD_ORDER), m))


def _cell(at: dict, measure: str) -> str:
    if measure not in at:
        return "–"
    value, n = at[measure]
    return f"{100 * value:.1f} (n={n})"


def table(curves: Curves) -> list[str]:
    """The printed table: per method and measure drawn (`drawn_measures`), every evaluation from step 0 to the
    last, in %, each with the problems behind it (held-out problems; for a critic's measure, the attempts it is
    counted on)."""
    measures = drawn_measures(curves)
    banked = "bank_critic_hits_first_error" in measures
    lines = [
        "held-out evaluations, step 0 -> last (in %; n: held-out problems, for a critic's measure the attempts it "
        + (
            "is counted on; bank: the base actor's fixed attempts at held-out problems, the same at every step, "
            "scored for the method that trains its critic):"
            if banked
            else "is counted on; grpo's and fixed_critic's critic is the frozen one):"
        )
    ]
    width = max(len(LABELS[m]) for m in measures)
    for method in _ordered(curves):
        steps = sorted(curves[method])
        lines.append(f"  {method} (iterations {', '.join(map(str, steps))}):")
        for measure in measures:
            if not any(measure in curves[method][s] for s in steps):
                continue
            cells = " -> ".join(f"{_cell(curves[method][s], measure):>12}" for s in steps)
            lines.append(f"    {LABELS[measure]:<{width}}  {cells}")
    return lines


def series(curves: Curves, method: str, measure: str) -> tuple[list[int], list[float]]:
    """(steps, values in %) of one curve: what the table's row reads at its ends and the picture draws."""
    steps = [s for s in sorted(curves[method]) if measure in curves[method][s]]
    return steps, [100 * curves[method][s][measure][0] for s in steps]


PANELS = (
    ("acc_single", "held-out acc_single (actor alone)"),
    ("acc_feedback", "held-out acc_feedback (after one feedback)"),
    ("critic_hits_first_error", "critic names the first wrong step (dashed: frozen critic)"),
)
BANK_PANELS = (
    ("bank_critic_hits_first_error", "bank: critic names the first wrong step (dashed: frozen)"),
    ("bank_critic_false_alarm", "bank: false alarm, steps all right (dashed: frozen)"),
)
"""Drawn where the runs scored the bank, in place of the third panel (whose attempts move with the actor)."""
FROZEN = {
    "critic_hits_first_error": "frozen_critic_hits_first_error",
    "bank_critic_hits_first_error": "bank_frozen_critic_hits_first_error",
    "bank_critic_false_alarm": "bank_frozen_critic_false_alarm",
}
"""A critic measure -> the frozen base critic's same measure on the same attempts (a dashed curve)."""


def drawn_measures(curves: Curves) -> list[str]:
    """The measures `plot` draws and `table` prints: each panel's, with the frozen critic's beside a critic's."""
    return [k for m, _ in panels(curves) for k in (m, *([FROZEN[m]] if m in FROZEN else []))]


def panels(curves: Curves) -> tuple[tuple[str, str], ...]:
    """The panels `plot` draws: accuracy twice, then the critic on the bank where any run scored it, else on the
    evaluation's wrong first attempts."""
    banked = any("bank_critic_hits_first_error" in at for c in curves.values() for at in c.values())
    return PANELS[:2] + (BANK_PANELS if banked else PANELS[2:])


def _label(curves: Curves, method: str, kind: str, measure: str) -> str:
    """A curve's legend entry: in a critic's panel, whose critic it is."""
    if measure not in FROZEN:
        return method
    if kind != measure:
        return f"{method}: frozen critic, same attempts"
    trains = any(FROZEN[measure] in at for at in curves[method].values())
    return f"{method}: {'its trained' if trains else 'the frozen'} critic"


def plot(curves: Curves, path: Path, title: str = "") -> dict[tuple[str, str], tuple[list[int], list[float]]]:
    """The held-out curves, one per method in each panel (`panels`; the frozen critic's dashed in a critic's
    panel), saved as a PNG at `path`; returns what was drawn, {(method, measure): (steps, values in %)}, read back
    from the figure's lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = panels(curves)
    fig, axes = plt.subplots(1, len(shown), figsize=(4.4 * len(shown), 3.8), sharex=True)
    drawn = {}
    for ax, (measure, heading) in zip(axes, shown, strict=True):
        for method in _ordered(curves):
            kinds = [measure] + ([FROZEN[measure]] if measure in FROZEN else [])
            for kind in kinds:
                xs, ys = series(curves, method, kind)
                if not xs:
                    continue
                frozen = kind != measure
                (line,) = ax.plot(
                    xs,
                    ys,
                    marker="o",
                    linestyle="--" if frozen else "-",
                    color=method_color(method),
                    alpha=0.6 if frozen else 1.0,
                    label=_label(curves, method, kind, measure),
                )
                line.set_gid(f"{method}|{kind}")
                if measure in FROZEN:  # the attempts the last value is counted on
                    n = curves[method][xs[-1]][kind][1]
                    ax.annotate(f"n={n}", (xs[-1], ys[-1]), textcoords="offset points", xytext=(4, 4), fontsize=7)
        ax.set_title(heading, fontsize=10)
        ax.set_xlabel("iteration")
        ax.xaxis.get_major_locator().set_params(integer=True)
        last = max((max(c) for c in curves.values() if c), default=0)
        ax.set_xlim(-0.5, last * 1.12 + 1)  # room for the n= labels right of the last points
        ax.set_ylim(0, 100)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    axes[0].set_ylabel("%")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    for ax in axes:
        for line in ax.get_lines():
            method, kind = line.get_gid().split("|")
            drawn[(method, kind)] = ([int(x) for x in line.get_xdata()], [float(y) for y in line.get_ydata()])
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return drawn
