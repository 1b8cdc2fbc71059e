"""Fresh-process cost of one GRPO iteration, binac vs TRL: import time, setup time, peak memory.

Each side runs in its own child process (so neither pays for the other's imports or models) and does: import its
stack, build its loop on the base model folder, run exactly one iteration (the first one, with its one-time
allocations: optimizer state, TRL's `train()` preparation). Reported: seconds to import, seconds to set up,
seconds of that first iteration, peak RSS before the iteration (imports + model) and after it (the process's
RSS high-water mark, `common.peak_rss_mib`, so the growth is the iteration's extra peak). One process per side and run,
so import and setup times are single samples on a shared machine, not medians.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from bench.common import peak_rss_mib


def _torch(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


def binac_child(cfg, base_dir: Path, threads: int) -> dict:
    """binac's side: `Policy` + `HFBackend` + the initial actor checkpoint, then one iteration.
    Import time = torch + binac_core's policy, generation, update and grading modules."""
    t0 = time.perf_counter()
    _torch(threads)
    import binac_core.model.policy  # noqa: F401
    from bench.grpo import BinacGRPO, train_rows

    import_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory(prefix="binac-bench-mem-") as tmp:
        t0 = time.perf_counter()
        loop = BinacGRPO(cfg, base_dir, Path(tmp), train_rows(cfg))
        setup_s = time.perf_counter() - t0
        before = peak_rss_mib()
        t0 = time.perf_counter()
        loop.iteration()
        return _result(import_s, setup_s, time.perf_counter() - t0, before)


def trl_child(cfg, base_dir: Path, threads: int) -> dict:
    """TRL's side: `GRPOTrainer(...)` construction, then `train()` for one optimizer step.
    Import time = torch + trl's GRPOTrainer (trl imports lazily: the class pulls in transformers' Trainer,
    accelerate, datasets, peft); the harness's own module is imported after the clock stops."""
    t0 = time.perf_counter()
    _torch(threads)
    from trl import GRPOConfig, GRPOTrainer  # noqa: F401

    import_s = time.perf_counter() - t0
    from bench.grpo import train_rows, trl_trainer

    with tempfile.TemporaryDirectory(prefix="binac-bench-mem-") as tmp:
        t0 = time.perf_counter()
        trainer = trl_trainer(cfg, base_dir, train_rows(cfg), Path(tmp), max_steps=1)
        setup_s = time.perf_counter() - t0
        before = peak_rss_mib()
        t0 = time.perf_counter()
        trainer.train()
        return _result(import_s, setup_s, time.perf_counter() - t0, before)


def _result(import_s: float, setup_s: float, iter_s: float, before: float) -> dict:
    import torch

    return {
        "threads_end": torch.get_num_threads(),
        "import_s": import_s,
        "setup_s": setup_s,
        "first_iter_s": iter_s,
        "rss_before_mib": before,
        "rss_peak_mib": peak_rss_mib(),
    }
