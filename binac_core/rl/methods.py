"""What each `--method` trains and where its feedback comes from (the table in README / docs/algorithm.md).

The three `binac` variants differ only in the critic's reward, since the paper's exact form is not recoverable
(docs/algorithm.md): `binac` the first-order value-penalty form (`losses.penalty_reward`); `binac_lam0` λ = 0, i.e. r1(θ) alone with no look-ahead (the authors' precursor code); `binac_after` r1(θ⁺)
alone, the "downstream effect on the actor after adaptation". `binac_disc` is `binac` whose critic is also
rewarded for a verdict that matches the verifier (weight 1: Critique-RL's discrimination reward;
`critic_reward.verdict_bonus`). `oracle_critic` trains the actor exactly as
`fixed_critic` does, on the rule-based oracle's feedback (synthetic task only): a ceiling, not a competitor."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from binac_core.errors import BinacError
from binac_core.rl import schedule
from binac_core.rl.kinds import CriticRewardForm, FeedbackSource, Phase

if TYPE_CHECKING:
    from binac_core.foundation.config import Config


@dataclass(frozen=True, kw_only=True)
class MethodSpec:
    name: str
    feedback: FeedbackSource | None = None
    """Where the second turn's feedback comes from; None: no second turn (GRPO)."""
    train_actor: bool = True
    actor_second_turn: bool = False
    """The actor is also trained on its refinements y1 (conditioned on x, y0, z)."""
    train_critic: bool = False
    """The critic adapter is trained (exactly when `feedback` is `CRITIC_TRAINED`)."""
    lookahead: bool = False
    """Refine again with the updated actor θ⁺ to form the critic's reward (bilevel methods)."""
    critic_reward: CriticRewardForm = CriticRewardForm.R1
    """How a feedback is rewarded (`CriticRewardForm`: r1 under θ, the value-penalty form, or r1(θ⁺) alone; the
    last two need the look-ahead; `binac_core.rl.critic_reward`)."""
    verdict_weight: float | None = None
    """w of the critic's verdict bonus, w × [verdict matches the verifier] (`critic_reward.verdict_bonus`); None: the
    config's `train.critic_verdict_weight` (default 0)."""

    def __post_init__(self):
        if self.train_critic != (self.feedback is FeedbackSource.CRITIC_TRAINED):
            raise ValueError(f"method {self.name}: a trained critic is exactly a CRITIC_TRAINED feedback source")

    @property
    def eval_feedback(self) -> FeedbackSource:
        """The feedback source the method is evaluated with: the one it trains with; for a method without a second
        turn (grpo) the initial critic's, so its feedback protocols show what fixed_critic's source does for it."""
        return self.feedback or FeedbackSource.CRITIC_BASE

    def critic_verdict_weight(self, cfg: Config) -> float:
        """The verdict bonus's weight this method's critic reward uses."""
        return cfg.train.critic_verdict_weight if self.verdict_weight is None else self.verdict_weight

    def trains_critic_at(self, cfg: Config, step: int) -> bool:
        """Whether iteration `step` (1, 2, ...) updates the critic: the method trains it, `step` is a multiple of
        `train.critic_every` (the two-timescale schedule) and is not an actor iteration of `train.alternation`
        (`phase_at`). It says nothing of the feedback, which every iteration of a method with a second turn
        samples."""
        return self.train_critic and step % cfg.train.critic_every == 0 and self.phase_at(cfg, step) != Phase.ACTOR

    def alternation(self, cfg: Config) -> schedule.Alternation:
        """`train.alternation` where the method trains both the actor and the critic (the binac variants), else
        None: a method that trains one level only has nothing to alternate."""
        return cfg.train.alternation if self.train_actor and self.train_critic else None

    def phase_at(self, cfg: Config, step: int) -> Phase:
        """Which level trains at iteration `step` (`schedule.phase_at` of `alternation`)."""
        return schedule.phase_at(self.alternation(cfg), step)

    def keeps_actor_update_at(self, cfg: Config, step: int) -> bool:
        """Whether iteration `step` trains the actor: the method trains it and `step` is not a critic iteration."""
        return self.train_actor and self.phase_at(cfg, step) != Phase.CRITIC

    def updates_actor_at(self, cfg: Config, step: int) -> bool:
        """Whether iteration `step` computes the actor's update θ → θ⁺: where it keeps it, and in a critic
        iteration of a method with a look-ahead, whose critic reward needs θ⁺ (discarded after the look-ahead)."""
        return self.keeps_actor_update_at(cfg, step) or (self.train_actor and self.lookahead)

    def actor_samples_through(self, cfg: Config, step: int) -> int:
        """The actor training samples of iterations 1 .. `step`, exact: `actor_train_samples_per_iteration` times
        the iterations that train the actor (`schedule.actor_iterations_through`)."""
        per_iteration = self.actor_train_samples_per_iteration(cfg)
        return per_iteration * schedule.actor_iterations_through(self.alternation(cfg), step)

    def actor_train_samples_per_iteration(self, cfg: Config) -> int:
        """The sequences the actor's loss is computed on per iteration (the actor-samples axis): its B·G attempts
        (B = `train.batch_problems`, G = `train.group_size`) when it trains the actor, plus the B·G·K refinements
        (K = `train.critic_group_size`) when it also trains on its second turn. The look-ahead refinements are
        never counted: they are sampled under θ⁺ only to reward the critic, the actor is not trained on them.
        0 for a method that never trains the actor (critic_only). Evaluation samples are not counted."""
        if not self.train_actor:
            return 0
        attempts = cfg.train.batch_problems * cfg.train.group_size
        return attempts * (1 + (cfg.train.critic_group_size if self.actor_second_turn else 0))

    def generated_samples_per_iteration(self, cfg: Config) -> int:
        """Every sequence sampled from the actor or the critic per iteration (the compute axis): the B·G attempts;
        with a second turn the B·G·K refinements, plus the B·G·K feedbacks when the critic writes them (a fixed
        instruction or the oracle's feedback is written, not sampled, and is not counted); with the look-ahead
        the B·G·K refinements under θ⁺. Evaluation samples are not counted."""
        attempts = cfg.train.batch_problems * cfg.train.group_size
        if not self.feedback:
            return attempts
        per_attempt = cfg.train.critic_group_size * (1 + self.feedback.sampled + self.lookahead)
        return attempts * (1 + per_attempt)

    def iterations_for_budget(self, cfg: Config, budget: int) -> int:
        """The whole iterations whose actor training samples fit in `budget` (the largest number; a run never
        exceeds its budget). A method that never trains the actor (critic_only, 0 per iteration) runs the
        iterations GRPO would: `budget` // (B·G), its B·G attempts counted as GRPO's. Under `train.alternation`
        the critic iterations add no actor samples: the last iteration within the budget
        (`schedule.last_step_within`), the critic iterations after the last actor iteration included. A budget
        smaller than one iteration is refused, one line naming the method. Generated samples play no part here."""
        grpo = cfg.train.batch_problems * cfg.train.group_size
        per_iteration = self.actor_train_samples_per_iteration(cfg) or grpo
        if budget < per_iteration:
            raise BinacError(
                f"an actor-sample budget of {budget} is less than one iteration of {self.name} "
                f"({per_iteration} actor training samples)"
            )
        return schedule.last_step_within(self.alternation(cfg), budget // per_iteration)


_CRITIC, _TRAINED = FeedbackSource.CRITIC_BASE, FeedbackSource.CRITIC_TRAINED
_BILEVEL = {"feedback": _TRAINED, "actor_second_turn": True, "train_critic": True, "lookahead": True}
SPECS = {
    spec.name: spec
    for spec in (
        MethodSpec(name="grpo"),
        MethodSpec(name="fixed_critic", feedback=_CRITIC, actor_second_turn=True),
        MethodSpec(name="binac", **_BILEVEL, critic_reward=CriticRewardForm.PENALTY),
        MethodSpec(name="binac_lam0", **{**_BILEVEL, "lookahead": False}, critic_reward=CriticRewardForm.R1),
        MethodSpec(name="binac_after", **_BILEVEL, critic_reward=CriticRewardForm.AFTER),
        MethodSpec(name="critic_only", feedback=_TRAINED, train_actor=False, train_critic=True),
        MethodSpec(name="self_correct", feedback=FeedbackSource.FIXED, actor_second_turn=True),
        MethodSpec(name="oracle_critic", feedback=FeedbackSource.ORACLE, actor_second_turn=True),
        MethodSpec(name="binac_disc", **_BILEVEL, critic_reward=CriticRewardForm.PENALTY, verdict_weight=1.0),
    )
}
METHODS = tuple(SPECS)
"""Every method's name, in the order of the table in README / docs/algorithm.md: the one list config, CLI and
tests read."""


def method_spec(name: str) -> MethodSpec:
    if name not in SPECS:
        raise BinacError(f"unknown method {name!r} (known: {', '.join(METHODS)})")
    return SPECS[name]
