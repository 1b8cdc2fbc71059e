"""Stage 6: the critic's (upper level's) update on its feedback, judged by the actor's refined reward.

Critic reward of feedback z (`binac_core.rl.losses.critic_reward_of`), by the method's form: `penalty`
(1 + λ(1 + α))·r1(z; θ) − λ(1 + α)·r1(z; θ⁺) (θ⁺: the actor after its update on this batch, α =
train.alpha_shaping, the actor's turn-2 shaping; docs/algorithm.md derives it from the bilevel objective), `r1`
(r1(z; θ) alone) or `after` (r1(z; θ⁺) alone), plus, with a verdict weight w > 0, w × [the feedback's verdict
matches the verifier on the attempt] (`binac_core.rl.batches.verdict_bonus`), with advantages normalised within each
attempt's group of feedbacks."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from binac_core import benchmarks
from binac_core.rl.batches import critic_reward_values, feedback_samples, verdict_bonus
from binac_core.rl.stage_io import AdapterRef, Attempt, Feedback, read_records
from binac_core.rl.update import AdapterUpdate, update_adapter
from binac_core.store.files import StageFile, read_json, read_optional, write_json
from tasks._common import CACHED, config, loaded


@task(name="critic-reward", **CACHED)
def critic_reward(
    cfg_d: dict, refined_rewards: StageFile, lookahead_rewards: StageFile | None, out_dir: str, form: str = "penalty",
    verdict_weight: float = 0.0, feedback: StageFile | None = None, attempts: StageFile | None = None,
    first_rewards: StageFile | None = None,
) -> StageFile:
    """The critic rewards of the step's feedbacks; with `verdict_weight` > 0 the verdict bonus too, read from the
    `feedback`, the `attempts` and their `first_rewards`."""
    cfg = config(cfg_d)
    train = cfg.train
    rewards = critic_reward_values(form, read_json(refined_rewards), read_optional(lookahead_rewards), lam=train.lam,
                                   alpha=train.alpha_shaping)
    if verdict_weight > 0:
        syntax = benchmarks.get(cfg.task.benchmark).verdict_syntax
        bonus = verdict_bonus(read_records(Feedback, feedback), read_records(Attempt, attempts),
                              read_json(first_rewards), syntax, verdict_weight)
        rewards = [r + b for r, b in zip(rewards, bonus, strict=True)]
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
