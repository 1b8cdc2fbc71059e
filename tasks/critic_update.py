"""Stage 6: the critic's (upper level's) update on its feedback, judged by the actor's refined reward.

Critic reward of feedback z (`binac_core.losses.critic_reward_of`), by the method's form: `penalty`
(1 + λ(1 + α))·r1(z; θ) − λ(1 + α)·r1(z; θ⁺) (θ⁺: the actor after its update on this batch, α =
train.alpha_shaping, the actor's turn-2 shaping; docs/algorithm.md derives it from the bilevel objective), `r1`
(r1(z; θ) alone) or `after` (r1(z; θ⁺) alone), with advantages normalised within each attempt's group of
feedbacks."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import torch
from prefect import task

from binac_core.batches import feedback_samples
from binac_core.files import read_json, write_json
from binac_core.losses import critic_reward_of
from binac_core.update import policy_update
from tasks._common import CACHED, config, loaded, ref


@task(name="critic-reward", **CACHED)
def critic_reward(cfg_d: dict, r1: dict, r1_lookahead: dict | None, out_dir: str, form: str = "penalty") -> dict:
    """The critic's reward per feedback in the method's `form`; without a look-ahead actor (θ⁺ = θ) the penalty
    form is r1 itself."""
    train = config(cfg_d).train
    now = torch.tensor(read_json(r1))
    later = None if r1_lookahead is None else torch.tensor(read_json(r1_lookahead))
    rewards = critic_reward_of(form, now, later, train.lam, train.alpha_shaping)
    return write_json(Path(out_dir) / "critic.rewards.json", rewards.tolist())


@task(name="update-critic", **CACHED)
def update_critic(
    cfg_d: dict, base: dict, seed: int, critic: dict, feedback: dict, rewards: dict, out_dir: str
) -> dict:
    cfg = config(cfg_d)
    policy, _ = loaded(cfg_d, base, seed)
    policy.sync(ref(critic))
    policy.loaded.pop("critic")
    samples = feedback_samples(read_json(feedback), read_json(rewards), cfg.train.scale_rewards)
    stats = policy_update(policy, "critic", samples, cfg.train.t_high, cfg.train.critic_kl_coef)
    new = policy.save("critic", Path(out_dir) / "critic")
    return {"adapter": asdict(new), "stats": stats}
