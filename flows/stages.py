"""The stages of one iteration as cached Prefect tasks (`binac_core.rl.loop.Stages`): what `run_iteration` calls
when the flow runs it. Each method calls one task of tasks/ with the step's seed, step and folder; the tasks hand
each other stage files (`binac_core.model.stage_io`), cached on their inputs, so a re-run reuses finished stages
and a killed run resumes (tasks/_common.py). Each task reads its input files, calls the stage's function of
binac_core/rl/stage_functions.py (the one `LibraryStages` calls) and writes what it returns."""

from __future__ import annotations

from dataclasses import dataclass

from binac_core.foundation.config import Config
from binac_core.foundation.files import StageFile
from binac_core.model.stage_io import AdapterRef
from binac_core.rl.loop import StepContext
from binac_core.rl.methods import FeedbackSource, MethodSpec
from tasks.actor_update import actor_update_task
from tasks.critic_update import critic_reward_task, critic_update_task
from tasks.feedback import feedback_task
from tasks.refine import refine_task
from tasks.rollout import rollout_task
from tasks.score import score_task


@dataclass(frozen=True)
class PrefectStages:
    """The stages over the run's config (`cfg`, and `cfg_d` as the tasks take it), base model and train split."""

    cfg: Config
    cfg_d: dict
    base: StageFile
    train_split: StageFile
    stream_splits: dict[int, StageFile] | None = None
    """The train split of each difficulty the problem stream may choose (`StepContext.difficulty`)."""

    def rollouts(self, at: StepContext, actor: AdapterRef):
        split = self.train_split if at.difficulty is None else self.stream_splits[at.difficulty]
        return rollout_task(self.cfg_d, self.base, split, actor, **_where(at))

    def score(self, at: StepContext, batch, answers, name: str):
        return score_task(self.cfg_d, batch, answers, out_dir=at.out_dir, name=name)

    def feedback(
        self, at: StepContext, batch, attempts, first_rewards, source: FeedbackSource, critic: AdapterRef | None
    ):
        return feedback_task(self.cfg_d, self.base, batch, attempts, first_rewards, source.value, critic, **_where(at))

    def refine(self, at: StepContext, batch, attempts, feedback, actor: AdapterRef, name: str):
        return refine_task(self.cfg_d, self.base, batch, attempts, feedback, actor, **_where(at), name=name)

    def update_actor(self, at: StepContext, actor: AdapterRef, attempts, first_rewards, refined, refined_rewards):
        return actor_update_task(
            self.cfg_d, self.base, at.seed, actor, attempts, first_rewards, at.out_dir, refined, refined_rewards
        )

    def critic_reward(
        self, at: StepContext, spec: MethodSpec, refined_rewards, lookahead_rewards, feedback, attempts, first_rewards
    ):
        weight = spec.critic_verdict_weight(self.cfg)
        return critic_reward_task(
            self.cfg_d,
            spec.critic_reward,
            weight,
            refined_rewards,
            lookahead_rewards,
            feedback,
            attempts,
            first_rewards,
            **_where(at),
        )

    def update_critic(self, at: StepContext, critic: AdapterRef, feedback, critic_rewards):
        return critic_update_task(self.cfg_d, self.base, at.seed, critic, feedback, critic_rewards, at.out_dir)


def _where(at: StepContext) -> dict:
    """The step's seed, step and folder as the tasks take them."""
    return {"seed": at.seed, "step": at.step, "out_dir": at.out_dir}
