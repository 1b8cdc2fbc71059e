"""What every stage task shares: the cache policy and how a task gets the config and the loaded model.

Cache keys are the task's inputs (config dict, file references with content digests, step, seed), the task's
source and a digest of the stage code (`tasks/` and the `binac_core` modules it imports:
`binac_core.provenance.stage_code_digest`), persisted under
`$BINAC_HOME/prefect`: re-running a command reuses every finished stage, a killed run resumes from the last
finished one, and an edit to library code (a loss, a grader, a prompt) recomputes every stage instead of serving
what the old code computed. `binac train|compare --fresh` recomputes everything even without an edit (after a
dependency upgrade, say). Inputs are never models or tensors (their pickles are not stable keys).
"""

from __future__ import annotations

import time

from prefect.cache_policies import INPUTS, TASK_SOURCE, CacheKeyFnPolicy

from binac_core.config import Config
from binac_core.generation import AdapterRef
from binac_core.provenance import stage_code_digest
from binac_core.runtime import policy_and_backend


def _library_code(task_ctx, inputs) -> str:
    return stage_code_digest()


CACHED = dict(cache_policy=INPUTS + TASK_SOURCE + CacheKeyFnPolicy(cache_key_fn=_library_code), persist_result=True)


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
