"""What an iteration's (or an evaluation's) rows say about advantage collapse and about the critic.

Plain functions over plain values, computed from exactly the rows that are stored (`binac_core/step_records.py`), so MLflow
and SQL over `trajectories` agree:

- `zero_adv_frac`: share of advantage groups whose rewards are all equal, so that every advantage in them is 0
  (`losses.group_advantages`; a group of one counts too): GRPO's "advantage collapse" made visible. For first
  attempts a group is a problem's G attempts; for refinements it is a problem's G·K refinements, scored with the
  actor's shaped second-turn reward (`batches.refinement_rewards`), the groups the actor's update uses.
- `critic_signal_frac`: share of feedback groups (one attempt's K feedbacks) whose critic rewards are not all
  equal: only those carry a gradient for the critic.
- `critic_hits_first_error` / `critic_false_alarm` (on a benchmark with a `feedback_analysis`, the synthetic
  task: they need the first wrong step): on wrong attempts whose written steps contain an error, the share of
  feedbacks that name exactly the first wrong step (`Step k is wrong.`); on right attempts, the share of
  feedbacks that name any step as wrong.
  A feedback "claims an error" only by naming a step: "Check your work." and the self-correction instruction
  name none. Wrong attempts whose every step is right (a wrong or missing answer line) have no first wrong step
  and are left out of the first measure.
"""

from __future__ import annotations

from collections import defaultdict


def zero_adv_frac(keys: list, rewards: list[float]) -> float | None:
    """Share of groups (rows with the same key) whose rewards are all equal; None without rows."""
    groups: dict = defaultdict(set)
    for k, r in zip(keys, rewards, strict=True):
        groups[k].add(float(r))
    return sum(len(v) == 1 for v in groups.values()) / len(groups) if groups else None


def critic_signal_frac(keys: list, critic_rewards: list[float]) -> float | None:
    """Share of feedback groups whose critic rewards are not all equal; None without rows."""
    flat = zero_adv_frac(keys, critic_rewards)
    return None if flat is None else 1.0 - flat


def critic_error_measures(rows: list[dict]) -> dict[str, float | None]:
    """`critic_hits_first_error` and `critic_false_alarm` over trajectory rows with a first-error analysis
    (columns `attempt_reward`, `first_wrong_step`, `feedback_step`: binac_core/records.py); a measure is None when
    no row is in its denominator."""
    hits, wrong, alarms, right = 0, 0, 0, 0
    for r in rows:
        if r["attempt_reward"] > 0:
            right += 1
            alarms += r["feedback_step"] is not None
        elif r["first_wrong_step"] is not None:
            wrong += 1
            hits += r["feedback_step"] == r["first_wrong_step"]
    return {"critic_hits_first_error": hits / wrong if wrong else None,
            "critic_false_alarm": alarms / right if right else None}
