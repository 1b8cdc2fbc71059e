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

Under `train.alternation` (binac_core/rl/schedule.py) an actor iteration leaves the critic as it is, and a critic
iteration computes θ⁺ for the look-ahead alone and keeps θ (`MethodSpec.keeps_actor_update_at`); the adapters
then come back from their folders (`Policy.sync`, weights and optimizer state), so the in-memory path needs a
`folder` there.

`run_iteration` is the iteration, written once: it calls the stages it is handed (`Stages`) in this order, and
the two implementations run it. Each stage is written once too, as one function of binac_core/rl/stage_functions.py
on in-memory values, which both call with the same arguments (tests/flows/test_stages.py): `LibraryStages`
(below) with the values it holds; flows/stages.py's `PrefectStages` through the cached Prefect tasks of tasks/,
which read those values from the stage files they hand each other and write what the function returns. Each stage
derives its sampling seed from the run's seed, the step and the stage (`stage_seed`), so both give the same
numbers (tests/integration/test_loop.py checks it for every method). What the flow adds around the same
iteration (flows/train.py): each stage cached on its inputs (a killed run resumes), every stage output written
to a file and the adapters saved each iteration, the trajectories stored (DuckDB/Parquet), the metrics tracked
in MLflow, and the held-out evaluations every k iterations. Every phase is timed where it runs
(`binac_core.foundation.timing`: `IterationResult.timings`, logged as `perf/<phase>_s`).

Adapters: the stages save each updated adapter into the step's folder and hand on its `AdapterRef`; `Policy.sync`
reloads one only when the in-memory copy has another digest, and saving changes no weight, so keeping the updated
adapters in the policy gives the same numbers. With no folder (`StepContext.out_dir` None) `LibraryStages` does
that (`Policy.hold`: references whose digest says "in memory"); with a folder it saves them as the stages do
(`out_dir/actor`, `out_dir/critic`), which a backend that loads adapters from disk (vLLM) needs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from binac_core.errors import BinacError
from binac_core.foundation.config import Config
from binac_core.foundation.timing import timed
from binac_core.model.generation import GenerationBackend
from binac_core.model.stage_io import AdapterRef, Attempt, Feedback, Refinement, ScoredBatch, Scores
from binac_core.rl import stage_functions
from binac_core.rl.methods import FeedbackSource, MethodSpec
from binac_core.rl.update import AdapterUpdate


@dataclass(frozen=True)
class StepContext:
    """Where in a run a stage is: the run's seed, the iteration (1, 2, ...), the step's output folder (None:
    nothing is written, `LibraryStages` keeps the adapters in memory) and, with `train.stream_target`, the
    iteration's difficulty."""

    seed: int
    step: int
    out_dir: str | None = None
    difficulty: int | None = None
    """The difficulty the problem stream chose for this iteration (`binac_core.rl.stream.difficulty_at`); None:
    the run's train split."""


class Stages(Protocol):
    """The stages one iteration calls. What they hand each other (a batch, answers, rewards, feedback) is the
    implementation's: in-memory values (`LibraryStages`) or stage files (flows/stages.py)."""

    def rollouts(self, at: StepContext, actor: AdapterRef) -> tuple[Any, Any]:
        """(the iteration's problems, the actor's attempts y0 at each)."""

    def score(self, at: StepContext, batch: Any, answers: Any, name: str) -> Any:
        """The verifier's rewards of `answers` (and code's execution results), stored as `name`."""

    def feedback(
        self,
        at: StepContext,
        batch: Any,
        attempts: Any,
        first_rewards: Any,
        source: FeedbackSource,
        critic: AdapterRef | None,
    ) -> Any:
        """Feedback z on each attempt from `source` (sampled with `critic` when a critic writes it)."""

    def refine(self, at: StepContext, batch: Any, attempts: Any, feedback: Any, actor: AdapterRef, name: str) -> Any:
        """One refinement y1 per feedback under `actor`; `name`: refined (θ) or lookahead (θ⁺)."""

    def update_actor(
        self, at: StepContext, actor: AdapterRef, attempts: Any, first_rewards: Any, refined: Any, refined_rewards: Any
    ) -> AdapterUpdate:
        """θ → θ⁺ on the attempts and, where given, the refinements."""

    def critic_reward(
        self,
        at: StepContext,
        spec: MethodSpec,
        refined_rewards: Any,
        lookahead_rewards: Any,
        feedback: Any,
        attempts: Any,
        first_rewards: Any,
    ) -> Any:
        """The critic's reward per feedback in the method's form."""

    def update_critic(self, at: StepContext, critic: AdapterRef, feedback: Any, critic_rewards: Any) -> AdapterUpdate:
        """φ → φ⁺ on the feedback and its rewards."""


@dataclass(frozen=True, kw_only=True)
class IterationResult:
    """What one iteration sampled, scored and trained, as its stages handed them on (built by keyword); None where
    the method has no such stage."""

    batch: Any
    """The iteration's problems."""
    attempts: Any
    first_rewards: Any
    """r0 per attempt."""
    feedback: Any
    refined: Any
    """y1 under θ, one per feedback."""
    refined_rewards: Any
    lookahead: Any
    """y1⁺ under the updated actor θ⁺, one per feedback."""
    lookahead_rewards: Any
    critic_rewards: Any
    """The critic's reward per feedback (`binac_core.rl.critic_reward`; computed for every method with feedback)."""
    actor_update: AdapterUpdate | None
    """None also at a critic iteration of `train.alternation` (`discarded_actor_update`)."""
    critic_update: AdapterUpdate | None
    """None also at an iteration the schedule skips (`train.critic_every`; `MethodSpec.trains_critic_at`)."""
    actor: AdapterRef
    """The actor after the iteration (θ⁺, or θ when the method does not train it)."""
    critic: AdapterRef | None
    timings: dict[str, float] = field(default_factory=dict)
    """Seconds per phase (`binac_core.foundation.timing.PHASES`) the iteration spent."""
    discarded_actor_update: AdapterUpdate | None = None
    """A critic iteration's (`train.alternation`) look-ahead update θ → θ⁺: computed for the critic's reward,
    not kept (`actor` is θ, `actor_update` None)."""

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


def run_iteration(
    stages: Stages, cfg: Config, spec: MethodSpec, at: StepContext, actor: AdapterRef, critic: AdapterRef | None
) -> IterationResult:
    """One iteration of `spec`'s method at `at` from the adapters `actor` and `critic` (None only for a method
    without feedback, grpo), through `stages`."""
    timings: dict[str, float] = {}
    feedback = refined = refined_rewards = ahead = ahead_rewards = critic_rewards = None
    actor_upd = critic_upd = discarded = None
    with timed("sample", timings):
        batch, attempts = stages.rollouts(at, actor)
    with timed("score", timings):
        first = stages.score(at, batch, attempts, "attempts")
    if spec.feedback:
        with timed("feedback", timings):
            feedback = stages.feedback(
                at, batch, attempts, first, spec.feedback, critic if spec.feedback.sampled else None
            )
        with timed("refine", timings):
            refined = stages.refine(at, batch, attempts, feedback, actor, "refined")
        with timed("score", timings):
            refined_rewards = stages.score(at, batch, refined, "refined")
    ahead_actor = actor
    if spec.updates_actor_at(cfg, at.step):  # also at a critic iteration of `train.alternation`, for θ⁺
        two = spec.actor_second_turn
        with timed("actor_update", timings):
            actor_upd = stages.update_actor(
                at, actor, attempts, first, refined if two else None, refined_rewards if two else None
            )
        ahead_actor = actor_upd.adapter
        if spec.keeps_actor_update_at(cfg, at.step):
            actor = ahead_actor
        else:  # a critic iteration: θ⁺ serves the look-ahead only, the actor stays θ
            actor_upd, discarded = None, actor_upd
    if spec.feedback:
        if spec.lookahead:  # θ⁺ = the actor updated on this batch
            with timed("lookahead", timings):
                ahead = stages.refine(at, batch, attempts, feedback, ahead_actor, "lookahead")
                ahead_rewards = stages.score(at, batch, ahead, "lookahead")
        with timed("score", timings):
            critic_rewards = stages.critic_reward(at, spec, refined_rewards, ahead_rewards, feedback, attempts, first)
    if spec.trains_critic_at(cfg, at.step):  # every `train.critic_every`-th iteration
        with timed("critic_update", timings):
            critic_upd = stages.update_critic(at, critic, feedback, critic_rewards)
        critic = critic_upd.adapter
    return IterationResult(
        batch=batch,
        attempts=attempts,
        first_rewards=first,
        feedback=feedback,
        refined=refined,
        refined_rewards=refined_rewards,
        lookahead=ahead,
        lookahead_rewards=ahead_rewards,
        critic_rewards=critic_rewards,
        actor_update=actor_upd,
        critic_update=critic_upd,
        actor=actor,
        critic=critic,
        timings=timings,
        discarded_actor_update=discarded,
    )


def iteration(
    policy,
    backend: GenerationBackend,
    cfg: Config,
    spec: MethodSpec,
    rows: Sequence[dict],
    seed: int,
    step: int,
    actor: AdapterRef,
    critic: AdapterRef | None,
    folder: str | Path | None = None,
    difficulty: int | None = None,
    rows_at: Mapping[int, Sequence[dict]] | None = None,
) -> IterationResult:
    """`run_iteration` in memory (`LibraryStages`) at `step` of a run with `seed`, on problems drawn from `rows`
    (the train split), or with the problem stream's `difficulty` from `rows_at[difficulty]` (the train split of
    each difficulty); `folder`: where the updated adapters are saved (module docstring), None keeps them in
    `policy`. Rewards come back as `Scores`, the rest as the library's records."""
    if folder is None and spec.alternation(cfg) is not None:
        raise BinacError("train.alternation in memory needs a folder: a critic iteration reloads the kept actor")
    at = StepContext(seed, step, None if folder is None else str(folder), difficulty)
    return run_iteration(LibraryStages(policy, backend, cfg, rows, rows_at), cfg, spec, at, actor, critic)


@dataclass(frozen=True)
class LibraryStages:
    """The stages as plain library calls on in-memory values (`Stages`): the problems as dicts, the answers as
    `Attempt`/`Feedback`/`Refinement` records, rewards as `Scores`, critic rewards as a list. Each stage is one
    function of binac_core/rl/stage_functions.py, the one the Prefect task of that stage calls."""

    policy: Any
    backend: GenerationBackend
    cfg: Config
    rows: Sequence[dict]
    """The train split the problems are drawn from."""
    rows_at: Mapping[int, Sequence[dict]] | None = None
    """The train split of each difficulty the problem stream may choose (`StepContext.difficulty`)."""

    def rollouts(self, at, actor):
        rows = self.rows if at.difficulty is None else self.rows_at[at.difficulty]
        return stage_functions.rollout_stage(self.backend, self.cfg, rows, actor, at.seed, at.step)

    def score(self, at, batch: list[dict], answers, name: str) -> Scores:
        return stage_functions.score_stage(self.cfg, batch, answers)

    def feedback(self, at, batch, attempts: list[Attempt], first_rewards: Scores, source, critic) -> list[Feedback]:
        results = first_rewards.execution_results
        return stage_functions.feedback_stage(
            self.backend, self.cfg, batch, attempts, results, source, critic, at.seed, at.step
        )

    def refine(self, at, batch, attempts, feedback, actor, name: str) -> list[Refinement]:
        return stage_functions.refine_stage(
            self.backend, self.cfg, batch, attempts, feedback, actor, at.seed, at.step, name
        )

    def update_actor(self, at, actor, attempts, first_rewards: Scores, refined, refined_rewards: Scores | None):
        scored = ScoredBatch(
            attempts,
            first_rewards.rewards,
            refined=refined,
            refined_rewards=None if refined_rewards is None else refined_rewards.rewards,
        )
        return stage_functions.actor_update_stage(self.policy, self.cfg, actor, scored, at.out_dir)

    def critic_reward(
        self,
        at,
        spec,
        refined_rewards: Scores,
        lookahead_rewards: Scores | None,
        feedback,
        attempts,
        first_rewards: Scores,
    ) -> list[float]:
        return stage_functions.critic_reward_stage(
            self.cfg,
            spec.critic_reward,
            spec.critic_verdict_weight(self.cfg),
            refined_rewards.rewards,
            None if lookahead_rewards is None else lookahead_rewards.rewards,
            feedback,
            attempts,
            first_rewards.rewards,
            at.seed,
            at.step,
        )

    def update_critic(self, at, critic, feedback, critic_rewards: list[float]):
        return stage_functions.critic_update_stage(self.policy, self.cfg, critic, feedback, critic_rewards, at.out_dir)
