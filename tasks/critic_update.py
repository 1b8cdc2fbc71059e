"""Stage 6: the critic's (upper level's) reward and update on its feedback, judged by the actor's refined reward. Its
functions: `stage_functions.critic_reward_stage`, `critic_update_stage`; the formula: `losses.penalty_reward`,
docs/algorithm.md."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from binac_core.foundation.files import StageFile, read_json, read_optional, write_json
from binac_core.model.stage_io import AdapterRef, Attempt, Feedback, read_records
from binac_core.rl import stage_functions
from binac_core.rl.kinds import CriticRewardForm
from binac_core.rl.update import AdapterUpdate
from tasks._common import CACHED, config, loaded


@task(name="critic-reward", **CACHED)
def critic_reward_task(
    cfg_d: dict,
    form: CriticRewardForm,
    verdict_weight: float,
    refined_rewards: StageFile,
    lookahead_rewards: StageFile | None,
    feedback: StageFile,
    attempts: StageFile,
    first_rewards: StageFile,
    seed: int,
    step: int,
    out_dir: str,
) -> StageFile:
    """`critic.rewards.json`: the critic rewards of the step's feedbacks in the method's `form`, with the verdict
    bonus at `verdict_weight`."""
    rewards = stage_functions.critic_reward_stage(
        config(cfg_d),
        form,
        verdict_weight,
        read_json(refined_rewards),
        read_optional(lookahead_rewards),
        read_records(Feedback, feedback),
        read_records(Attempt, attempts),
        read_json(first_rewards),
        seed,
        step,
    )
    return write_json(Path(out_dir) / "critic.rewards.json", rewards)


@task(name="update-critic", **CACHED)
def critic_update_task(
    cfg_d: dict,
    base: StageFile,
    seed: int,
    critic: AdapterRef,
    feedback: StageFile,
    critic_rewards: StageFile,
    out_dir: str,
) -> AdapterUpdate:
    """φ⁺ saved into `out_dir/critic`."""
    policy, _ = loaded(cfg_d, base, seed)
    feedbacks = read_records(Feedback, feedback)
    return stage_functions.critic_update_stage(
        policy, config(cfg_d), critic, feedbacks, read_json(critic_rewards), out_dir
    )
