"""The problem stream driven by the method's own actor (`train.stream_target`): which difficulty each training
iteration draws its problems at, from the actor's training accuracy so far.

A staircase on the difficulty (the number of steps of a synthetic problem), as curricula that keep a learner's
success rate near a target do: the stream starts at `task.difficulty` clamped into `train.stream_difficulties`
(low, high); after each iteration it holds the accuracies (mean r0 of the iteration's attempts, all of one
difficulty) of the iterations at the current difficulty since it last moved. Once it holds W = `stream_window` of
them it compares their mean m with the target T: m > T + band → one step harder, m < T − band → one step easier
(each within the range; a move resets the window), else the window slides (the oldest is dropped). Every
iteration has the same number of attempts, so the window's mean is also the pooled accuracy of its attempts.

A pure function of the config and the run's history ((difficulty, accuracy) of the iterations so far, which are
themselves determined by the run's seed and the cached stages), so a resumed run draws the same problems. A method
whose actor is never trained (critic_only) stays at the start: its accuracy would not move toward the target. The
held-out evaluation does not read it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from binac_core.foundation.config import Config
    from binac_core.rl.methods import MethodSpec


def start_difficulty(cfg: Config) -> int:
    """`task.difficulty` clamped into `train.stream_difficulties`."""
    low, high = cfg.train.stream_difficulties
    return min(max(cfg.task.difficulty, low), high)


def difficulty_at(cfg: Config, spec: MethodSpec, history: Sequence[tuple[int, float]]) -> int | None:
    """The difficulty of the next iteration after `history`, the (difficulty, training accuracy) of each iteration
    so far in order (module docstring); None when the stream is off (`train.stream_target` None). A `history`
    whose difficulties are not the ones this function chose is refused (ValueError)."""
    t = cfg.train
    if t.stream_target is None:
        return None
    d = start_difficulty(cfg)
    if not spec.train_actor:
        return d
    low, high = t.stream_difficulties
    window: list[float] = []
    for step, (drawn, acc) in enumerate(history, start=1):
        if drawn != d:
            raise ValueError(f"iteration {step} drew difficulty {drawn}, the stream chose {d}")
        window.append(acc)
        if len(window) < t.stream_window:
            continue
        mean = sum(window) / len(window)
        if mean > t.stream_target + t.stream_band and d < high:
            d, window = d + 1, []
        elif mean < t.stream_target - t.stream_band and d > low:
            d, window = d - 1, []
        else:
            window.pop(0)
    return d
