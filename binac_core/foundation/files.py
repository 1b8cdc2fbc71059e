"""Files on disk, one way each: atomic writes, stage outputs as JSON by path + content digest, YAML mappings (presets,
study files), and the content digest of a folder (a checkpoint). No torch: `binac_core.runs.plans` validates adapter
folders with it. The atomic writes live in `binac_core.foundation.atomic` and the folder digest beside the object
store's file digest (`binac_core.foundation.objects.file_digest`), both named here too."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from binac_core.errors import BinacError
from binac_core.foundation.atomic import atomic_path, write_atomic
from binac_core.foundation.objects import file_digest

__all__ = ["StageFile", "atomic_path", "file_digest", "read_json", "read_optional", "write_atomic", "write_json"]


@dataclass(frozen=True)
class StageFile:
    """A stage's output on disk, as stages hand it to each other: its path and content digest (a JSON file written
    by `write_json`, or a model folder: `file_digest`). The digest makes it a stable cache key of the next stage.
    `key`: its store-relative key where it was put in the object store (`binac_core.foundation.stage_objects`, only
    with `BINAC_STORE`), else None; not part of a cache key (`store_keys.portable` names the file by its path's key)."""

    path: str
    digest: str
    key: str | None = field(default=None, kw_only=True)


def write_json(path: str | Path, obj) -> StageFile:
    """Write `obj` atomically; returns the `StageFile` that names it. With an object store (`BINAC_STORE`) the file
    is put there too, under its key, before this returns (`stage_objects.put_file`)."""
    data = json.dumps(obj, sort_keys=True).encode()
    write_atomic(path, data)
    key = None
    if _store_set():
        from binac_core.foundation import stage_objects

        key = stage_objects.put_file(path)
    return StageFile(str(Path(path)), hashlib.sha256(data).hexdigest()[:16], key=key)


MISSING_HINT = "a cached stage's output was deleted; run the command again with --fresh to recompute its stages"
"""The end of the one-line error for a stage output that a cache record names and the disk no longer holds."""


def read_json(file: StageFile):
    """Load a stage file, checking that it is the one the reference names. With an object store, a file this host
    lacks (or holds with other bytes) is fetched by its key, digest checked (`stage_objects.get_file`)."""
    path = Path(file.path)
    if _store_set():
        from binac_core.foundation import stage_objects

        path = stage_objects.get_file(file.path, getattr(file, "key", None), file.digest)
    if not path.exists():
        raise BinacError(f"stage output missing: {path} ({MISSING_HINT})")
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest()[:16] != file.digest:
        raise BinacError(f"stage output changed on disk: {path}")
    return json.loads(data)


def _store_set() -> bool:
    """Whether `BINAC_STORE` names an object store (`binac_core.foundation.objects`); unset, no store code runs."""
    return bool(os.environ.get("BINAC_STORE", "").strip())


def read_optional(file: StageFile | None):
    """`read_json(file)`, or None for no file (a stage the method does not run)."""
    return None if file is None else read_json(file)


def read_yaml_mapping(path: str | Path, name: str) -> dict:
    """The mapping a YAML file holds at its top level; a malformed file, or another top level, raises one line
    naming `name` (e.g. "config file micro.yaml")."""
    import yaml

    try:
        raw = yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as exc:
        raise BinacError(f"malformed {name}: {str(exc).splitlines()[0]}") from None
    if not isinstance(raw, dict):
        raise BinacError(f"malformed {name}: expected a mapping at top level")
    return raw
