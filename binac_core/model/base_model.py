"""The run's base model as a stage output (a `StageFile`: its folder and the digest that keys the stages downstream),
and its identity, the sha256 of its weights (`binac_core.model.weights`). The base is one of:

- a hub model as it is (its id is its digest);
- `smol`, converted once from its packaged GGUF (`binac_core.model.smol`);
- the tiny presets' model, pretrained here once per model config into the workspace's models folder
  (`binac_core.model.pretrain`; the folder is named by `Config.base_digest`), with every core pretraining may use;
- with `model.base_weights` set: for `tiny`, the folder whose weights hash to it, found in the workspace's models
  folder or a folder of `BINAC_BASE_PATH` and never built, its config.json checked against the model section, its
  digest the full weights hash (so the stages downstream are keyed by the weights, not by a folder's name or
  metadata); for `hub` and `smol`, the model the source names, refused in one line unless it hashes to it, its
  digest the weights hash too.

With an object store (`BINAC_STORE`, `binac_core.model.base_objects`), a tiny base travels by its weights hash: one
this home lacks is fetched, digest checked, before anything is built (a config's base by the store's index of the
config's digest, a named base by its hash or prefix), and a base built or found here is put there (with the
config's index entry) for the next host. Hub and smol models are not put: each host gets them from their source.

Weights hashes are cached in `$BINAC_HOME/weights_sha256.json` (by file identity)."""

from __future__ import annotations

import json
from pathlib import Path

from binac_core.errors import BinacError
from binac_core.foundation.config import Config
from binac_core.foundation.faults import fault_point
from binac_core.foundation.files import StageFile, file_digest
from binac_core.foundation.workspace import Workspace
from binac_core.model import base_objects, weights

ARCHITECTURE = {
    "architecture": "model_type",
    "hidden_size": "hidden_size",
    "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads",
    "intermediate_size": "intermediate_size",
    "max_positions": "max_position_embeddings",
}
"""`model` fields a tiny base named by its weights must match, and the config.json key each is saved under."""


def base_model(cfg: Config, ws: Workspace) -> StageFile:
    """The base the config names (the module docstring), built when it is a tiny model not built yet."""
    if cfg.model.base_weights:
        return named_base(cfg, ws)
    return _from_settings(cfg, ws)


def _from_settings(cfg: Config, ws: Workspace) -> StageFile:
    if cfg.model.source == "hub":
        return StageFile(cfg.model.hub_id, cfg.model.hub_id)
    if cfg.model.source == "smol":
        from binac_core.model.smol import checkpoint

        out = checkpoint()
        return StageFile(str(out), file_digest(out))
    from binac_core.model.pretrain import build_base_model
    from binac_core.model.runtime import configure_threads, pretraining_threads

    out = ws.base_model_dir(cfg.base_digest())
    shared = base_objects.enabled()
    if shared and not (out / "config.json").exists() and (indexed := base_objects.indexed(cfg.base_digest())):
        base_objects.fetch(indexed, out)  # another host built it: the same bytes here, nothing pretrained
    if not (out / "config.json").exists():
        fault_point("pretrain", 0)  # tests/integration/test_shared_base.py: a host that must not pretrain dies here
        configure_threads(pretraining_threads())
        try:
            build_base_model(cfg, out)
        finally:
            configure_threads()
    if shared:  # for the next host that needs it
        base_objects.publish(out, weights.verified(out, hash_cache(ws)), cfg.base_digest())
    return StageFile(str(out), file_digest(out))


def named_base(cfg: Config, ws: Workspace, extra: tuple[Path, ...] = ()) -> StageFile:
    """The base `model.base_weights` names (the module docstring; `extra`: more folders searched before
    `BINAC_BASE_PATH`); a missing, ambiguous or mismatching one: one line, before anything is built."""
    prefix = cfg.model.base_weights
    if cfg.model.source == "tiny":
        where = weights.search_path(ws.models_root, extra)
        if base_objects.enabled():
            fetch_named(prefix, where, ws)
        folder, digest = weights.find_base(prefix, where, hash_cache(ws))
        check_architecture(cfg, folder)
        if base_objects.enabled():  # for the next host that names it (a base the package ships is not put)
            base_objects.publish(folder, digest)
        return StageFile(str(folder), digest)
    base = _from_settings(cfg, ws)
    return StageFile(base.path, _named_hash(cfg, base.path, base_weights(base, ws)))


def fetch_named(prefix: str, where: list[Path], ws: Workspace) -> Path | None:
    """With an object store: the base whose weights hash starts with `prefix`, fetched into the workspace's models
    folder (`base-weights-<16 digits>`) when no model folder of `where` holds it; returns the folder fetched (None:
    one was there, or the store has none, which `weights.find_base` then refuses). Two stored bases under the
    prefix: one line naming both."""
    if _held(prefix, where, hash_cache(ws)):
        return None
    found = base_objects.stored(prefix)
    if len(found) > 1:
        raise BinacError(f"model.base_weights {prefix} names more than one stored base: {', '.join(found)}")
    if not found:
        return None
    return base_objects.fetch(found[0], ws.models_root / f"base-weights-{found[0][:16]}")


def _held(prefix: str, where: list[Path], cache: Path) -> bool:
    """Whether a model folder of `where` has weights whose hash starts with `prefix`."""
    for entry in where:
        for folder in weights.model_folders(entry):
            try:
                if weights.weights_sha256(folder, cache).startswith(prefix):
                    return True
            except (BinacError, OSError):
                continue  # no weights: no base
    return False


def _named_hash(cfg: Config, path: str, digest: str) -> str:
    """`digest` when `model.base_weights` is unset or a prefix of it; else one line naming both."""
    prefix = cfg.model.base_weights
    if prefix and not digest.startswith(prefix):
        raise BinacError(
            f"model.base_weights {prefix}: the {cfg.model.source} model {path} has weights sha256 {digest}"
        )
    return digest


def check_architecture(cfg: Config, folder: Path) -> None:
    """A tiny base named by its weights must be the model the config's model section describes (architecture and
    sizes, `ARCHITECTURE`): the context checks and the vLLM head-size check read them from the config."""
    try:
        saved = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError):
        raise BinacError(f"base {folder}: unreadable config.json") from None
    wrong = [
        f"model.{field} {getattr(cfg.model, field)} (the base's {key} is {saved.get(key)})"
        for field, key in ARCHITECTURE.items()
        if saved.get(key) != getattr(cfg.model, field)
    ]
    if wrong:
        raise BinacError(
            f"model.base_weights {cfg.model.base_weights} names {folder}, which the config does not describe: "
            + "; ".join(wrong)
            + " (use the preset it was built with, or set those fields)"
        )


def base_weights(base: StageFile, ws: Workspace) -> str:
    """The sha256 of the base's weights: its folder's, checked against the record a built base keeps; for a hub
    id that is no local folder, its snapshot's (downloaded where missing, as loading the model would)."""
    folder = Path(base.path)
    if not (folder / "config.json").is_file():
        folder = _hub_snapshot(base.path)
    return weights.verified(folder, hash_cache(ws))


def existing_base(cfg: Config, ws: Workspace, extra: tuple[Path, ...] = ()) -> tuple[Path, str] | None:
    """(folder, weights hash) of the base the config names when it is there without building, converting or
    downloading anything; None otherwise. What a command checks before any compute (`binac_core.runs.bases`): a
    base named by its weights that is missing, ambiguous or other than named refuses here, in one line."""
    m = cfg.model
    if m.base_weights and m.source == "tiny":
        base = named_base(cfg, ws, extra)
        return Path(base.path), base.digest
    if m.source == "hub":
        if not m.hub_id:
            return None
        out = Path(m.hub_id)
    elif m.source == "smol":
        from binac_core.model.smol import checkpoint_dir

        out = checkpoint_dir(ws.models_root)
    else:
        out = ws.base_model_dir(cfg.base_digest())
    if not (out / "config.json").is_file():
        return None
    return out, _named_hash(cfg, str(out), weights.verified(out, hash_cache(ws)))


def hash_cache(ws: Workspace) -> Path:
    """The workspace's cache of weights hashes."""
    return ws.home / weights.CACHE_FILE


def _hub_snapshot(hub_id: str) -> Path:
    """The local snapshot folder of a hub model's config and safetensors weights."""
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(hub_id, allow_patterns=["*.json", "*.safetensors"]))
    except Exception as exc:  # offline without a cached copy, an unknown id: one line naming the model
        raise BinacError(f"base {hub_id}: its weights cannot be read to hash them ({type(exc).__name__})") from None
