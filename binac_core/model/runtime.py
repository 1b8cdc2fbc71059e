"""The process's loaded model, and the one list of state binac keeps per process.

Pipeline stages ask for the model by (base folder, config, seed) and get the same `Policy` back, so models stay in
memory between stages while stages exchange only paths and digests.

Process-wide state, and why each piece is process-wide (everything else is passed explicitly):

- `LOADED` (`LoadedModel`, here): the model and its generation backend. Prefect tasks are called with JSON inputs
  (their cache keys: config, file references, step, seed), never with a model, whose pickle is not a stable key
  and whose reload costs seconds to minutes; the tasks of one run execute in one process and share it through
  this one object. It holds one model at a time (a new key replaces it), and it never decides a result: a stage
  syncs the adapters it needs from their digests (`Policy.sync`), whatever the previous stage left loaded.
- The grader counters (`binac_core.grading.counters`): graders run in pool threads deep below the stages, and every
  failure must be counted where it happens without threading a counter through each call. They only ever grow;
  a step's numbers are differences of two snapshots (`GraderCounts`), so nothing resets them behind a reader.
- torch's global RNG: transformers' sampler draws from it and takes no generator, so `HFBackend.generate`
  seeds it from the call's own generator and restores the state it found afterwards (`torch.random.fork_rng`):
  sampling is reproducible and leaves no trace on the caller's random stream.
- torch's intra-op thread count (`configure_threads`): a process setting of torch itself.
- vLLM's engine (`generation_vllm.shared_engine`), with `generation.backend: vllm`: its start costs ~50 s on CPU
  and a GPU's memory holds one, so the `VLLMBackend`s of a process share it while its settings stay the same
  (a new seed or run reuses it), and it is shut down at exit. It holds no weights a stage relies on: every request
  names its adapter by digest.
- glibc's allocator settings (`binac_core.model.memory`: large blocks mapped alone, set when a `Policy` loads): a setting
  of the C library, which has no other scope; it changes memory use, never a value.
- The sandbox's accepted isolation (`binac_core.grading.sandbox.isolation.ACCEPTED`, set by `accept` from the
  run's `grading.sandbox` when a train or evaluate flow starts): the sandbox runs in grader pool threads deep below the
  stages, and it must refuse the rlimits fallback unless the run accepted it, without threading the setting
  through every grading call. Default `bwrap` (bubblewrap required); the flows' plans check it before any compute.
- Caches of pure functions (`functools.cache`/`lru_cache`: source digests in `binac_core.foundation.provenance`, benchmark
  files in `binac_core.benchmarks.data`, the sandbox probe) and the math grader's worker pool (`binac_core.grading.math`):
  they hold no result that differs from recomputing it.

MLflow keeps its own per-process cache of tracking stores (`binac_core.store.tracking.client`); binac adds none.
"""

from __future__ import annotations

import os
from pathlib import Path

from binac_core.foundation.config import Config
from binac_core.model.generation import HFBackend


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


class LoadedModel:
    """One `Policy` and its generation backend, loaded for a (base folder, config digest, seed) key and replaced
    when another key is asked for."""

    def __init__(self):
        self.key: tuple | None = None
        self.policy = None
        self.backend = None

    def get(self, base_dir: str | Path, cfg: Config, seed: int):
        """(policy, backend) for the key, loading them unless they are the ones held."""
        key = (str(base_dir), cfg.digest(), seed)
        if self.key != key:
            from binac_core.model.policy import Policy

            self.key = self.policy = self.backend = None  # drop the old model before loading the next
            policy = Policy(base_dir, cfg, seed)
            self.policy, self.backend, self.key = policy, _backend(policy, base_dir, cfg), key
        return self.policy, self.backend


def _backend(policy, base_dir: str | Path, cfg: Config):
    if cfg.generation.backend != "vllm":
        return HFBackend(policy, cfg.generation.batch_size)
    from binac_core.model.generation import check_context, context_length
    from binac_core.model.generation_vllm import VLLMBackend

    # HFBackend checks the answer budgets against the loaded model's context itself; so does this.
    for field in ("max_new_tokens", "feedback_max_new_tokens"):
        check_context(getattr(cfg.generation, field), context_length(policy.model), f"generation.{field}")
    return VLLMBackend(base_dir, cfg, policy)


LOADED = LoadedModel()
"""The process's loaded model (see the module docstring for why it is process-wide)."""


def policy_and_backend(base_dir: str | Path, cfg: Config, seed: int):
    """(policy, backend) for this run, loaded once per process (`LOADED`)."""
    configure_threads()
    return LOADED.get(base_dir, cfg, seed)
