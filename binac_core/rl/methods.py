"""What each `--method` trains and where its feedback comes from (the table in README / docs/algorithm.md).

The three `binac` variants differ only in the critic's reward, since the paper's exact form is not recoverable
(docs/algorithm.md): `binac` the first-order value-penalty form (1 + μ)·r1(θ) − μ·r1(θ⁺), μ = λ(1 + α);
`binac_lam0` λ = 0, i.e. r1(θ) alone with no look-ahead (the authors' precursor code); `binac_after` r1(θ⁺)
alone, the "downstream effect on the actor after adaptation". `binac_disc` is `binac` whose critic is also
rewarded for a verdict that matches the verifier (weight 1: Critique-RL's discrimination reward;
`batches.verdict_bonus`). `oracle_critic` trains the actor exactly as
`fixed_critic` does, on the rule-based oracle's feedback (synthetic task only): a ceiling, not a competitor."""

from __future__ import annotations

from dataclasses import dataclass

from binac_core.errors import BinacError
from binac_core.runs.config import METHODS, Config


@dataclass(frozen=True)
class MethodSpec:
    name: str
    feedback: str | None
    """None (no second turn), "critic" (the critic adapter writes it), "fixed" (the self-correction text) or
    "oracle" (the rule-based oracle's feedback naming the first wrong step; synthetic task only)."""
    train_actor: bool
    actor_second_turn: bool
    """The actor is also trained on its refinements y1 (conditioned on x, y0, z)."""
    train_critic: bool
    lookahead: bool
    """Refine again with the updated actor θ⁺ to form the critic's reward (bilevel methods)."""
    critic_reward: str = "r1"
    """How a feedback is rewarded: "r1" (the refinement's reward under θ), "penalty" ((1 + μ)·r1(θ) − μ·r1(θ⁺))
    or "after" (r1(θ⁺) alone); the last two need the look-ahead."""
    verdict_weight: float | None = None
    """w of the critic's verdict bonus, w × [verdict matches the verifier] (`batches.verdict_bonus`); None: the
    config's `train.critic_verdict_weight` (default 0)."""

    def critic_verdict_weight(self, cfg: Config) -> float:
        """The verdict bonus's weight this method's critic reward uses."""
        return cfg.train.critic_verdict_weight if self.verdict_weight is None else self.verdict_weight

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
        per_attempt = cfg.train.critic_group_size * (1 + (self.feedback == "critic") + self.lookahead)
        return attempts * (1 + per_attempt)

    def iterations_for_budget(self, cfg: Config, budget: int) -> int:
        """The whole iterations whose actor training samples fit in `budget` (the largest number; a run never
        exceeds its budget). A method that never trains the actor (critic_only, 0 per iteration) runs the
        iterations GRPO would: `budget` // (B·G), its B·G attempts counted as GRPO's. A budget smaller than one
        iteration is refused, one line naming the method. Generated samples play no part here."""
        grpo = cfg.train.batch_problems * cfg.train.group_size
        per_iteration = self.actor_train_samples_per_iteration(cfg) or grpo
        if budget < per_iteration:
            raise BinacError(f"an actor-sample budget of {budget} is less than one iteration of {self.name} "
                             f"({per_iteration} actor training samples)")
        return budget // per_iteration

SPECS = {
    "grpo": MethodSpec("grpo", None, True, False, False, False),
    "fixed_critic": MethodSpec("fixed_critic", "critic", True, True, False, False),
    "binac": MethodSpec("binac", "critic", True, True, True, True, "penalty"),
    "binac_lam0": MethodSpec("binac_lam0", "critic", True, True, True, False, "r1"),
    "binac_after": MethodSpec("binac_after", "critic", True, True, True, True, "after"),
    "critic_only": MethodSpec("critic_only", "critic", False, False, True, False),
    "self_correct": MethodSpec("self_correct", "fixed", True, True, False, False),
    "oracle_critic": MethodSpec("oracle_critic", "oracle", True, True, False, False),
    "binac_disc": MethodSpec("binac_disc", "critic", True, True, True, True, "penalty", verdict_weight=1.0),
}
assert set(SPECS) == set(METHODS)


def method_spec(name: str) -> MethodSpec:
    if name not in SPECS:
        raise BinacError(f"unknown method {name!r} (known: {', '.join(METHODS)})")
    return SPECS[name]
