"""The process's loaded model: pipeline stages ask for it by (base folder, config, seed) and get the same
`Policy` back, so models stay in memory between stages while stages exchange only paths and digests."""

from __future__ import annotations

import os
from pathlib import Path

from binac_core.config import Config
from binac_core.generation import HFBackend

_CURRENT: dict = {}


def configure_threads(default: int = 1) -> int:
    """torch intra-op threads: `BINAC_TORCH_THREADS` when set, else `default` (1 for the pipeline's stages).

    The tiny models' matrices are too small for intra-op parallelism to pay in generation and RL updates, and
    on a busy machine two spinning OpenMP threads per process ran generation 5-8x slower than one (measured:
    343 vs 35-70 tokens/s on the micro model under load). Pretraining, with its larger batches, asks for more.
    """
    import torch

    n = int(os.environ.get("BINAC_TORCH_THREADS", default))
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n


def pretraining_threads() -> int:
    """Threads for pretraining the tiny base: every core, capped at 4 (measured on a 2-core machine: the tiny
    preset's 2500 steps took 197-229 s idle with 2 threads, 345 s with 1 while a second job ran; the same losses
    either way). The cap is a guess for these small matrices, not a measurement."""
    return max(1, min(4, len(os.sched_getaffinity(0))))


def policy_and_backend(base_dir: str | Path, cfg: Config, seed: int):
    configure_threads()
    key = (str(base_dir), cfg.digest(), seed)
    if _CURRENT.get("key") != key:
        from binac_core.policy import Policy

        _CURRENT.clear()
        policy = Policy(base_dir, cfg, seed)
        if cfg.generation.backend == "vllm":
            from binac_core.generation import check_context, context_length
            from binac_core.generation_vllm import VLLMBackend

            # HFBackend checks the answer budgets against the loaded model's context itself; so does this.
            for field in ("max_new_tokens", "feedback_max_new_tokens"):
                check_context(getattr(cfg.generation, field), context_length(policy.model), f"generation.{field}")
            backend = VLLMBackend(base_dir, cfg)
        else:
            backend = HFBackend(policy, cfg.generation.batch_size)
        _CURRENT.update(key=key, policy=policy, backend=backend)
    return _CURRENT["policy"], _CURRENT["backend"]
