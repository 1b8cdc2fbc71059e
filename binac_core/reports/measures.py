"""What an iteration's (or an evaluation's) rows say about advantage collapse and about the critic. This is the one
place the study's measures are defined (sql/study_measures.sql recomputes them from the stored rows and refers here).

Plain functions over plain values, computed from exactly the rows that are stored (`binac_core/store/step_records.py`),
so MLflow and SQL over `trajectories` agree. A measure is None when no row (or group, or pair) is in its
denominator.

Advantage collapse (every benchmark):
- `zero_adv_frac`: share of a step's problems whose G first attempts all have the same reward, so that every GRPO
  advantage of the group is 0 (`losses.group_advantages`; a group of one counts too).
- `refine_zero_adv_frac`: the same at GRPO's group size for the second turn: per problem, ONE refinement per
  attempt (the one of `feedback_idx` 0) with its unshaped reward r1 (`refined_reward`), so G values per problem;
  the share of problems whose G values are all equal. It reads no shaping weight α and is not the actor's
  refinement groups (a problem's G·K shaped rewards, which almost never collapse): it says whether r1 would leave
  a GRPO-sized group without signal, to set beside `zero_adv_frac`.

The critic, on a benchmark with a `feedback_analysis` (the synthetic task), over feedback rows (one per feedback)
and their columns `first_wrong_step` (the attempt's first wrong written step, None when every step is right),
`feedback_step` (the step the feedback names as wrong, None when it names none) and `feedback_approves` (whether
it approves the attempt: `FeedbackAnalysis.approves`, "Looks correct."), filled by binac_core/store/records.py. "Every
step is right" is about the written steps only: such an attempt's answer line may still be wrong or missing.
- `critic_hits_first_error`: over feedback on attempts that have a first wrong step, whatever their final answer
  (a lucky right answer over wrong steps included), the share that names exactly that step.
- `critic_false_alarm`: over feedback on attempts whose every step is right, the share that names a step as
  wrong. "Check your work." and the self-correction instruction name none. The rule-based oracle scores 0 on it
  by construction.
- `critic_approves_wrong`: over feedback on attempts that have a first wrong step, the share that approves: the
  approval shortcut, measured directly. Rows without a `feedback_approves` value are left out.
- `critic_approves_right`: over feedback on attempts whose first answer is right (`attempt_reward` > 0), the share
  that approves; beside `critic_approves_wrong`, whether approval depends on the attempt (a critic that approves
  independently of it scores the same on both). The two populations are not complements: a lucky right answer
  over a wrong step is in both. Rows without a `feedback_approves` or an `attempt_reward` value are left out.
- A feedback's *oracle usefulness* u (`usefulness`) is 1 when it gives the oracle's verdict: it names exactly
  the first wrong step of an attempt that has one, or approves a right attempt whose every step is right, or, on
  an attempt whose every step is right but whose answer line is wrong or missing (the oracle says "Check your
  work."), neither approves nor names a step; else 0 (a feedback that both names a step and approves is judged
  by the rule of its attempt's kind).
- A *feedback group* is one attempt's K feedbacks (key (problem_id, sample_idx)); it is *mixed* when it holds
  both a u = 1 and a u = 0 feedback. `critic_useful_mixed_frac`: the share of feedback groups that are mixed.
  It reads no reward: it is the room for signal, what a critic reward could tell apart.
- `critic_signal`: for every pair (i useful, j useless) inside a mixed group, the sign of
  critic_reward_i − critic_reward_j (+1, −1, or 0 on a tie); the sum of the signs over the number of such pairs,
  pooled over all mixed groups of the step. In [−1, 1]: how often the critic's reward ranks useful feedback above
  useless feedback, net of the reverse. A reward independent of usefulness (pure noise) scores 0 in expectation,
  and extra noise in the reward pulls it towards 0, never up. It needs critic rewards (training rows only).
- `critic_signal_frac`: the share of feedback groups whose realised critic rewards differ (are not all equal),
  the groups that carry a gradient for the critic. Noise raises it: it is not a measure of signal (the penalty
  form's second draw r1⁺ makes rewards differ more often while `critic_signal` falls; tests/reports/test_measures.py).

The critic's reward information (every benchmark with critic rewards; the synthetic task for the last two), what
the critic's update can learn from one iteration, over feedback rows (one per feedback) with a `critic_reward`:
- `critic_flat_frac`: the share of feedback groups (an attempt's K feedbacks) whose critic rewards are all equal:
  every critic advantage of such a group is 0 (`losses.group_advantages`), so it carries no gradient; equal to
  1 − `critic_signal_frac`, stated in the direction the study reads (the flat groups).
- `critic_reward_spread`: the mean over feedback groups of the group's spread, max − min of its critic rewards
  (0 for a flat group): how far apart the rewards the critic is compared on lie.
- `critic_wrong_frac`: the share of feedback groups whose attempt is wrong (`attempt_reward` ≤ 0, the verifier's
  verdict), i.e. of the critic's batch: the attempts on which a hint can turn a wrong answer right.
- `hint_value` (synthetic task): over feedback on attempts that have a first wrong step, the mean r1
  (`refined_reward`) after feedback naming exactly that step minus the mean r1 after feedback naming another step
  (a feedback naming no step is in neither): what naming the right step is worth to the actor now. None when
  either set is empty.
- `r1_after_approving_right` (synthetic task): over feedback that approves (`feedback_approves`) an attempt whose
  first answer is right (`attempt_reward` > 0), the mean r1: whether approval of a right attempt is kept.
A single iteration of a small batch has few such rows; sql/critic_information.sql and the report's plot pool them
in bins of 10 iterations (the pooled shares and means of the bin's rows, not a mean of per-iteration values).

Critic health (every benchmark), over feedback rows with a verdict (the `feedback_verdict` column: `correct`,
`incorrect` or `none`, `binac_core.benchmarks.verdict`; NULL for a fixed instruction, so self_correct has none), judged
against the verifier on the first attempt (right: `attempt_reward` > 0; `critic_verdict_measures`):
- `verdict_accuracy`: the share of feedbacks whose verdict is the verifier's (`none` is never right);
- `approves_wrong`: over wrong first attempts, the share called `correct` (flattery). Not the synthetic task's
  `critic_approves_wrong`, which is over attempts with a wrong written step, whatever their answer (a lucky
  right answer over wrong steps counts there and not here);
- `flags_right`: over right first attempts, the share called `incorrect`;
- `verdict_missing`: the share with verdict `none`;
- `gain_when_flagged`, `gain_when_approved`: the mean r1 − r0 (`refined_reward − attempt_reward`) of the rows
  called `incorrect`, and `correct`: does a flag lead to a fix, does approval lead to a copy;
- `balanced_accuracy`: (share of wrong attempts called `incorrect` + share of right attempts called `correct`) / 2;
  0.5 for any verdict drawn independently of the attempt (chance), 1 for the verifier itself; `none` counts as
  wrong in both halves. None when either kind of attempt is absent.
The comparison and study reports give them with intervals over seeds; `binac evaluate` (one run) with Wilson
intervals over feedbacks.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

from binac_core.benchmarks.verdict import CORRECT, INCORRECT, NONE, verifier_verdict


def zero_adv_frac(keys: list, rewards: list[float]) -> float | None:
    """Share of groups (rows with the same key) whose rewards are all equal; None without rows."""
    groups: dict = defaultdict(set)
    for k, r in zip(keys, rewards, strict=True):
        groups[k].add(float(r))
    return sum(len(v) == 1 for v in groups.values()) / len(groups) if groups else None


def refine_zero_adv_frac(rows: list[dict]) -> float | None:
    """`refine_zero_adv_frac` of one step's feedback rows (columns `problem_id`, `feedback_idx`,
    `refined_reward`): `zero_adv_frac` of the problems' r1 values of their `feedback_idx` 0 refinements."""
    first = [r for r in rows if r["feedback_idx"] == 0]
    return zero_adv_frac([r["problem_id"] for r in first], [r["refined_reward"] for r in first])


def critic_signal_frac(keys: list, critic_rewards: list[float]) -> float | None:
    """Share of feedback groups whose critic rewards are not all equal; None without rows. Not a measure of
    signal (module docstring)."""
    flat = zero_adv_frac(keys, critic_rewards)
    return None if flat is None else 1.0 - flat


CRITIC_INFORMATION = (
    "critic_flat_frac",
    "critic_reward_spread",
    "critic_wrong_frac",
    "hint_value",
    "r1_after_approving_right",
)
"""The critic's reward information measures, in the order the report plots them (module docstring)."""


def critic_information(rows: list[dict]) -> dict[str, float | None]:
    """`critic_flat_frac`, `critic_reward_spread` and `critic_wrong_frac` (module docstring) of one step's feedback
    rows (columns `problem_id`, `sample_idx`, `critic_reward`, `attempt_reward`); rows without a critic reward are
    left out, all None without any."""
    groups: dict = defaultdict(list)
    wrong: dict = {}
    for r in rows:
        if r.get("critic_reward") is None:
            continue
        key = (r["problem_id"], r["sample_idx"])
        groups[key].append(float(r["critic_reward"]))
        wrong[key] = r["attempt_reward"] <= 0
    spreads = [max(g) - min(g) for g in groups.values()]
    return {
        "critic_flat_frac": _share(sum(s == 0 for s in spreads), len(spreads)),
        "critic_reward_spread": sum(spreads) / len(spreads) if spreads else None,
        "critic_wrong_frac": _share(sum(wrong.values()), len(wrong)),
    }


def hint_measures(rows: list[dict]) -> dict[str, float | None]:
    """`hint_value` and `r1_after_approving_right` (module docstring) of feedback rows with a first-error analysis
    (columns `first_wrong_step`, `feedback_step`, `feedback_approves`, `attempt_reward`, `refined_reward`)."""
    first, other, approved = [], [], []
    for r in rows:
        if r["first_wrong_step"] is not None and r["feedback_step"] is not None:
            (first if r["feedback_step"] == r["first_wrong_step"] else other).append(r["refined_reward"])
        if r.get("feedback_approves") and (r.get("attempt_reward") or 0) > 0:
            approved.append(r["refined_reward"])
    return {
        "hint_value": sum(first) / len(first) - sum(other) / len(other) if first and other else None,
        "r1_after_approving_right": sum(approved) / len(approved) if approved else None,
    }


def critic_error_measures(rows: list[dict]) -> dict[str, float | None]:
    """`critic_hits_first_error`, `critic_false_alarm`, `critic_approves_wrong` and `critic_approves_right` over
    feedback rows with a first-error analysis (columns `first_wrong_step`, `feedback_step` and, optionally,
    `feedback_approves` and `attempt_reward`: binac_core/store/records.py). Only `critic_approves_right` reads a
    reward (the first attempt's)."""
    return {k: _share(part, whole) for k, (part, whole) in critic_error_counts(rows).items()}


def critic_error_counts(rows: list[dict]) -> dict[str, tuple[int, int]]:
    """The counts behind `critic_error_measures`: per measure, (rows that count, rows in its denominator)."""
    hits, alarms, approvals, wrong, right, judged = 0, 0, 0, 0, 0, 0
    for r in rows:
        if r["first_wrong_step"] is None:
            right += 1
            alarms += r["feedback_step"] is not None
            continue
        wrong += 1
        hits += r["feedback_step"] == r["first_wrong_step"]
        if r.get("feedback_approves") is not None:
            judged += 1
            approvals += bool(r["feedback_approves"])
    return {
        "critic_hits_first_error": (hits, wrong),
        "critic_false_alarm": (alarms, right),
        "critic_approves_wrong": (approvals, judged),
        "critic_approves_right": approves_right_counts(rows),
    }


def critic_approves_right(rows: list[dict]) -> float | None:
    """Over feedback rows whose first attempt is right (`attempt_reward` > 0) and whose feedback was analysed
    (`feedback_approves` not None), the share that approves; None without such a row."""
    return _share(*approves_right_counts(rows))


def approves_right_counts(rows: list[dict]) -> tuple[int, int]:
    """(approving rows, rows) behind `critic_approves_right`."""
    judged = [
        bool(r["feedback_approves"])
        for r in rows
        if r.get("feedback_approves") is not None and (r.get("attempt_reward") or 0) > 0
    ]
    return sum(judged), len(judged)


def usefulness(row: dict) -> int | None:
    """A feedback row's oracle usefulness u (1 or 0, module docstring); None without a `feedback_approves`
    value (no analysis)."""
    if row.get("feedback_approves") is None:
        return None
    if row["first_wrong_step"] is not None:
        return int(row["feedback_step"] == row["first_wrong_step"])
    if row["attempt_reward"] > 0:
        return int(bool(row["feedback_approves"]))
    # every step right but the answer line wrong or missing: the oracle names no step and does not approve
    return int(not row["feedback_approves"] and row["feedback_step"] is None)


def critic_signal_measures(rows: list[dict]) -> dict[str, float | None]:
    """`critic_useful_mixed_frac` and `critic_signal` of one step's feedback rows (columns `problem_id`,
    `sample_idx`, the analysis columns, and `critic_reward`, which only `critic_signal` reads). Rows without an
    analysis are left out; `critic_signal` is None when a mixed group's rows lack critic rewards."""
    groups: dict = defaultdict(list)
    for r in rows:
        u = usefulness(r)
        if u is not None:
            groups[(r["problem_id"], r["sample_idx"])].append((u, r.get("critic_reward")))
    mixed = [g for g in groups.values() if len({u for u, _ in g}) == 2]
    out = {"critic_useful_mixed_frac": _share(len(mixed), len(groups)), "critic_signal": None}
    if any(c is None for g in mixed for _, c in g):
        return out
    signs = [(ci > cj) - (ci < cj) for g in mixed for ui, ci in g if ui == 1 for uj, cj in g if uj == 0]
    out["critic_signal"] = _share(sum(signs), len(signs))
    return out


CRITIC_HEALTH = (
    "verdict_accuracy",
    "balanced_accuracy",
    "approves_wrong",
    "flags_right",
    "verdict_missing",
    "gain_when_flagged",
    "gain_when_approved",
)
"""The critic health measures, in the order the reports show them (module docstring)."""


@dataclass(frozen=True)
class VerdictCounts:
    """Feedback rows with a verdict, counted: per verdict (`correct`, `incorrect`, `none`), how many on wrong and
    on right first attempts (the verifier's verdict), and the r1 − r0 of each."""

    wrong: Counter
    right: Counter
    gains: dict[str, list[float]]

    @property
    def judged(self) -> int:
        return self.wrong.total() + self.right.total()

    @property
    def matched(self) -> int:
        return self.wrong[INCORRECT] + self.right[CORRECT]

    @property
    def missing(self) -> int:
        return self.wrong[NONE] + self.right[NONE]


def verdict_counts(rows: list[dict]) -> VerdictCounts:
    """`VerdictCounts` of rows (columns `feedback_verdict`, `attempt_reward`, `refined_reward`); rows without a
    verdict are left out, and rows without a refinement from the gains."""
    wrong, right, gains = Counter(), Counter(), defaultdict(list)
    for r in rows:
        verdict = r.get("feedback_verdict")
        if verdict is None:
            continue
        (right if verifier_verdict(r["attempt_reward"]) == CORRECT else wrong)[verdict] += 1
        if r["refined_reward"] is not None:  # the attempt bank's rows have no refinement
            gains[verdict].append(r["refined_reward"] - r["attempt_reward"])
    return VerdictCounts(wrong, right, dict(gains))


def critic_verdict_measures(rows: list[dict]) -> dict[str, float | None]:
    """The critic health measures (`CRITIC_HEALTH`, module docstring) of feedback rows (`verdict_counts`)."""
    return verdict_measures(verdict_counts(rows))


def verdict_measures(c: VerdictCounts) -> dict[str, float | None]:
    """The critic health measures of counted rows."""
    caught, kept = _share(c.wrong[INCORRECT], c.wrong.total()), _share(c.right[CORRECT], c.right.total())

    def gain(verdict: str) -> float | None:
        found = c.gains.get(verdict, [])
        return sum(found) / len(found) if found else None

    return {
        "verdict_accuracy": _share(c.matched, c.judged),
        "balanced_accuracy": None if caught is None or kept is None else (caught + kept) / 2,
        "approves_wrong": _share(c.wrong[CORRECT], c.wrong.total()),
        "flags_right": _share(c.right[INCORRECT], c.right.total()),
        "verdict_missing": _share(c.missing, c.judged),
        "gain_when_flagged": gain(INCORRECT),
        "gain_when_approved": gain(CORRECT),
    }


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None
