"""Which level trains at an iteration under `train.alternation` (the precursor's alternating schedule), and the exact
running totals it gives. They are pure functions of the schedule and the iteration number (1, 2, ...), so a resumed run
recomputes the same phases and counts.

With alternation (a, c), iterations cycle through a actor iterations (the critic frozen) then c critic iterations
(the actor frozen), from iteration 1: iteration s is an actor iteration when (s − 1) mod (a + c) < a. Without one
(None) every iteration trains both (`Phase.BOTH`). What a phase does to the iteration's stages is
binac_core/rl/loop.py's (`MethodSpec.keeps_actor_update_at`, `MethodSpec.trains_critic_at`); the authors'
precursor code alternates whole iterations so, t_L = 15 actor steps then t_H = 1 critic step by default
(../shared/notes/binac-paper.md, "Alternating updates").
"""

from __future__ import annotations

from binac_core.rl.kinds import Phase

Alternation = tuple[int, int] | None
"""(actor iterations, critic iterations) per cycle, each ≥ 1 (`TrainConfig.alternation`); None: no alternation."""


def phase_at(alternation: Alternation, step: int) -> Phase:
    """The phase of iteration `step` (1, 2, ...)."""
    if alternation is None:
        return Phase.BOTH
    a, c = alternation
    return Phase.ACTOR if (step - 1) % (a + c) < a else Phase.CRITIC


def actor_iterations_through(alternation: Alternation, step: int) -> int:
    """How many of the iterations 1 .. `step` train the actor (`step` without alternation; 0 at step 0):
    ⌊step / (a + c)⌋ · a + min(step mod (a + c), a)."""
    if alternation is None:
        return step
    a, c = alternation
    cycles, rest = divmod(step, a + c)
    return cycles * a + min(rest, a)


def step_of_actor_iteration(alternation: Alternation, n: int) -> int:
    """The iteration at which the actor trains for the `n`-th time (n ≥ 1): the first `step` with
    `actor_iterations_through(step)` = n; `n` itself without alternation."""
    if alternation is None:
        return n
    a, c = alternation
    cycles, rest = divmod(n - 1, a)
    return cycles * (a + c) + rest + 1


def last_step_within(alternation: Alternation, n: int) -> int:
    """The last iteration at which at most `n` actor iterations have run (n ≥ 0): the critic iterations that follow
    the n-th actor iteration included (they add no actor training samples)."""
    return step_of_actor_iteration(alternation, n + 1) - 1
