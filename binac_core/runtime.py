"""The process's loaded model: pipeline stages ask for it by (base folder, config, seed) and get the same
`Policy` back, so models stay in memory between stages while stages exchange only paths and digests."""

from __future__ import annotations

from pathlib import Path

from binac_core.config import Config
from binac_core.generation import HFBackend

_CURRENT: dict = {}


def policy_and_backend(base_dir: str | Path, cfg: Config, seed: int):
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
