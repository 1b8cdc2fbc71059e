"""The mechanism's preconditions, measured on a base model before any RL run, and the gates that judge them
(docs/results-testbed.md).

A learned critic can only matter when (G1) the actor lacks a capability that feedback can supply, (G2) the actor
uses what a hint says, (G3) the base critic has some skill to build on and room to grow, and (G4) the hint's
content, not merely a verifier's approval, carries the oracle's value. `binac_core.studies.regimes.measure_base`
samples the base model's attempts and second turns; this module turns one record per first attempt
(`AttemptRecord`) into the measures below, each with a 95 % interval, and judges them (`GATES`, `failures`).

Intervals. A proportion over independent problems (greedy accuracy, the all-wrong share) gets Wilson's interval.
Every measure over attempts is a ratio of sums whose attempts are clustered by problem (G attempts of one
problem share its difficulty), so it gets a percentile interval from a cluster bootstrap: problems drawn with
replacement (`BOOTSTRAP_REPS` draws, seeded), the ratio recomputed per draw. A gate reads its measure's
conservative end: the lower end for "at least" and "above", the upper end for "at most".

The measures (populations in parentheses):
- `greedy_single`: single-turn accuracy at temperature 0, one attempt per problem (G1);
- `all_wrong`: share of problems whose G attempts at the training temperature are all wrong (G1);
- `fix_first_error`, `fix_other_step`, `fix_self_correct`: the share of attempts right after a hint naming the
  first wrong step, after a hint naming another step drawn uniformly among the attempt's locally right steps
  (`Step.locally_right`, the first wrong one excluded), and after the fixed self-correction instruction (wrong
  attempts that have a first wrong step and another locally right step: the same attempts for all three);
- `hint_gap` = `fix_first_error` − `fix_other_step`, paired (G2, at least 20 points);
- `hint_over_self_correct` = `fix_first_error` / `fix_self_correct` (G2, at least 2; infinite when the
  self-correction fixes none);
- `critic_hits` (attempts with a first wrong step): the base critic names exactly that step;
  `critic_hits_chance`: the hit rate of the same feedbacks re-paired with the other attempts of the population
  (exactly: for each feedback, the share of the other attempts whose first wrong step it names), what a critic
  that ignores the attempt gets; `critic_over_chance` = `critic_hits` − `critic_hits_chance` (G3, above 0);
  `critic_hits_of_oracle` = `critic_hits` / the oracle's hit rate on the same attempts (G3, at most 0.5);
- `approves_right`, `approves_wrong` (right and wrong first attempts by the verifier): the base critic approves;
  `approval_gap` = their difference (G3, above 0);
- `oracle_over_verifier` (all attempts): the oracle's second-turn accuracy minus that of a verifier-only critic
  (approve right attempts, the self-correction instruction on wrong ones), paired per attempt (G4, at least 5
  points).
It computes nothing about a trained critic and reads no rewards of RL runs.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from dataclasses import dataclass

from binac_core.foundation.stats import wilson_interval

BOOTSTRAP_REPS = 2000
"""Cluster-bootstrap draws per measure (the percentile ends move by well under a point between seeds)."""


@dataclass(frozen=True)
class AttemptRecord:
    """One first attempt of the base model and its second turns after each feedback source (rewards in {0, 1})."""

    problem_id: str
    right: bool
    """The verifier's verdict on the first attempt."""
    first_wrong_step: int | None
    """The attempt's first wrong written step (None when every step is right)."""
    has_other_step: bool
    """Whether a locally right step other than the first wrong one exists (G2's other-step hint needs one)."""
    critic_step: int | None
    """The step the base critic's feedback names (None: it names none)."""
    critic_approves: bool
    oracle_step: int | None
    """The step the oracle names (the first wrong step by construction; measured, not assumed)."""
    after_oracle: float
    after_other_step: float | None
    """None when `has_other_step` is false (no hint was written)."""
    after_self_correct: float
    after_approval: float


@dataclass(frozen=True)
class Estimate:
    """A measure with its 95 % interval and the count of units in its denominator."""

    value: float
    low: float
    high: float
    n: int

    def to_json(self) -> dict:
        return {"value": self.value, "low": self.low, "high": self.high, "n": self.n}


def wilson(successes: int, n: int) -> Estimate:
    low, high = wilson_interval(successes, n)
    return Estimate(successes / n if n else math.nan, low, high, n)


def cluster_bootstrap(records: list[AttemptRecord], parts, combine, seed: int = 0) -> Estimate:
    """`combine(*sums)` of the sums over records of each `parts` function (record -> float), with its cluster-
    bootstrap percentile interval (problems resampled with replacement; a draw whose value is undefined, an empty
    denominator, is left out). `n` is the number of records; no records (a base without one attempt of the
    population) give NaN for the value and both ends, which no gate passes."""
    import numpy as np

    problems = sorted({r.problem_id for r in records})
    if not problems:
        return Estimate(math.nan, math.nan, math.nan, 0)
    index = {p: i for i, p in enumerate(problems)}
    sums = np.zeros((len(parts), len(problems)))
    for r in records:
        for k, part in enumerate(parts):
            sums[k, index[r.problem_id]] += part(r)
    with np.errstate(divide="ignore", invalid="ignore"):
        value = float(combine(*sums.sum(axis=1)))
        rng = np.random.default_rng(seed)
        counts = rng.multinomial(len(problems), np.full(len(problems), 1 / len(problems)), size=BOOTSTRAP_REPS)
        drawn = combine(*(counts @ sums.T).T)
    with warnings.catch_warnings():  # every draw undefined (e.g. no wrong attempt): NaN ends, said by NaN alone
        warnings.simplefilter("ignore", RuntimeWarning)
        low, high = np.nanpercentile(drawn, [2.5, 97.5])
    return Estimate(value, float(low), float(high), len(records))


def _ratio(num, den):
    return num / den


def _difference(a_num, a_den, b_num, b_den):
    return a_num / a_den - b_num / b_den


def measures(
    records: list[AttemptRecord], greedy_right: int, greedy_n: int, all_wrong: int, problems: int, seed: int = 0
) -> dict[str, Estimate]:
    """Every precondition measure of the module docstring, from one record per first attempt, the greedy attempts'
    count of right answers and the count of problems whose G attempts are all wrong."""
    g2 = [r for r in records if not r.right and r.first_wrong_step is not None and r.has_other_step]
    stepped = [r for r in records if r.first_wrong_step is not None]
    chance = _repaired_chance(stepped)
    one = lambda r: 1.0  # noqa: E731 - a denominator part

    def hit(r):
        return float(r.critic_step == r.first_wrong_step)

    def oracle_hit(r):
        return float(r.oracle_step == r.first_wrong_step)

    def verifier_only(r):
        return r.after_approval if r.right else r.after_self_correct

    boot = lambda recs, parts, combine: cluster_bootstrap(recs, parts, combine, seed)  # noqa: E731
    out = {
        "greedy_single": wilson(greedy_right, greedy_n),
        "all_wrong": wilson(all_wrong, problems),
        "fix_first_error": boot(g2, [lambda r: r.after_oracle, one], _ratio),
        "fix_other_step": boot(g2, [lambda r: r.after_other_step, one], _ratio),
        "fix_self_correct": boot(g2, [lambda r: r.after_self_correct, one], _ratio),
        "hint_gap": boot(g2, [lambda r: r.after_oracle - r.after_other_step, one], _ratio),
        "hint_over_self_correct": boot(g2, [lambda r: r.after_oracle, lambda r: r.after_self_correct], _ratio),
        "critic_hits": boot(stepped, [hit, one], _ratio),
        "critic_hits_chance": boot(stepped, [lambda r: chance[id(r)], one], _ratio),
        "critic_over_chance": boot(stepped, [lambda r: hit(r) - chance[id(r)], one], _ratio),
        "critic_hits_of_oracle": boot(stepped, [hit, oracle_hit], _ratio),
        "approves_right": boot([r for r in records if r.right], [lambda r: float(r.critic_approves), one], _ratio),
        "approves_wrong": boot([r for r in records if not r.right], [lambda r: float(r.critic_approves), one], _ratio),
        "approval_gap": boot(
            records,
            [
                lambda r: float(r.right and r.critic_approves),
                lambda r: float(r.right),
                lambda r: float(not r.right and r.critic_approves),
                lambda r: float(not r.right),
            ],
            _difference,
        ),
        "oracle_over_verifier": boot(records, [lambda r: r.after_oracle - verifier_only(r), one], _ratio),
    }
    return out


def _repaired_chance(stepped: list[AttemptRecord]) -> dict[int, float]:
    """For each record (by id), the share of the OTHER records whose first wrong step its critic names: the hit
    rate of its feedback re-paired with every other attempt of the population, averaged exactly."""
    firsts = Counter(r.first_wrong_step for r in stepped)
    n = len(stepped)
    return {
        id(r): (
            (firsts[r.critic_step] - (r.critic_step == r.first_wrong_step)) / (n - 1)
            if r.critic_step is not None and n > 1
            else 0.0
        )
        for r in stepped
    }


@dataclass(frozen=True)
class Gate:
    measure: str
    """The measure (`measures`) it reads."""
    kind: str
    """`at_least` (lower end >= threshold), `above` (lower end > threshold) or `at_most` (upper end <= threshold)."""
    label: str
    """Which precondition, in words."""

    def holds(self, e: Estimate, threshold: float) -> bool:
        if self.kind == "at_most":
            return e.high <= threshold
        return e.low > threshold if self.kind == "above" else e.low >= threshold

    @property
    def end(self) -> str:
        return "upper" if self.kind == "at_most" else "lower"


GATES = {
    "greedy_single_at_most": Gate("greedy_single", "at_most", "G1 (a capability gap): greedy single-turn accuracy"),
    "all_wrong_frac_at_least": Gate("all_wrong", "at_least", "G1 (a capability gap): all-wrong groups of G"),
    "hint_gap_at_least": Gate(
        "hint_gap",
        "at_least",
        "G2 (the actor uses the hint): fix rate after the first-error hint minus after another step's",
    ),
    "hint_over_self_correct_at_least": Gate(
        "hint_over_self_correct",
        "at_least",
        "G2 (the actor uses the hint): fix rate after the first-error hint over after the self-correction instruction",
    ),
    "critic_over_chance_above": Gate(
        "critic_over_chance", "above", "G3 (critic skill): first-error hits minus the re-paired chance"
    ),
    "critic_hits_of_oracle_at_most": Gate(
        "critic_hits_of_oracle", "at_most", "G3 (room to grow): first-error hits over the oracle's"
    ),
    "approval_gap_above": Gate(
        "approval_gap", "above", "G3 (critic skill): approval of right attempts minus of wrong ones"
    ),
    "oracle_over_verifier_at_least": Gate(
        "oracle_over_verifier", "at_least", "G4 (the hint carries value): oracle minus a verifier-only critic"
    ),
}
"""The precondition gates a study file or `scripts/base_checks.py` can apply, by name; each reads one measure."""


def failures(regime: str, difficulty: int, measured: dict[str, dict], gates: dict[str, float]) -> list[str]:
    """One line per gate of `gates` (name -> threshold, GATES) that `measured` (`measures`' output as JSON) fails."""
    out = []
    for name, threshold in gates.items():
        gate = GATES[name]
        e = Estimate(**measured[gate.measure])
        if not gate.holds(e, threshold):
            out.append(
                f"regime {regime} (difficulty {difficulty}): gate {name} {threshold:g} fails: {gate.label} "
                f"{_fmt(e.value)} [{_fmt(e.low)}, {_fmt(e.high)}] (its {gate.end} end is read)"
            )
    return out


def _fmt(x: float) -> str:
    return f"{x:.3f}" if math.isfinite(x) else str(x)
