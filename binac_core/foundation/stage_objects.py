"""Stage files and adapter folders travel by content: put into the object store (`BINAC_STORE`) by their writer.

Each is put under its store-relative key (`binac_core.foundation.store_keys`) into the store hosts share
(`binac_core.foundation.objects`) before the stage returns, and fetched by that key, digest checked, by a reader
whose home lacks it.

- A stage file (`files.StageFile`, a JSON file of `files.write_json`) is one object, its key recorded in the
  record's `key` (the writer's path means nothing on another host); its digest is the first 16 hex digits of its
  bytes' sha256, which `ObjectStore.get_file` checks.
- An adapter folder (`binac_core.model.stage_io.AdapterRef`) is one object, `<key>.tar`: its files as an
  uncompressed tar in name order, with fixed owners and times, so equal folders make equal objects and a rewrite
  replaces the object whole. A reader checks the tar's sha256 against the object's recorded one, unpacks it beside
  the destination and renames it into place only when the folder's content digest (`files.file_digest`) is the
  reference's.
- A fetched file lands where the key puts it on this host: `models/...` under the models folder, `package/...`
  under the installed package (never fetched: the package ships it), anything else under `$BINAC_HOME`.

A local file that is there with the expected digest is read as it is, without the store. Every failure (no such
object, other bytes, an unreachable store) is one line (`BinacError`). `files.py` and `binac_core.model.policy`
call into this module only when `BINAC_STORE` is set (`enabled`)."""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import tempfile
from pathlib import Path

from binac_core.errors import BinacError
from binac_core.foundation.objects import STORE_VAR, ObjectStore, file_digest, sha256_file, store_from_env
from binac_core.foundation.provenance import LIBRARY
from binac_core.foundation.store_keys import store_key
from binac_core.foundation.workspace import Workspace, workspace

FOLDER_SUFFIX = ".tar"
"""The suffix of a folder's object: `<folder key>.tar`."""


def enabled() -> bool:
    """Whether `BINAC_STORE` names a store (only then is anything here used)."""
    return bool(os.environ.get(STORE_VAR, "").strip())


def local_path(key: str, ws: Workspace) -> Path:
    """Where the file of store-relative `key` lies on this host (the module docstring)."""
    head, _, rest = key.partition("/")
    if head == "models":
        return ws.models_root / rest
    if head == "package":
        return LIBRARY / rest
    return ws.home / key


def put_file(path: str | Path) -> str | None:
    """Put the stage file at `path` into the store under its key; returns the key, or None for a file outside the
    workspace's roots or shipped in the package (nothing put)."""
    key = _key(path)
    if key is not None:
        _store().put_file(key, path)
    return key


def get_file(path: str, key: str | None, digest: str) -> Path:
    """The stage file (`path` as its writer named it, `key`, `digest`) on this host: `path` when it holds the
    expected bytes, else the object `key` fetched to `local_path(key)` and checked against `digest`."""
    if _holds(Path(path), digest) or key is None:
        return Path(path)
    ws = workspace()
    dest = local_path(key, ws)
    if _holds(dest, digest):
        return dest
    return _store().get_file(key, dest, digest)


def put_folder(folder: str | Path) -> str | None:
    """Put the folder (an adapter checkpoint) into the store as one tar object `<key>.tar`; returns its key, or None
    for a folder outside the roots."""
    key = _key(folder)
    if key is not None:
        _store().put_bytes(key + FOLDER_SUFFIX, _tar(Path(folder)))
    return key


def get_folder(path: str, key: str | None, digest: str) -> Path:
    """The folder (`path` as its writer named it, `key`, content `digest`) on this host: `path` when its content
    has the digest, else the object `<key>.tar` unpacked at `local_path(key)`, its content digest checked first."""
    if (Path(path).is_dir() and file_digest(path) == digest) or key is None:
        return Path(path)
    dest = local_path(key, workspace())
    if dest.is_dir() and file_digest(dest) == digest:
        return dest
    store = _store()
    name = key + FOLDER_SUFFIX
    recorded = store.digest(name)
    if recorded is None:
        raise BinacError(f"store object missing: {store.where(name)}")
    data = store.get_bytes(name, recorded)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.fetch-", dir=dest.parent))
    try:
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(tmp, filter="data")
        got = file_digest(tmp)
        if got != digest:
            raise BinacError(f"store object {store.where(name)} holds a folder of digest {got}, expected {digest}")
        shutil.rmtree(dest, ignore_errors=True)
        os.rename(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def _tar(folder: Path) -> bytes:
    """The folder's files as an uncompressed tar, in name order, owners and times fixed (equal folders, equal bytes)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for f in sorted(p for p in folder.rglob("*") if p.is_file()):
            info = tarfile.TarInfo(f.relative_to(folder).as_posix())
            info.size, info.mode, info.mtime = f.stat().st_size, 0o644, 0
            with open(f, "rb") as src:
                tar.addfile(info, src)
    return out.getvalue()


def _holds(path: Path, digest: str) -> bool:
    return path.is_file() and sha256_file(path).startswith(digest)


def _key(path: str | Path) -> str | None:
    key = store_key(Path(path).absolute(), workspace())
    return None if key is None or key.startswith("package/") else key


def _store() -> ObjectStore:
    store = store_from_env()
    if store is None:
        raise BinacError(f"{STORE_VAR} is not set: no store to put files in or fetch them from")
    return store
