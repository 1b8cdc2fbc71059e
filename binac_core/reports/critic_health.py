"""The critic health table the reports share (measures: `binac_core.reports.measures.critic_verdict_measures`).

`health_table` renders one row per method (or arm) from per-seed values of the held-out `eval/critic/<measure>`
metrics: the comparison report (`binac_core.reports.report`) and the study report (`binac_core.studies.study_report`) give mean ±
95 % t-interval over seeds; `binac evaluate` (one run, `health_of_rows`) gives Wilson intervals over feedbacks.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from binac_core.benchmarks.verdict import CORRECT, INCORRECT
from binac_core.foundation.stats import per_seed, t_interval, wilson_interval
from binac_core.reports.measures import CRITIC_HEALTH, VerdictCounts, verdict_counts, verdict_measures

GAINS = ("gain_when_flagged", "gain_when_approved")
"""The two measures in reward points (r1 − r0), not shares."""

HEADER = (
    "verdict accuracy",
    "balanced accuracy",
    "approves wrong",
    "flags right",
    "verdict missing",
    "gain when flagged",
    "gain when approved",
)

EXPLAINED = (
    "Critic health (binac_core/reports/measures.py), on the held-out `feedback` protocol's feedback, against the verifier "
    "on the first attempt, in %: verdict accuracy = verdicts that are the verifier's; balanced accuracy = (wrong "
    "attempts called incorrect + right attempts called correct) / 2, 50 is chance; approves wrong = wrong attempts "
    "called correct (flattery); flags right = right attempts called incorrect; verdict missing = no verdict or a "
    "contradictory one; gain when flagged / approved = mean r1 − r0 (points) after a feedback calling the attempt "
    "incorrect / correct. A fixed instruction gives no verdict (–)."
)


def _seed_cell(values: list[float], gain: bool) -> str:
    """mean ± 95 % t-interval in %, then the per-seed values in the order given where they split
    (`stats.per_seed`)."""
    if not values:
        return "–"
    mean, half = t_interval(values)
    sign = "+" if gain else ""
    if math.isnan(half):
        return f"{100 * mean:{sign}.1f}"
    return f"{100 * mean:{sign}.1f} ± {100 * half:.1f}{per_seed(values, sign=gain)}"


def health_table(rows: list[tuple[str, Callable[[str], list[float]]]]) -> list[str]:
    """A markdown table, one line per (name, measure -> per-seed values) in `rows`; cells are mean ± 95 %
    t-interval over seeds, in % (the gains in points), with the per-seed values where the seeds split."""
    lines = ["| method | " + " | ".join(HEADER) + " |", "| --- |" + " --- |" * len(HEADER)]
    for name, values in rows:
        lines.append(f"| {name} | " + " | ".join(_seed_cell(values(k), k in GAINS) for k in CRITIC_HEALTH) + " |")
    return lines


def health_of_rows(rows: list[dict]) -> dict[str, str]:
    """measure -> a cell with its 95 % interval, of one run's feedback rows: the shares with Wilson intervals over
    the feedbacks in their denominators (the count given); the balanced accuracy with the mean of its two halves'
    Wilson bounds; the gains (means of r1 − r0) with their count. Rows without a verdict are left out."""
    c = verdict_counts(rows)
    values = verdict_measures(c)
    cells = {
        "verdict_accuracy": _wilson(c.matched, c.judged),
        "approves_wrong": _wilson(c.wrong[CORRECT], c.wrong.total()),
        "flags_right": _wilson(c.right[INCORRECT], c.right.total()),
        "verdict_missing": _wilson(c.missing, c.judged),
        "balanced_accuracy": "–",
    }
    if values["balanced_accuracy"] is not None:
        lo, hi = balanced_accuracy_interval(c)
        cells["balanced_accuracy"] = f"{100 * values['balanced_accuracy']:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]"
    for k, verdict in (("gain_when_flagged", INCORRECT), ("gain_when_approved", CORRECT)):
        n = len(c.gains.get(verdict, []))
        cells[k] = "–" if values[k] is None else f"{100 * values[k]:+.1f} (n={n})"
    return cells


def balanced_accuracy_interval(c: VerdictCounts) -> tuple[float, float]:
    """The interval of the balanced accuracy of counted rows: the mean of its two halves' 95 % Wilson bounds (wrong
    attempts called `incorrect`, right attempts called `correct`). Where both halves' intervals cover their shares
    (at least 90 % of the time, by Bonferroni) it covers the balanced accuracy."""
    a_lo, a_hi = wilson_interval(c.wrong[INCORRECT], c.wrong.total())
    b_lo, b_hi = wilson_interval(c.right[CORRECT], c.right.total())
    return (a_lo + b_lo) / 2, (a_hi + b_hi) / 2


def stored_health(ws, run_id: str) -> dict[str, dict[str, str]]:
    """protocol -> `health_of_rows` of a run's stored held-out rows with verdicts (`binac evaluate` prints it), read
    back from the trajectory store (`binac_core.store.storage`); empty when the run has none (no critic)."""
    from binac_core.store import storage

    con = storage.connect(ws)
    try:
        df = con.execute(
            "SELECT protocol, feedback_verdict, attempt_reward, refined_reward FROM trajectories "
            "WHERE run_id = ? AND split = 'eval' AND feedback_verdict IS NOT NULL",
            [run_id],
        ).df()
    finally:
        con.close()
    rows = df.to_dict("records")
    return {p: health_of_rows([r for r in rows if r["protocol"] == p]) for p in sorted({r["protocol"] for r in rows})}


def _wilson(part: int, whole: int) -> str:
    if not whole:
        return "–"
    lo, hi = wilson_interval(part, whole)
    return f"{100 * part / whole:.1f} [{100 * lo:.1f}, {100 * hi:.1f}] ({part}/{whole})"
