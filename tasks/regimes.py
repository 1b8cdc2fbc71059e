"""Stage 0 of a study: the base model measured at one difficulty (the regime rule's statistic and the feedback
bounds, `binac_core.studies.regimes`), before any RL run."""

from __future__ import annotations

from prefect import task

from binac_core.benchmarks.problems import load_problems
from binac_core.foundation.files import StageFile
from binac_core.studies.regimes import measure_base
from tasks._common import CACHED, config, loaded


@task(name="measure-base", **CACHED)
def measure_base_at(cfg_d: dict, base: StageFile, group_size: int, seed: int, bounds: bool) -> dict:
    """`cfg_d` carries the difficulty (`task.difficulty`); the validation split's `task.n_val` problems are used
    (the regimes and gates are choices made before the main runs: never on the split results are reported on)."""
    cfg = config(cfg_d)
    _, backend = loaded(cfg_d, base, seed)
    return measure_base(
        backend,
        load_problems(cfg, "val"),
        group_size=group_size,
        gen=cfg.generation,
        seed=seed,
        bounds=bounds,
        benchmark=cfg.task.benchmark,
    )
