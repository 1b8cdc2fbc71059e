"""One function per stage of an iteration, on in-memory values: what both implementations of the stages call,
with the same arguments. `LibraryStages` (binac_core/rl/loop.py) hands them the values it holds; each Prefect
task of tasks/ reads them from its input stage files, calls the same function and writes what it returns
(tests/rl/test_stage_functions.py checks that both call each stage with equal arguments).

Every stage that samples derives its seed from the run's `seed`, the `step` and the stage's name (`stage_seed`),
and the update stages save the updated adapter into `out_dir/<adapter name>` (`out_dir` None: held in memory,
`Policy.hold`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from binac_core import benchmarks
from binac_core.foundation.config import Config
from binac_core.model.generation import GenerationBackend, SamplingParams
from binac_core.model.stage_io import AdapterRef, Attempt, Feedback, Refinement, ScoredBatch, Scores
from binac_core.rl.batches import actor_samples, critic_samples
from binac_core.rl.critic_reward import critic_reward, shuffle_seed_of
from binac_core.rl.episodes import (
    generate_attempts,
    generate_refinements,
    sample_feedback,
    sample_problems,
    score_with_errors,
    stage_seed,
)
from binac_core.rl.kinds import CriticRewardForm
from binac_core.rl.methods import FeedbackSource
from binac_core.rl.update import AdapterUpdate, UpdateSettings, update_adapter


def sampling(cfg: Config, seed: int, step: int, stage: str, tokens: int | None = None) -> SamplingParams:
    """The run's sampling settings for `stage` at `step`, with its own seed; `tokens`: another token budget than
    `generation.max_new_tokens`."""
    g = cfg.generation
    return SamplingParams(tokens or g.max_new_tokens, g.temperature, g.top_p, stage_seed(seed, step, stage))


def rollout_stage(
    backend: GenerationBackend, cfg: Config, rows: Sequence[dict], actor: AdapterRef, seed: int, step: int
) -> tuple[list[dict], list[Attempt]]:
    """(the iteration's `train.batch_problems` problems, copies of rows drawn from the train split `rows`
    deterministically in seed and step (`sample_problems`); `train.group_size` attempts y0 at each under `actor`)."""
    problems = [dict(r) for r in sample_problems(rows, cfg.train.batch_problems, seed, step)]
    params = sampling(cfg, seed, step, "attempts")
    return problems, generate_attempts(backend, cfg.task.benchmark, problems, actor, cfg.train.group_size, params)


def score_stage(cfg: Config, problems: list[dict], answers: list[Attempt] | list[Refinement]) -> Scores:
    """The verifier's rewards of `answers` to `problems` (and, on code, their execution results)."""
    return score_with_errors(cfg.task.benchmark, by_id(problems), answers)


def feedback_stage(
    backend: GenerationBackend,
    cfg: Config,
    problems: list[dict],
    attempts: list[Attempt],
    execution_results: list[str | None] | None,
    source: FeedbackSource,
    critic: AdapterRef | None,
    seed: int,
    step: int,
) -> list[Feedback]:
    """`train.critic_group_size` feedbacks z on each attempt from `source` (`sample_feedback`: sampled with
    `critic` for a critic's source, else written); `execution_results`: the attempts' (`Scores`), shown to the
    critic on code."""
    return sample_feedback(
        backend,
        cfg.task.benchmark,
        by_id(problems),
        attempts,
        source,
        critic,
        cfg.train.critic_group_size,
        sampling(cfg, seed, step, "feedback", cfg.generation.feedback_max_new_tokens),
        execution_results=execution_results,
        verdict=cfg.critic.verdict,
    )


def refine_stage(
    backend: GenerationBackend,
    cfg: Config,
    problems: list[dict],
    attempts: list[Attempt],
    feedback: list[Feedback],
    actor: AdapterRef,
    seed: int,
    step: int,
    name: str,
) -> list[Refinement]:
    """One refinement y1 per feedback under `actor`; `name` (refined under θ, lookahead under θ⁺) seeds it."""
    params = sampling(cfg, seed, step, name)
    return generate_refinements(backend, cfg.task.benchmark, by_id(problems), attempts, feedback, actor, params)


def actor_update_stage(
    policy, cfg: Config, actor: AdapterRef, scored: ScoredBatch, out_dir: str | None
) -> AdapterUpdate:
    """θ → θ⁺ on the attempts of `scored` and, where it holds them, the refinements (`actor_samples`)."""
    samples = actor_samples(scored, cfg.train.scale_rewards, cfg.train.alpha_shaping)
    return _update(policy, cfg, actor, samples, out_dir)


def critic_reward_stage(
    cfg: Config,
    form: CriticRewardForm,
    verdict_weight: float,
    refined_rewards: list[float],
    lookahead_rewards: list[float] | None,
    feedback: list[Feedback],
    attempts: list[Attempt],
    first_rewards: list[float],
    seed: int,
    step: int,
) -> list[float]:
    """The critic's reward per feedback in the method's `form` (`critic_reward`), with the verdict bonus at
    `verdict_weight` (read from the feedback, the attempts and their first rewards) and, under
    `train.critic_reward_shuffle`, permuted with the seed of the run's `seed` and `step`."""
    t = cfg.train
    return critic_reward(
        form,
        refined_rewards,
        lookahead_rewards,
        lam=t.lam,
        alpha=t.alpha_shaping,
        verdict_weight=verdict_weight,
        feedbacks=feedback,
        attempts=attempts,
        first_rewards=first_rewards,
        syntax=benchmarks.get(cfg.task.benchmark).verdict_syntax,
        shuffle_seed=shuffle_seed_of(t.critic_reward_shuffle, seed, step),
    )


def critic_update_stage(
    policy, cfg: Config, critic: AdapterRef, feedback: list[Feedback], critic_rewards: list[float], out_dir: str | None
) -> AdapterUpdate:
    """φ → φ⁺ on the feedback and its critic rewards (`critic_samples`)."""
    return _update(policy, cfg, critic, critic_samples(cfg, feedback, critic_rewards), out_dir)


def _update(policy, cfg: Config, adapter: AdapterRef, samples, out_dir: str | None) -> AdapterUpdate:
    """`update_adapter` with the adapter's settings, saved into `out_dir/<adapter name>` (None: in memory)."""
    folder = None if out_dir is None else Path(out_dir) / adapter.name
    return update_adapter(policy, adapter, samples, UpdateSettings.of(cfg, adapter.name), folder)


def by_id(problems: list[dict]) -> dict[str, dict]:
    """The problems by their `id`."""
    return {p["id"]: p for p in problems}
