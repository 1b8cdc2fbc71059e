"""The critic's measures on the fixed attempt bank (binac_core/rl/bank.py), each with its 95 % interval, from the bank's
stored feedback rows. They use the definitions of binac_core/reports/measures.py, so a measure means one thing
everywhere.

- `hits_first_error`, `false_alarm`, `approves_wrong`, `approves_right`: the synthetic task's first-error measures
  (`critic_hits_first_error` ... of `measures.critic_error_counts`), with Wilson intervals (Wilson 1927) over the
  rows in their denominators. Their populations are those of measures.py (attempts with / without a wrong written
  step; right first answers), near but not exactly the bank's right and wrong attempts.
- `verdict_balanced_accuracy`: the critic health measure `balanced_accuracy` (`measures.verdict_measures`: the
  feedback's verdict against the verifier, i.e. against the bank's right / wrong split), with the interval of
  `critic_health.balanced_accuracy_interval` (the mean of its two halves' Wilson bounds).

Logged at every evaluation as `bank_<split>/<critic>_<measure>` with `_lo` and `_hi` (<split>: val or eval;
<critic>: `critic`, the method's, or `frozen_critic`, the frozen base critic's); sql/bank_measures.sql recomputes
the values from the stored rows.
"""

from __future__ import annotations

from dataclasses import dataclass

from binac_core.foundation.stats import wilson_interval
from binac_core.reports.critic_health import balanced_accuracy_interval
from binac_core.reports.measures import critic_error_counts, verdict_counts, verdict_measures

BANK_MEASURES = ("hits_first_error", "false_alarm", "approves_wrong", "approves_right", "verdict_balanced_accuracy")
"""The bank's measures, in the order reports show them (module docstring)."""


@dataclass(frozen=True)
class Estimate:
    """A measure's value, its 95 % interval (low, high) and the rows behind it (its denominator; for the
    balanced accuracy, both halves' together)."""

    value: float
    low: float
    high: float
    n: int


def bank_measures(rows: list[dict]) -> dict[str, Estimate | None]:
    """Each of `BANK_MEASURES` of one critic's feedback rows on one bank split (columns `first_wrong_step`,
    `feedback_step`, `feedback_approves`, `feedback_verdict`, `attempt_reward`, `refined_reward`); None where
    its denominator is empty."""
    out: dict[str, Estimate | None] = {}
    for name, (part, whole) in critic_error_counts(rows).items():
        out[name.removeprefix("critic_")] = (
            Estimate(part / whole, *wilson_interval(part, whole), whole) if whole else None
        )
    c = verdict_counts(rows)
    balanced = verdict_measures(c)["balanced_accuracy"]
    out["verdict_balanced_accuracy"] = (
        None if balanced is None else Estimate(balanced, *balanced_accuracy_interval(c), c.judged)
    )
    return out


def bank_metrics(split: str, critic: str, rows: list[dict]) -> dict[str, float]:
    """`bank_measures` of `rows` as MLflow metrics `bank_<split>/<critic>_<measure>`, `..._lo`, `..._hi`
    (`critic`: `critic` or `frozen_critic`); measures without a value are left out."""
    out = {}
    for name, e in bank_measures(rows).items():
        if e is not None:
            key = f"bank_{split}/{critic}_{name}"
            out |= {key: e.value, f"{key}_lo": e.low, f"{key}_hi": e.high}
    return out
