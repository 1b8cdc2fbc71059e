"""The process's loaded model: pipeline stages ask for it by (base folder, config, seed) and get the same
`Policy` back, so models stay in memory between stages while stages exchange only paths and digests."""

from __future__ import annotations

import os
from pathlib import Path

from binac_core.config import Config
from binac_core.generation import HFBackend

_CURRENT: dict = {}


def configure_threads() -> int:
    """torch intra-op threads: `BINAC_TORCH_THREADS`, default 1. The tiny models' matrices are too small for
    intra-op parallelism to pay, and on a busy machine two spinning OpenMP threads per process ran generation
    5-8x slower than one (measured: 343 vs 35-70 tokens/s on the micro model under load)."""
    import torch

    n = int(os.environ.get("BINAC_TORCH_THREADS", "1"))
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n


def policy_and_backend(base_dir: str | Path, cfg: Config, seed: int):
    configure_threads()
    key = (str(base_dir), cfg.digest(), seed)
    if _CURRENT.get("key") != key:
        from binac_core.policy import Policy

        _CURRENT.clear()
        policy = Policy(base_dir, cfg, seed)
        if cfg.generation.backend == "vllm":
            from binac_core.generation_vllm import VLLMBackend

            backend = VLLMBackend(base_dir, cfg)
        else:
            backend = HFBackend(policy, cfg.generation.batch_size)
        _CURRENT.update(key=key, policy=policy, backend=backend)
    return _CURRENT["policy"], _CURRENT["backend"]
