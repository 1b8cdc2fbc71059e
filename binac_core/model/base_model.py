"""The run's base model as a stage output (a `StageFile`: its folder and content digest): a hub model as it is (its
id is its digest); `smol`, converted once from its packaged GGUF (`binac_core.model.smol`); the tiny presets' model,
pretrained here once per model config into the workspace's model folder (`binac_core.model.pretrain`), with every core
pretraining may use."""

from __future__ import annotations

from binac_core.foundation.config import Config
from binac_core.foundation.files import StageFile, file_digest
from binac_core.foundation.workspace import Workspace


def base_model(cfg: Config, ws: Workspace) -> StageFile:
    if cfg.model.source == "hub":
        return StageFile(cfg.model.hub_id, cfg.model.hub_id)
    if cfg.model.source == "smol":
        from binac_core.model.smol import checkpoint

        out = checkpoint()
        return StageFile(str(out), file_digest(out))
    from binac_core.model.pretrain import build_base_model
    from binac_core.model.runtime import configure_threads, pretraining_threads

    out = ws.base_model_dir(cfg.base_digest())
    if not (out / "config.json").exists():
        configure_threads(pretraining_threads())
        try:
            build_base_model(cfg, out)
        finally:
            configure_threads()
    return StageFile(str(out), file_digest(out))
