"""Seconds per phase of a training iteration, measured where the phases run and logged as `perf/<phase>_s`. The pattern
is verl's `marked_timer` (verl/utils/debug/performance.py: `with marked_timer("gen", timing_raw): ...`). Wall-clock
seconds of this process (`time.perf_counter`): a cached stage counts the time its cache lookup took."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

PHASES = (
    "sample",
    "feedback",
    "refine",
    "score",
    "actor_update",
    "lookahead",
    "critic_update",
    "evaluation",
    "storage",
)
"""The phases of an iteration: the actor's attempts (`sample`), the critic's feedback, the refinements under θ,
the verifier's and the critic's rewards (`score`), the actor's update, the refinements under θ⁺ and their rewards
(`lookahead`), the critic's update, the held-out evaluation and the trajectory store's writes (`storage`)."""


@contextlib.contextmanager
def timed(phase: str, timings: dict[str, float]) -> Iterator[None]:
    """Add the block's wall-clock seconds to `timings[phase]` (a phase may run more than once an iteration)."""
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r} (known: {', '.join(PHASES)})")
    t0 = time.perf_counter()
    try:
        yield
    finally:
        timings[phase] = timings.get(phase, 0.0) + time.perf_counter() - t0


def phase_metrics(timings: dict[str, float]) -> dict[str, float]:
    """`perf/<phase>_s` for every phase, 0.0 for one the iteration did not run (a method without it)."""
    return {f"perf/{phase}_s": timings.get(phase, 0.0) for phase in PHASES}
