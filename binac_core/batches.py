"""Turning scored records into training samples with advantages (what each level is trained on).

- actor, turn 1: y0 with GRPO advantages of r0 within the problem's group of attempts;
- actor, turn 2: y1 (conditioned on x, y0, z) with advantages of r1 + α·(r1 − r0) within the problem's group of
  refinements (SCoRe stage-II shaping; α = 0 gives plain r1);
- critic: z with advantages of its critic reward (`critic_reward_values`) within the attempt's group of
  feedbacks, so the critic is compared only against other feedback on the same attempt.
"""

from __future__ import annotations

import torch

from binac_core.losses import critic_reward_of, group_advantages
from binac_core.update import Sample


def _group_ids(keys: list) -> torch.Tensor:
    index: dict = {}
    return torch.tensor([index.setdefault(k, len(index)) for k in keys])


def _samples(records: list[dict], adv: torch.Tensor) -> list[Sample]:
    return [Sample(r["prompt_ids"], r["token_ids"], r["logprobs"], float(a)) for r, a in zip(records, adv, strict=True)]


def attempt_samples(attempts: list[dict], r0: list[float], scale: bool) -> list[Sample]:
    groups = _group_ids([a["problem_id"] for a in attempts])
    return _samples(attempts, group_advantages(torch.tensor(r0), groups, scale))


def refinement_rewards(refined: list[dict], attempts: list[dict], r0: list[float], r1: list[float], alpha: float):
    first = {(a["problem_id"], a["sample_idx"]): r for a, r in zip(attempts, r0, strict=True)}
    return [r + alpha * (r - first[(f["problem_id"], f["sample_idx"])]) for f, r in zip(refined, r1, strict=True)]


def refinement_samples(refined: list[dict], shaped: list[float], scale: bool) -> list[Sample]:
    groups = _group_ids([f["problem_id"] for f in refined])
    return _samples(refined, group_advantages(torch.tensor(shaped), groups, scale))


def feedback_samples(feedbacks: list[dict], critic_reward: list[float], scale: bool) -> list[Sample]:
    groups = _group_ids([(f["problem_id"], f["sample_idx"]) for f in feedbacks])
    return _samples(feedbacks, group_advantages(torch.tensor(critic_reward), groups, scale))


def actor_samples(attempts: list[dict], r0: list[float], scale: bool, refined: list[dict] | None = None,
                  r1: list[float] | None = None, alpha: float = 0.0) -> list[Sample]:
    """The actor's update batch: its first attempts and, when `refined` is given (methods that train the actor's
    second turn), its refinements with the shaped rewards of `refinement_rewards`."""
    samples = attempt_samples(attempts, r0, scale)
    if refined is not None:
        samples += refinement_samples(refined, refinement_rewards(refined, attempts, r0, r1, alpha), scale)
    return samples


def critic_reward_values(form: str, r1: list[float], r1_lookahead: list[float] | None, lam: float,
                         alpha: float) -> list[float]:
    """The critic's reward per feedback in the method's `form` (`losses.critic_reward_of`); without a look-ahead
    actor (θ⁺ = θ) the penalty form is r1 itself."""
    later = None if r1_lookahead is None else torch.tensor(r1_lookahead)
    return critic_reward_of(form, torch.tensor(r1), later, lam, alpha).tolist()
