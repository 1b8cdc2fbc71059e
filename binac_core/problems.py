"""The problems a run trains and evaluates on: the synthetic family (built here) or a benchmark split."""

from __future__ import annotations

from binac_core.config import Config


def load_problems(cfg: Config, split: str) -> list[dict]:
    """Rows with at least `id`, `question`, `answer`; the eval split is capped at `task.n_test` rows."""
    if cfg.task.benchmark == "synthetic":
        from binac_core import synthetic

        return synthetic.make_split(cfg.task, split)
    from binac_core.data import load_benchmark

    rows = [dict(r) for r in load_benchmark(cfg.task.benchmark, split)]
    return rows[: cfg.task.n_test] if split == "eval" else rows
