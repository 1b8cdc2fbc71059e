"""What every stage task shares: the cache policy and how a task gets the config and the loaded model.

Cache keys are the task's inputs (config dict, file references with content digests, step, seed) plus the task's
source, persisted under `$BINAC_HOME/prefect`, so re-running a command reuses every finished stage and a killed
run resumes from the last finished one. Inputs are never models or tensors (their pickles are not stable keys).
A change inside `binac_core` that a task calls does not change its key: delete `$BINAC_HOME/prefect` (or use a
fresh `$BINAC_HOME`) after editing library code.
"""

from __future__ import annotations

import time

from prefect.cache_policies import INPUTS, TASK_SOURCE

from binac_core.config import Config
from binac_core.generation import AdapterRef
from binac_core.runtime import policy_and_backend

CACHED = dict(cache_policy=INPUTS + TASK_SOURCE, persist_result=True)


def config(cfg_d: dict) -> Config:
    return Config.model_validate(cfg_d)


def loaded(cfg_d: dict, base: dict, seed: int):
    """(policy, backend) for this run, loaded once per process."""
    return policy_and_backend(base["path"], config(cfg_d), seed)


def ref(d: dict | None) -> AdapterRef | None:
    return None if d is None else AdapterRef(d["name"], d["path"], d["digest"])


def perf(records: list[dict], t0: float) -> dict:
    """Generated tokens and seconds of a generation stage (for perf/gen_tokens_per_s)."""
    return {"tokens": sum(len(r["token_ids"]) for r in records), "seconds": time.time() - t0}
