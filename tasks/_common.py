"""What every stage task shares: the cache policy and how a task gets the config and the loaded model.

Cache keys are the task's inputs (config dict, stage files and adapters with content digests: the frozen records
of `binac_core.model.stage_io`, step, seed), the task's source and a digest of the stage code (`tasks/` and the
`binac_core` modules it imports: `binac_core.foundation.provenance.stage_code_digest`), persisted under
`$BINAC_HOME/prefect`: re-running a command reuses every finished stage, a killed run resumes from the last
finished one, and a library edit recomputes every stage. The inputs are hashed with every path named by its
store-relative key (`binac_core.foundation.store_keys`: a stage file by key and digest, an output folder by key),
so a stage has one cache key under any `$BINAC_HOME` and from any checkout path. `binac train|compare --fresh`
recomputes everything even without an edit. The base model is the one stage Prefect does not cache
(`tasks.prepare.build_base_model`: its folder is a cache of its own).
A cached stage whose output was deleted since fails where the output is read, in one line naming the file and
`--fresh` (`binac_core.foundation.files.read_json`, `Policy.sync`). Inputs are
never models or tensors (their pickles are not stable keys): the model is the process's (`binac_core.model.runtime`)."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass

from prefect.cache_policies import TASK_SOURCE, CacheKeyFnPolicy, CachePolicy
from prefect.utilities.hashing import hash_objects

from binac_core.foundation.config import Config
from binac_core.foundation.files import StageFile
from binac_core.foundation.provenance import stage_code_digest
from binac_core.foundation.store_keys import inputs_digest
from binac_core.foundation.workspace import workspace
from binac_core.model.runtime import policy_and_backend


def _library_code(task_ctx, inputs) -> str:
    return stage_code_digest()


@dataclass
class StoreInputs(CachePolicy):
    """Prefect's INPUTS policy with paths named by their store-relative keys (`inputs_digest`); a value of a type
    `binac_core.foundation.store_keys.portable` does not know is hashed as INPUTS would hash it."""

    def compute_key(self, task_ctx, inputs, flow_parameters, **kwargs) -> str | None:
        if not inputs:
            return None
        return inputs_digest(inputs, workspace(), other=lambda v: hash_objects(v, raise_on_failure=True))


CACHED = dict(
    cache_policy=StoreInputs() + TASK_SOURCE + CacheKeyFnPolicy(cache_key_fn=_library_code), persist_result=True
)


def config(cfg_d: dict) -> Config:
    """The run's config from the dict the tasks take, validated once per process and config (`Config` is frozen,
    so the one instance is shared)."""
    return _validated(json.dumps(cfg_d, sort_keys=True))


@functools.lru_cache(maxsize=8)
def _validated(cfg_json: str) -> Config:
    return Config.model_validate(json.loads(cfg_json))


def loaded(cfg_d: dict, base: StageFile, seed: int):
    """(policy, backend) for this run, loaded once per process."""
    return policy_and_backend(base.path, config(cfg_d), seed)
