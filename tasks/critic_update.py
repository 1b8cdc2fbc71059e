"""Stage 6: the critic's (upper level's) reward and update on its feedback, judged by the actor's refined reward
(`binac_core.rl.critic_reward`; the formula: `losses.penalty_reward`, docs/algorithm.md)."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from binac_core import benchmarks
from binac_core.errors import BinacError
from binac_core.foundation.files import StageFile, read_json, read_optional, write_json
from binac_core.model.stage_io import AdapterRef, AdapterRole, Attempt, Feedback, read_records
from binac_core.rl.batches import critic_samples
from binac_core.rl.critic_reward import critic_reward as composed_rewards
from binac_core.rl.critic_reward import shuffle_seed_of
from binac_core.rl.kinds import CriticRewardForm
from binac_core.rl.update import AdapterUpdate, UpdateSettings, update_adapter
from tasks._common import CACHED, config, loaded


@task(name="critic-reward", **CACHED)
def reward_feedback(
    cfg_d: dict,
    refined_rewards: StageFile,
    lookahead_rewards: StageFile | None,
    out_dir: str,
    form: CriticRewardForm = CriticRewardForm.PENALTY,
    verdict_weight: float = 0.0,
    feedback: StageFile | None = None,
    attempts: StageFile | None = None,
    first_rewards: StageFile | None = None,
    seed: int | None = None,
    step: int | None = None,
) -> StageFile:
    """The critic rewards of the step's feedbacks in the method's `form` (`critic_reward.critic_reward`); with
    `verdict_weight` > 0 the verdict bonus too, read from the `feedback`, the `attempts` and their `first_rewards`;
    with `train.critic_reward_shuffle`, permuted across the batch with the seed of the run's `seed` and `step`
    (`critic_reward.shuffle_seed_of`), which it then needs."""
    cfg = config(cfg_d)
    if cfg.train.critic_reward_shuffle and (seed is None or step is None):
        raise BinacError("train.critic_reward_shuffle needs the run's seed and step to permute the critic rewards")
    weighted = verdict_weight > 0
    rewards = composed_rewards(
        form,
        read_json(refined_rewards),
        read_optional(lookahead_rewards),
        lam=cfg.train.lam,
        alpha=cfg.train.alpha_shaping,
        verdict_weight=verdict_weight,
        feedbacks=read_records(Feedback, feedback) if weighted else None,
        attempts=read_records(Attempt, attempts) if weighted else None,
        first_rewards=read_json(first_rewards) if weighted else None,
        syntax=benchmarks.get(cfg.task.benchmark).verdict_syntax,
        shuffle_seed=shuffle_seed_of(cfg.train.critic_reward_shuffle, seed, step),
    )
    return write_json(Path(out_dir) / "critic.rewards.json", rewards)


@task(name="update-critic", **CACHED)
def update_critic(
    cfg_d: dict,
    base: StageFile,
    seed: int,
    critic: AdapterRef,
    feedback: StageFile,
    critic_rewards: StageFile,
    out_dir: str,
) -> AdapterUpdate:
    cfg = config(cfg_d)
    policy, _ = loaded(cfg_d, base, seed)
    samples = critic_samples(cfg, read_records(Feedback, feedback), read_json(critic_rewards))
    return update_adapter(
        policy, critic, samples, UpdateSettings.of(cfg, AdapterRole.CRITIC), Path(out_dir) / AdapterRole.CRITIC
    )
