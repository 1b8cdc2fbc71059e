"""Turning scored records into training samples with advantages (what each level is trained on).

- actor, turn 1: y0 with GRPO advantages of r0 within the problem's group of attempts;
- actor, turn 2: y1 (conditioned on x, y0, z) with advantages of r1 + α·(r1 − r0) within the problem's group of
  refinements (SCoRe stage-II shaping; α = 0 gives plain r1);
- critic: z with advantages of its critic reward (`critic_reward_values`, plus `verdict_bonus` when
  `train.critic_verdict_weight` or the method sets a weight) within the attempt's group of feedbacks, so the
  critic is compared only against other feedback on the same attempt.
"""

from __future__ import annotations

import torch

from binac_core.rl.losses import critic_reward_of, group_advantages
from binac_core.rl.stage_io import Attempt, Feedback, Refinement, ScoredBatch, Turn
from binac_core.rl.update import Sample
from binac_core.rl.verdict import VerdictSyntax, parse_verdict, verdict_matches


def _group_ids(keys: list) -> torch.Tensor:
    index: dict = {}
    return torch.tensor([index.setdefault(k, len(index)) for k in keys])


def _samples(records: list[Turn], adv: torch.Tensor) -> list[Sample]:
    return [Sample(r.prompt_ids, r.token_ids, r.logprobs, float(a)) for r, a in zip(records, adv, strict=True)]


def attempt_samples(attempts: list[Attempt], first_rewards: list[float], scale: bool) -> list[Sample]:
    groups = _group_ids([a.problem_id for a in attempts])
    return _samples(attempts, group_advantages(torch.tensor(first_rewards), groups, scale))


def refinement_rewards(scored: ScoredBatch, alpha: float) -> list[float]:
    """The refinements' shaped rewards r1 + α·(r1 − r0), r0 that of the attempt each refines."""
    first = {(a.problem_id, a.sample_idx): r for a, r in zip(scored.attempts, scored.first_rewards, strict=True)}
    return [r + alpha * (r - first[(y.problem_id, y.sample_idx)])
            for y, r in zip(scored.refined, scored.refined_rewards, strict=True)]


def refinement_samples(refined: list[Refinement], shaped: list[float], scale: bool) -> list[Sample]:
    groups = _group_ids([y.problem_id for y in refined])
    return _samples(refined, group_advantages(torch.tensor(shaped), groups, scale))


def feedback_samples(feedbacks: list[Feedback], critic_rewards: list[float], scale: bool) -> list[Sample]:
    groups = _group_ids([(f.problem_id, f.sample_idx) for f in feedbacks])
    return _samples(feedbacks, group_advantages(torch.tensor(critic_rewards), groups, scale))


def actor_samples(scored: ScoredBatch, scale: bool, alpha: float = 0.0) -> list[Sample]:
    """The actor's update batch: its first attempts and, when `scored` holds refinements (methods that train the
    actor's second turn), its refinements with the shaped rewards of `refinement_rewards`."""
    samples = attempt_samples(scored.attempts, scored.first_rewards, scale)
    if scored.refined is not None:
        samples += refinement_samples(scored.refined, refinement_rewards(scored, alpha), scale)
    return samples


def critic_reward_values(
    form: str, refined_rewards: list[float], lookahead_rewards: list[float] | None, *, lam: float, alpha: float
) -> list[float]:
    """The critic's reward per feedback in the method's `form` (`losses.critic_reward_of`) from the rewards of the
    refinements under the actor θ and (`lookahead_rewards`) under the updated actor θ⁺; without a look-ahead actor
    (θ⁺ = θ) the penalty form is r1 itself."""
    later = None if lookahead_rewards is None else torch.tensor(lookahead_rewards)
    return critic_reward_of(form, torch.tensor(refined_rewards), later, lam, alpha).tolist()


def verdict_bonus(
    feedbacks: list[Feedback], attempts: list[Attempt], first_rewards: list[float], syntax: VerdictSyntax,
    weight: float,
) -> list[float]:
    """Per feedback, `weight` × [its verdict (`binac_core.rl.verdict.parse_verdict`) is the verifier's on the attempt
    it critiques (`verdict_matches`: a `none` verdict never matches)]: the discrimination term of the critic's
    reward (Critique-RL, which rewards its critic for a correct verdict beside helpful feedback), added to
    `critic_reward_values`. Within an attempt's feedback group every feedback faces the same verifier verdict, so
    the bonus ranks a matching verdict above a wrong or missing one and nothing else."""
    first = {(a.problem_id, a.sample_idx): r for a, r in zip(attempts, first_rewards, strict=True)}
    return [weight * verdict_matches(parse_verdict(f.text, syntax), first[(f.problem_id, f.sample_idx)])
            for f in feedbacks]
