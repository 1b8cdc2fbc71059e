"""The fourth edition's primary endpoint (studies/sparse-feedback-v4.design.md): how far a run's critic is ahead of
the frozen base critic on the fixed attempt bank, with false alarms counted against it.

- A critic's *discrimination* on one bank split at one evaluation: J = `hits_first_error` − `false_alarm`
  (`binac_core/reports/bank_measures.py`: the share of the bank's attempts with a wrong written step whose
  feedback names the first one, minus the share of attempts whose every written step is right whose feedback
  names a step anyway). A critic naming a step on every attempt scores its hit rate − 1; one naming none, 0.
  J is Youden's index (Youden 1950) of "the feedback names a step" as a test for "the attempt has a wrong step",
  with a hit counted only where the named step is the first wrong one.
- A run's *margin* on `measure` (`MEASURES`): the method's critic's value minus the frozen base critic's on the
  same split, averaged over the run's evaluations in the second half of its iterations (`window`: the steps of
  `run_values.curve_steps` from `iterations / 2` on; 30, 40, 50, 60 of 60). `critic_margin` is the margin on J;
  the others are shown beside it, never instead of it.
- The split read is the study's evaluation split (`task.eval_split`): a pilot reads the bank's `val` half, a main
  study its `eval` half.

A run without every window evaluation of both critics has no value (None), as `run_values.area`. Nothing here
judges a result."""

from __future__ import annotations

import statistics

from binac_core.studies.critic_curves import bank_series
from binac_core.studies.run_values import curve_steps

MEASURES = ("discrimination", "hits_first_error", "false_alarm", "verdict_balanced_accuracy")
"""The margins a report shows: J (the endpoint), then its two parts and the verdict's balanced accuracy."""
ENDPOINT = "critic_margin"
"""The `select` metric naming the margin on `discrimination` (study files; `SelectRule.BANK_MARGIN_PAIRED`)."""


def bank_split(st) -> str:
    """The bank half a study reads: its evaluation split (`val` or `eval`)."""
    return st.config().task.eval_split


def window(st) -> list[int]:
    """The evaluations the margin averages: step 0, every `eval_every` iterations and the last, from half the
    iterations on."""
    return [s for s in curve_steps(st) if 2 * s >= st.iterations]


def critic_values(r: dict, split: str, critic: str, measure: str) -> dict[int, float]:
    """step -> `critic`'s (`critic` or `frozen_critic`) value of `measure` on the bank's `split` half; for
    `discrimination`, hits_first_error − false_alarm where both are logged."""
    if measure != "discrimination":
        return bank_series(r, split, critic, measure)
    hits = bank_series(r, split, critic, "hits_first_error")
    alarms = bank_series(r, split, critic, "false_alarm")
    return {s: hits[s] - alarms[s] for s in hits if s in alarms}


def run_margin(r: dict, split: str, steps: list[int], measure: str = "discrimination") -> float | None:
    """The run's critic minus the frozen critic on `measure`, averaged over `steps`; None when a step lacks
    either value."""
    mine = critic_values(r, split, "critic", measure)
    frozen = critic_values(r, split, "frozen_critic", measure)
    if not steps or any(s not in mine or s not in frozen for s in steps):
        return None
    return statistics.fmean(mine[s] - frozen[s] for s in steps)


def margins(st, runs: list[dict], measure: str = "discrimination") -> dict[int, float]:
    """seed -> `run_margin` of each run of one arm that has every window step."""
    split, steps = bank_split(st), window(st)
    return {r["seed"]: m for r in runs if (m := run_margin(r, split, steps, measure)) is not None}
