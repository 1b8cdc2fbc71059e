"""One Bi-NAC iteration (or one of a baseline) as a plain in-memory function: no Prefect, no files, no MLflow.

The algorithm at a glance (docs/algorithm.md, "One iteration, per method"; which stages run is the method's
`MethodSpec`, binac_core/rl/methods.py):

    x ~ train split                                   sample_problems
    y0 ~ π_θ(·|x),            r0 = R(x, y0)           generate_attempts, score
    [z ~ feedback source,     y1 ~ π_θ(·|x, y0, z),   r1 = R(x, y1)]          spec.feedback
    θ → θ⁺ on y0 [and y1]                             update_adapter          spec.train_actor, actor_second_turn
    [y1⁺ ~ π_θ⁺(·|x, y0, z),  r1⁺ = R(x, y1⁺)]                               spec.lookahead
    [critic reward of z from r1 [, r1⁺] [+ verdict bonus]]                   spec.feedback, spec.critic_reward
    [critic rewards permuted across the batch: a negative control]           train.critic_reward_shuffle
    [φ → φ⁺ on z]                                     update_adapter          spec.trains_critic_at(cfg, step)

`iteration` makes exactly the library calls the Prefect stages of flows/train.py make (tasks/rollout.py,
score.py, feedback.py, refine.py, actor_update.py, critic_update.py), in their order, with their seeds
(`stage_seed(seed, step, stage)`) and sampling parameters, so its numbers are the flow's (tests/integration/test_loop.py
checks it for every method). What the flow adds around the same stages: each stage cached on its inputs (a killed
run resumes), every stage output written to a file and the adapters saved each iteration, the trajectories stored
(DuckDB/Parquet), the metrics and artifacts tracked in MLflow, and the held-out evaluations every k iterations.

Adapters: the stages save each updated adapter into the step's folder and hand on its `AdapterRef`; `Policy.sync`
reloads one only when the in-memory copy has another digest, and saving changes no weight, so keeping the updated
adapters in the policy gives the same numbers. With `folder` None the loop does that (`Policy.hold`: references
whose digest says "in memory", with no folder); with a folder it saves them as the stages do (`folder/actor`,
`folder/critic`), which a backend that loads adapters from disk (vLLM) needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from binac_core import benchmarks
from binac_core.foundation.config import Config
from binac_core.model.generation import GenerationBackend, SamplingParams
from binac_core.model.stage_io import AdapterRef, Attempt, Feedback, Refinement, ScoredBatch
from binac_core.rl.batches import actor_samples, feedback_samples
from binac_core.rl.critic_reward import critic_reward, shuffle_seed_of
from binac_core.rl.episodes import (
    generate_attempts,
    generate_refinements,
    sample_feedback,
    sample_problems,
    score,
    score_with_errors,
    stage_seed,
)
from binac_core.rl.methods import MethodSpec
from binac_core.rl.update import AdapterUpdate, Sample, update_adapter


@dataclass(frozen=True)
class IterationResult:
    """What one iteration sampled, scored and trained; None where the method has no such stage."""

    problems: list[dict]
    attempts: list[Attempt]
    first_rewards: list[float]
    """r0 per attempt."""
    feedback: list[Feedback] | None
    refined: list[Refinement] | None
    """y1 under θ, one per feedback."""
    refined_rewards: list[float] | None
    lookahead: list[Refinement] | None
    """y1⁺ under the updated actor θ⁺, one per feedback."""
    lookahead_rewards: list[float] | None
    critic_rewards: list[float] | None
    """The critic's reward per feedback (`binac_core.rl.critic_reward`; computed for every method with feedback)."""
    actor_update: AdapterUpdate | None
    critic_update: AdapterUpdate | None
    """None also at an iteration the schedule skips (`train.critic_every`; `MethodSpec.trains_critic_at`)."""
    actor: AdapterRef
    """The actor after the iteration (θ⁺, or θ when the method does not train it)."""
    critic: AdapterRef | None

    @property
    def actor_loss(self) -> float | None:
        return None if self.actor_update is None else self.actor_update.loss

    @property
    def kl(self) -> float | None:
        """The actor update's mean KL to the base (`policy_update`)."""
        return None if self.actor_update is None else self.actor_update.kl

    @property
    def critic_loss(self) -> float | None:
        return None if self.critic_update is None else self.critic_update.loss


def iteration(
    policy, backend: GenerationBackend, cfg: Config, spec: MethodSpec, rows: Sequence[dict], seed: int, step: int,
    actor: AdapterRef, critic: AdapterRef | None, folder: str | Path | None = None,
) -> IterationResult:
    """One iteration of `spec`'s method at `step` (1, 2, ...) of a run with `seed`, from the adapters `actor` and
    `critic` (None only for a method without feedback, grpo), on problems drawn from `rows` (the train split).
    `folder`: where the updated adapters are saved (module docstring); None keeps them in `policy`."""
    t, g, bench = cfg.train, cfg.generation, cfg.task.benchmark
    problems = [dict(r) for r in sample_problems(rows, t.batch_problems, seed, step)]
    by_id = {p["id"]: p for p in problems}

    def params(stage: str, tokens: int = g.max_new_tokens) -> SamplingParams:
        return SamplingParams(tokens, g.temperature, g.top_p, stage_seed(seed, step, stage))

    attempts = generate_attempts(backend, bench, problems, actor, t.group_size, params("attempts"))
    first = score_with_errors(bench, by_id, attempts)
    feedback = refined = refined_rewards = ahead = ahead_rewards = critic_rewards = None
    actor_upd = critic_upd = None
    if spec.feedback:
        feedback = sample_feedback(backend, bench, by_id, attempts, spec.feedback,
                                   critic if spec.feedback.sampled else None, t.critic_group_size,
                                   params("feedback", g.feedback_max_new_tokens),
                                   execution_results=first.execution_results, verdict=cfg.critic.verdict)
        refined = generate_refinements(backend, bench, by_id, attempts, feedback, actor, params("refined"))
        refined_rewards = score(bench, by_id, refined)
    if spec.train_actor:
        two = spec.actor_second_turn
        scored = ScoredBatch(attempts, first.rewards, refined=refined if two else None,
                             refined_rewards=refined_rewards if two else None)
        actor_upd = _update(policy, actor, actor_samples(scored, t.scale_rewards, t.alpha_shaping), t.t_low,
                            t.kl_coef, t.entropy_coef, folder)
        actor = actor_upd.adapter
    if spec.feedback:
        if spec.lookahead:  # θ⁺ = the actor just updated on this batch
            ahead = generate_refinements(backend, bench, by_id, attempts, feedback, actor, params("lookahead"))
            ahead_rewards = score(bench, by_id, ahead)
        critic_rewards = critic_reward(spec.critic_reward, refined_rewards, ahead_rewards, lam=t.lam,
                                       alpha=t.alpha_shaping, verdict_weight=spec.critic_verdict_weight(cfg),
                                       feedbacks=feedback, attempts=attempts, first_rewards=first.rewards,
                                       syntax=benchmarks.get(bench).verdict_syntax,
                                       shuffle_seed=shuffle_seed_of(t.critic_reward_shuffle, seed, step))
    if spec.trains_critic_at(cfg, step):  # every `train.critic_every`-th iteration
        critic_upd = _update(policy, critic, feedback_samples(feedback, critic_rewards, t.scale_rewards), t.t_high,
                             t.critic_kl_coef, t.critic_entropy_coef, folder)
        critic = critic_upd.adapter
    return IterationResult(problems, attempts, first.rewards, feedback, refined, refined_rewards, ahead,
                           ahead_rewards, critic_rewards, actor_upd, critic_upd, actor, critic)


def _update(policy, adapter: AdapterRef, samples: list[Sample], passes: int, kl_coef: float, entropy_coef: float,
            folder: str | Path | None) -> AdapterUpdate:
    """`update_adapter`, saving into `folder/<adapter name>` as the update stages do, or (None) in memory."""
    out = None if folder is None else Path(folder) / adapter.name
    return update_adapter(policy, adapter, samples, passes=passes, kl_coef=kl_coef, entropy_coef=entropy_coef,
                          folder=out)
