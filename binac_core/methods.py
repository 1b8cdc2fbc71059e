"""What each `--method` trains and where its feedback comes from (the table in README / docs/algorithm.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from binac_core.config import METHODS, Config
from binac_core.errors import BinacError


@dataclass(frozen=True)
class MethodSpec:
    name: str
    feedback: str | None
    """None (no second turn), "critic" (the critic adapter writes it) or "fixed" (the self-correction text)."""
    train_actor: bool
    actor_second_turn: bool
    """The actor is also trained on its refinements y1 (conditioned on x, y0, z)."""
    train_critic: bool
    lookahead: bool
    """Refine again with the updated actor θ⁺ to form the critic's λ-penalised reward (bilevel methods)."""

    def actor_samples_per_iteration(self, cfg: Config) -> int:
        """Actor completions generated per iteration: attempts, refinements and look-ahead refinements."""
        attempts = cfg.train.batch_problems * cfg.train.group_size
        per_attempt = 0
        if self.feedback:
            fb = cfg.train.critic_group_size if self.feedback == "critic" else 1
            per_attempt = fb * (2 if self.lookahead else 1)
        return attempts * (1 + per_attempt)

    def iterations_for_budget(self, cfg: Config, budget: int) -> int:
        return max(1, math.ceil(budget / self.actor_samples_per_iteration(cfg)))


SPECS = {
    "grpo": MethodSpec("grpo", None, True, False, False, False),
    "fixed_critic": MethodSpec("fixed_critic", "critic", True, True, False, False),
    "binac": MethodSpec("binac", "critic", True, True, True, True),
    "critic_only": MethodSpec("critic_only", "critic", False, False, True, False),
    "self_correct": MethodSpec("self_correct", "fixed", True, True, False, False),
}
assert set(SPECS) == set(METHODS)


def method_spec(name: str) -> MethodSpec:
    if name not in SPECS:
        raise BinacError(f"unknown method {name!r} (known: {', '.join(METHODS)})")
    return SPECS[name]
