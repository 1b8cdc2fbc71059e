"""Stage 6: the critic's (upper level's) update on its feedback, judged by the actor's refined reward.

Critic reward of feedback z (`binac_core.losses.critic_reward_of`), by the method's form: `penalty`
(1 + λ(1 + α))·r1(z; θ) − λ(1 + α)·r1(z; θ⁺) (θ⁺: the actor after its update on this batch, α =
train.alpha_shaping, the actor's turn-2 shaping; docs/algorithm.md derives it from the bilevel objective), `r1`
(r1(z; θ) alone) or `after` (r1(z; θ⁺) alone), with advantages normalised within each attempt's group of
feedbacks."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from prefect import task

from binac_core.batches import critic_reward_values, feedback_samples
from binac_core.files import read_json, read_optional, write_json
from binac_core.generation import adapter_ref
from binac_core.update import update_adapter
from tasks._common import CACHED, config, loaded


@task(name="critic-reward", **CACHED)
def critic_reward(cfg_d: dict, r1: dict, r1_lookahead: dict | None, out_dir: str, form: str = "penalty") -> dict:
    train = config(cfg_d).train
    rewards = critic_reward_values(form, read_json(r1), read_optional(r1_lookahead), train.lam, train.alpha_shaping)
    return write_json(Path(out_dir) / "critic.rewards.json", rewards)


@task(name="update-critic", **CACHED)
def update_critic(
    cfg_d: dict, base: dict, seed: int, critic: dict, feedback: dict, rewards: dict, out_dir: str
) -> dict:
    train = config(cfg_d).train
    policy, _ = loaded(cfg_d, base, seed)
    samples = feedback_samples(read_json(feedback), read_json(rewards), train.scale_rewards)
    new, stats = update_adapter(policy, adapter_ref(critic), samples, train.t_high, train.critic_kl_coef,
                                Path(out_dir) / "critic")
    return {"adapter": asdict(new), "stats": stats}
