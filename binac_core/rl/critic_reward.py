"""The critic's reward per feedback z: where it is computed (the value-penalty formula itself:
`losses.penalty_reward` and docs/algorithm.md, "Critic reward"). `critic_reward` composes the method's form
(`MethodSpec.critic_reward`, a `CriticRewardForm`) of the refinements' rewards under θ and θ⁺ with the verdict
bonus, and with `train.critic_reward_shuffle` (a negative control) permutes the composed rewards across the batch
(`shuffled`); the critic is then trained on it with advantages normalised within each attempt's group of
feedbacks (`batches.feedback_samples`)."""

from __future__ import annotations

import random

import torch

from binac_core.benchmarks.verdict import VerdictSyntax, parse_verdict, verdict_matches
from binac_core.model.stage_io import Attempt, Feedback
from binac_core.rl.episodes import stage_seed
from binac_core.rl.kinds import CriticRewardForm
from binac_core.rl.losses import penalty_reward


def critic_reward(
    form: CriticRewardForm,
    refined_rewards: list[float],
    lookahead_rewards: list[float] | None,
    *,
    lam: float,
    alpha: float,
    verdict_weight: float = 0.0,
    feedbacks: list[Feedback] | None = None,
    attempts: list[Attempt] | None = None,
    first_rewards: list[float] | None = None,
    syntax: VerdictSyntax | None = None,
    shuffle_seed: int | None = None,
) -> list[float]:
    """The critic's reward per feedback in the method's `form`, from the rewards of the refinements under the actor
    θ (r1) and (`lookahead_rewards`, r1⁺) under the updated actor θ⁺: `R1` r1, `PENALTY` the value-penalty form
    (`losses.penalty_reward`; without a look-ahead actor, θ⁺ = θ, it is r1 itself), `AFTER` r1⁺ (a ValueError
    without it). Plus `verdict_bonus` when `verdict_weight` > 0 (which then reads the `feedbacks`, the `attempts`
    they critique, those attempts' `first_rewards` and the benchmark's verdict `syntax`); with a `shuffle_seed`
    (`shuffle_seed_of`), the composed rewards permuted across the batch (`shuffled`)."""
    r1 = torch.tensor(refined_rewards)
    match CriticRewardForm(form):
        case CriticRewardForm.R1:
            composed = r1.float()
        case CriticRewardForm.PENALTY:
            later = r1 if lookahead_rewards is None else torch.tensor(lookahead_rewards)
            composed = penalty_reward(r1, later, lam, alpha)
        case CriticRewardForm.AFTER:
            if lookahead_rewards is None:
                raise ValueError("the `after` critic reward needs the look-ahead refinements r1(θ⁺)")
            composed = torch.tensor(lookahead_rewards).float()
    rewards = composed.tolist()
    if verdict_weight > 0:
        bonus = verdict_bonus(feedbacks, attempts, first_rewards, syntax, verdict_weight)
        rewards = [r + b for r, b in zip(rewards, bonus, strict=True)]
    if shuffle_seed is not None:
        rewards = shuffled(rewards, shuffle_seed)
    return rewards


def shuffle_seed_of(shuffle: bool, seed: int, step: int) -> int | None:
    """The permutation seed of the negative control (`train.critic_reward_shuffle`) at `step` of a run with `seed`,
    derived like the stages' sampling seeds (`episodes.stage_seed`), so a rerun permutes identically; None when
    `shuffle` is off."""
    return stage_seed(seed, step, "critic_reward_shuffle") if shuffle else None


def shuffled(rewards: list[float], seed: int) -> list[float]:
    """`rewards` under a uniformly random permutation drawn with `seed`: feedback i gets the reward of feedback
    π(i) of the same batch. The multiset of rewards is kept, the pairing of a reward with its feedback is not
    (a permutation may leave some feedbacks their own reward, as a random draw would)."""
    order = list(range(len(rewards)))
    random.Random(seed).shuffle(order)
    return [rewards[i] for i in order]


def verdict_bonus(
    feedbacks: list[Feedback],
    attempts: list[Attempt],
    first_rewards: list[float],
    syntax: VerdictSyntax,
    weight: float,
) -> list[float]:
    """Per feedback, `weight` × [its verdict (`binac_core.benchmarks.verdict.parse_verdict`) is the verifier's on the attempt
    it critiques (`verdict_matches`: a `none` verdict never matches)]: the discrimination term of the critic's
    reward (Critique-RL, which rewards its critic for a correct verdict beside helpful feedback), added to
    the form's reward in `critic_reward`. Within an attempt's feedback group every feedback faces the same verifier verdict, so
    the bonus ranks a matching verdict above a wrong or missing one and nothing else."""
    first = {(a.problem_id, a.sample_idx): r for a, r in zip(attempts, first_rewards, strict=True)}
    return [
        weight * verdict_matches(parse_verdict(f.text, syntax), first[(f.problem_id, f.sample_idx)]) for f in feedbacks
    ]
