"""Store-relative keys of the files a run reads and writes, and the stage inputs named by them: the same on every
host, whatever its `$BINAC_HOME` or checkout path.

A file is named by where it lies relative to one of three roots, the first that holds it:

    models/<rest>    under the workspace's models folder (`$BINAC_HOME/models`, or `BINAC_MODEL_CACHE`)
    <rest>           under `$BINAC_HOME` (`runs/<run>/step-00001/attempts.json`, `data/<benchmark>-<digest>/...`)
    package/<rest>   under the installed `binac_core` package (the bases it ships: `package/presets/bases/...`)

`portable(inputs, ws)` is what a stage's cache key hashes (`tasks/_common.py`): its inputs with every stage file
(anything with a `path` and a `digest`, `binac_core.foundation.files.StageFile` and its kind) named by its key and
digest, and every string that is an absolute path under a root by its key (a stage's `out_dir`). A stage file
outside this host's roots is named by the store key its writer recorded in it (`key`, with `BINAC_STORE`: another
host's output, taken from Prefect's cache), or else by its digest alone (a base found in a `BINAC_BASE_PATH`
folder): its content is what the stage reads. Nothing touches the disk: paths are compared as written (the workspace's are absolute and
resolved, `binac_core.foundation.workspace`)."""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
from collections.abc import Callable
from pathlib import PurePath
from typing import Any

from binac_core.foundation.provenance import LIBRARY
from binac_core.foundation.workspace import Workspace


def roots(ws: Workspace) -> tuple[tuple[str, PurePath], ...]:
    """(key prefix, folder) of the roots, in the order a path is tried against them (the module docstring)."""
    return (("models", ws.models_root), ("", ws.home), ("package", LIBRARY))


def store_key(path: str | PurePath, ws: Workspace) -> str | None:
    """The store-relative key of an absolute `path` under one of the roots, or None (a relative path, or one
    outside them)."""
    return _key(PurePath(path), roots(ws))


def portable(obj: Any, ws: Workspace, other: Callable[[Any], Any] | None = None) -> Any:
    """`obj` as JSON values with every path under a root named by its key (the module docstring); a value of a
    type not listed here is replaced by `other(value)`, or refused (TypeError) without `other`."""
    return _portable(obj, roots(ws), other)


def inputs_digest(inputs: dict, ws: Workspace, other: Callable[[Any], Any] | None = None) -> str:
    """sha256 (hex) of `portable(inputs)` as sorted, compact JSON: a stage's inputs' part of its cache key."""
    blob = json.dumps(portable(inputs, ws, other), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def _key(p: PurePath, where: tuple[tuple[str, PurePath], ...]) -> str | None:
    if not p.is_absolute():
        return None
    for prefix, root in where:
        if p.is_relative_to(root):
            rest = p.relative_to(root).as_posix()
            return "/".join(part for part in (prefix, rest) if part and part != ".") or "."
    return None


def _portable(obj: Any, where: tuple[tuple[str, PurePath], ...], other: Callable[[Any], Any] | None) -> Any:
    if obj is None or isinstance(obj, bool | int | float):
        return obj
    if isinstance(obj, enum.Enum):
        return _portable(obj.value, where, other)
    if isinstance(obj, str):  # only an absolute path can be under a root: the rest is kept as it is, cheaply
        return (_key(PurePath(obj), where) or obj) if obj.startswith("/") else obj
    if isinstance(obj, PurePath):
        return _key(obj, where) or str(obj)
    if isinstance(obj, dict):
        return {_dict_key(k): _portable(v, where, other) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_portable(v, where, other) for v in obj]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        fields = dataclasses.fields(obj)
        out = {f.name: _portable(getattr(obj, f.name), where, other) for f in fields}
        if {"path", "digest"} <= {f.name for f in fields}:  # a stage file: by key and digest, or by digest alone
            path = PurePath(obj.path)
            # another host's file (a cached stage's output, its path under that host's home): the store key its
            # writer recorded, which is what its path's key was there
            out["path"] = (_key(path, where) or out.get("key")) if path.is_absolute() else obj.path
            out.pop("key", None)  # where it is in the object store: its path's key already, or nothing
        return {"__type__": type(obj).__qualname__, **out}
    if other is None:
        raise TypeError(f"no portable form for a {type(obj).__qualname__}")
    return other(obj)


def _dict_key(key: Any) -> str:
    return str(key.value) if isinstance(key, enum.Enum) else str(key)
