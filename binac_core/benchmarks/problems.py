"""The problems a run trains and evaluates on: the rows of the configured benchmark (`binac_core.benchmarks`)."""

from __future__ import annotations

from binac_core import benchmarks
from binac_core.foundation.config import Config


def load_problems(cfg: Config, split: str) -> list[dict]:
    """Rows with at least `id`, `question`, `answer`; the eval split is capped at `task.n_test` rows. `eval` means
    the held-out evaluation's problems: those of `task.eval_split` (`val` on a pilot or a control's tuning)."""
    return benchmarks.get(cfg.task.benchmark).load_rows(cfg.task, cfg.task.eval_split if split == "eval" else split)
