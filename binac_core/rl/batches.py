"""Turning scored records into training samples with advantages (what each level is trained on).

- actor, turn 1: y0 with GRPO advantages of r0 within the problem's group of attempts;
- actor, turn 2: y1 (conditioned on x, y0, z) with advantages of r1 + α·(r1 − r0) within the problem's group of
  refinements (SCoRe stage-II shaping; α = 0 gives plain r1);
- critic: z with advantages of its critic reward (`binac_core.rl.critic_reward`) within the attempt's group of
  feedbacks, so the critic is compared only against other feedback on the same attempt (`critic_samples`: with
  its own reward scaling, `train.critic_scale_rewards`, and optionally without the groups whose feedbacks all say
  the same thing, `train.critic_skip_same_saying`).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING

import torch

from binac_core import benchmarks
from binac_core.benchmarks.verdict import parse_verdict
from binac_core.model.stage_io import Attempt, Feedback, Refinement, ScoredBatch, Turn
from binac_core.rl.losses import group_advantages
from binac_core.rl.update import Sample

if TYPE_CHECKING:
    from binac_core.foundation.config import Config


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
    return [
        r + alpha * (r - first[(y.problem_id, y.sample_idx)])
        for y, r in zip(scored.refined, scored.refined_rewards, strict=True)
    ]


def refinement_samples(refined: list[Refinement], shaped: list[float], scale: bool) -> list[Sample]:
    groups = _group_ids([y.problem_id for y in refined])
    return _samples(refined, group_advantages(torch.tensor(shaped), groups, scale))


def feedback_samples(
    feedbacks: list[Feedback], critic_rewards: list[float], scale: bool, said: list[Hashable] | None = None
) -> list[Sample]:
    """The critic's update batch: each feedback with the advantage of its critic reward within its attempt's
    group; with `said` (what each feedback says, `saying`), the groups whose feedbacks all say the same thing are
    left out (their samples dropped after the advantages are computed, so the other groups' are unchanged)."""
    keys = [(f.problem_id, f.sample_idx) for f in feedbacks]
    samples = _samples(feedbacks, group_advantages(torch.tensor(critic_rewards), _group_ids(keys), scale))
    if said is None:
        return samples
    sayings: dict = {}
    for k, s in zip(keys, said, strict=True):
        sayings.setdefault(k, set()).add(s)
    return [sample for sample, k in zip(samples, keys, strict=True) if len(sayings[k]) > 1]


def saying(feedback: Feedback, benchmark: str) -> Hashable:
    """What a feedback says, for `train.critic_skip_same_saying`: on a benchmark with a feedback analysis (the
    synthetic task) its verdict (`parse_verdict`) and the step it names (`FeedbackAnalysis.named_step`), the
    values stored as `feedback_verdict` and `feedback_step`; elsewhere its text without surrounding whitespace."""
    bench = benchmarks.get(benchmark)
    if bench.feedback_analysis is None:
        return feedback.text.strip()
    return parse_verdict(feedback.text, bench.verdict_syntax), bench.feedback_analysis.named_step(feedback.text)


def critic_samples(cfg: Config, feedbacks: list[Feedback], critic_rewards: list[float]) -> list[Sample]:
    """The critic's update batch under `cfg` (`feedback_samples`): scaled by `train.critic_scale_rewards` (None:
    `train.scale_rewards`), without the same-saying groups when `train.critic_skip_same_saying`."""
    t = cfg.train
    scale = t.scale_rewards if t.critic_scale_rewards is None else t.critic_scale_rewards
    said = [saying(f, cfg.task.benchmark) for f in feedbacks] if t.critic_skip_same_saying else None
    return feedback_samples(feedbacks, critic_rewards, scale, said)


def actor_samples(scored: ScoredBatch, scale: bool, alpha: float = 0.0) -> list[Sample]:
    """The actor's update batch: its first attempts and, when `scored` holds refinements (methods that train the
    actor's second turn), its refinements with the shaped rewards of `refinement_rewards`."""
    samples = attempt_samples(scored.attempts, scored.first_rewards, scale)
    if scored.refined is not None:
        samples += refinement_samples(scored.refined, refinement_rewards(scored, alpha), scale)
    return samples
