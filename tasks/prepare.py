"""Stage 0: the base model and the problem splits."""

from __future__ import annotations

from prefect import task

from binac_core.files import write_json
from binac_core.problems import load_problems
from binac_core.workspace import workspace
from tasks._common import CACHED, config


@task(name="build-base-model", **CACHED)
def build_base_model(cfg_d: dict) -> dict:
    """The tiny preset's base model, pretrained here once per model config; `smol`, converted here once from its
    packaged GGUF (binac_core/smol.py); a hub model is used as it is."""
    cfg = config(cfg_d)
    if cfg.model.source == "hub":
        return {"path": cfg.model.hub_id, "digest": cfg.model.hub_id}
    from binac_core.policy import file_digest

    if cfg.model.source == "smol":
        from binac_core.smol import checkpoint

        out = checkpoint()
        return {"path": str(out), "digest": file_digest(out)}
    from binac_core.pretrain import build_base_model as build
    from binac_core.runtime import configure_threads, pretraining_threads

    out = workspace().base_model_dir(cfg.base_digest())
    if not (out / "config.json").exists():
        configure_threads(pretraining_threads())
        try:
            build(cfg, out)
        finally:
            configure_threads()
    return {"path": str(out), "digest": file_digest(out)}


@task(name="prepare-data", **CACHED)
def prepare_data(cfg_d: dict, splits: tuple[str, ...] = ("train", "eval")) -> dict:
    """Problems written once per task config: {"train": ref, "eval": ref} (the splits asked for)."""
    cfg = config(cfg_d)
    folder = workspace().home / "data" / f"{cfg.task.benchmark}-{cfg.data_digest()}"
    return {split: write_json(folder / f"{split}.json", load_problems(cfg, split)) for split in splits}


@task(name="init-adapters", **CACHED)
def init_adapters(cfg_d: dict, base: dict, seed: int, out_dir: str) -> dict:
    """Fresh actor and critic LoRA adapters (seeded; both start as the identity on the base model)."""
    from dataclasses import asdict
    from pathlib import Path

    from tasks._common import loaded

    policy, _ = loaded(cfg_d, base, seed)
    return {name: asdict(policy.save(name, Path(out_dir) / name)) for name in ("actor", "critic")}
