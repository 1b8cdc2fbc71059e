"""Stage 0: the base model, the problem splits and the initial adapters."""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from binac_core.benchmarks.problems import load_problems
from binac_core.foundation.files import StageFile, write_json
from binac_core.foundation.workspace import workspace
from binac_core.model.base_model import base_model
from binac_core.model.base_model import base_weights as weights_of
from binac_core.model.stage_io import AdapterRef, AdapterRole
from tasks._common import CACHED, config, loaded


@task(name="build-base-model", cache_policy=NO_CACHE)
def build_base_model(cfg_d: dict) -> StageFile:
    """The base model's folder and digest (`binac_core.model.base_model`): a hub model as it is, the others built
    once; one named by its weights (`model.base_weights`) found, never built.

    Not cached by Prefect: the folder is a cache of its own, named by the config's digest and built when its
    `config.json` is missing, so a run always gets a folder that exists (one deleted from `$BINAC_HOME/models` or
    `BINAC_MODEL_CACHE` is built again) and the digest of what is in it, which keys the stages downstream."""
    return base_model(config(cfg_d), workspace())


@task(name="base-weights", cache_policy=NO_CACHE)
def base_weights(base: StageFile) -> str:
    """The sha256 of the base's weights, the base's identity (`binac_core.model.weights`). Not cached by Prefect:
    the library caches it by file identity, so a base rebuilt in the same folder is hashed again."""
    return weights_of(base, workspace())


@task(name="prepare-data", **CACHED)
def prepare_data(cfg_d: dict, splits: tuple[str, ...] = ("train", "eval")) -> dict[str, StageFile]:
    """Problems written once per task config: {"train": file, "eval": file} (the splits asked for)."""
    cfg = config(cfg_d)
    folder = workspace().problems_dir(cfg.task.benchmark, cfg.data_digest())
    return {split: write_json(folder / f"{split}.json", load_problems(cfg, split)) for split in splits}


@task(name="init-adapters", **CACHED)
def init_adapters(cfg_d: dict, base: StageFile, seed: int, out_dir: str) -> dict[AdapterRole, AdapterRef]:
    """Fresh actor and critic LoRA adapters, by role (seeded; both start as the identity on the base model)."""
    policy, _ = loaded(cfg_d, base, seed)
    return {role: policy.save(role, Path(out_dir) / role) for role in AdapterRole}
