"""Stage 6: the critic's (upper level's) update on its feedback, judged by the actor's refined reward.

Critic reward of feedback z (`binac_core.losses.critic_reward_of`), by the method's form: `penalty`
(1 + λ(1 + α))·r1(z; θ) − λ(1 + α)·r1(z; θ⁺) (θ⁺: the actor after its update on this batch, α =
train.alpha_shaping, the actor's turn-2 shaping; docs/algorithm.md derives it from the bilevel objective), `r1`
(r1(z; θ) alone) or `after` (r1(z; θ⁺) alone), with advantages normalised within each attempt's group of
feedbacks."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from binac_core.batches import critic_reward_values, feedback_samples
from binac_core.files import StageFile, read_json, read_optional, write_json
from binac_core.stage_io import AdapterRef, Feedback, read_records
from binac_core.update import AdapterUpdate, update_adapter
from tasks._common import CACHED, config, loaded


@task(name="critic-reward", **CACHED)
def critic_reward(
    cfg_d: dict, refined_rewards: StageFile, lookahead_rewards: StageFile | None, out_dir: str, form: str = "penalty"
) -> StageFile:
    train = config(cfg_d).train
    rewards = critic_reward_values(form, read_json(refined_rewards), read_optional(lookahead_rewards), lam=train.lam,
                                   alpha=train.alpha_shaping)
    return write_json(Path(out_dir) / "critic.rewards.json", rewards)


@task(name="update-critic", **CACHED)
def update_critic(
    cfg_d: dict, base: StageFile, seed: int, critic: AdapterRef, feedback: StageFile, critic_rewards: StageFile,
    out_dir: str,
) -> AdapterUpdate:
    train = config(cfg_d).train
    policy, _ = loaded(cfg_d, base, seed)
    samples = feedback_samples(read_records(Feedback, feedback), read_json(critic_rewards), train.scale_rewards)
    return update_adapter(policy, critic, samples, passes=train.t_high, kl_coef=train.critic_kl_coef,
                          folder=Path(out_dir) / "critic")
