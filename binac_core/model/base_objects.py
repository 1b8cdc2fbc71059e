"""Base models in the object store hosts share (`BINAC_STORE`, `binac_core.foundation.objects`), named by their
weights' sha256 (`binac_core.model.weights`). Every host running on a base then runs on the same bytes.

    models/base/<weights sha256>.tar              the base's folder, its files as an uncompressed tar in name order,
                                                  owners and times fixed
    models/base-by-config/<config digest>.json    {"weights_sha256": ...}: the base built from a config's model
                                                  settings (`Config.base_digest`), for a host that names no base

- `publish` puts a base folder unless the store already holds one under its weights hash, and the config's index
  entry unless there is one: the first writer wins. Two builds with equal weights can still differ in
  `base_meta.json` (its build time), and every host that fetches a base gets the one folder, whose content digest
  then keys its stages alike.
- `fetch` gets a base by its hash: the object's bytes checked against the sha256 its writer recorded, unpacked
  beside the destination and renamed into place only when its weights hash to the named hash (and agree with its
  own `base_meta.json` record); anything else is one line naming both hashes, and nothing is left at the
  destination.
- `indexed` reads a config's index entry; `stored` lists the stored bases whose hash starts with a prefix.

Nothing here builds a base or decides which base a run uses (`binac_core.model.base_model` does); nothing here
runs without `BINAC_STORE`. Bases shipped in the package are never put (every host has them). No torch."""

from __future__ import annotations

import json
import os
import re
import shutil
import tarfile
import tempfile
from pathlib import Path

from binac_core.errors import BinacError
from binac_core.foundation.objects import STORE_VAR, ObjectStore, store_from_env
from binac_core.foundation.provenance import LIBRARY
from binac_core.model import weights

BASES = "models/base"
"""The store folder of the bases, one `<weights sha256>.tar` object each."""
BY_CONFIG = "models/base-by-config"
"""The store folder of the index: `<config digest>.json` -> the weights hash of the base built from that config."""
_HASH = re.compile(r"^[0-9a-f]{64}$")


def enabled() -> bool:
    """Whether `BINAC_STORE` names a store (only then is anything here used)."""
    return bool(os.environ.get(STORE_VAR, "").strip())


def object_key(weights_hash: str) -> str:
    """The store key of the base whose weights hash is `weights_hash` (the full 64 hex digits)."""
    if not _HASH.match(weights_hash):
        raise BinacError(f"not a base's weights sha256: {weights_hash!r} (64 lower-case hex digits)")
    return f"{BASES}/{weights_hash}.tar"


def index_key(config_digest: str) -> str:
    """The store key of the index entry of the base built from a config whose `base_digest()` is `config_digest`."""
    return f"{BY_CONFIG}/{config_digest}.json"


def publish(folder: str | Path, weights_hash: str, config_digest: str | None = None) -> bool:
    """Put the base `folder` (whose weights hash to `weights_hash`) into the store unless a base of that hash is
    there, then the index entry of `config_digest` (None: none) unless there is one. A folder shipped in the
    package is not put. Returns whether the folder was put."""
    folder, store = Path(folder), _store()
    if folder.resolve().is_relative_to(LIBRARY):
        return False
    key, put = object_key(weights_hash), False
    if store.digest(key) is None:
        with tempfile.TemporaryDirectory(prefix=".base-put-") as tmp:
            tar = Path(tmp) / "base.tar"
            _write_tar(folder, tar)
            store.put_file(key, tar)
        put = True
    if config_digest and store.digest(index_key(config_digest)) is None:
        store.put_bytes(index_key(config_digest), json.dumps({weights.RECORD: weights_hash}).encode())
    return put


def indexed(config_digest: str) -> str | None:
    """The weights hash of the base the store's index names for `config_digest`, or None (no entry)."""
    store, key = _store(), index_key(config_digest)
    recorded = store.digest(key)
    if recorded is None:
        return None
    data = store.get_bytes(key, recorded)
    try:
        value = json.loads(data)[weights.RECORD]
    except (ValueError, KeyError, TypeError):
        value = None
    if not isinstance(value, str) or not _HASH.match(value):
        raise BinacError(f"store object {store.where(key)}: not an index entry (no {weights.RECORD})")
    return value


def stored(prefix: str) -> list[str]:
    """The weights hashes of the stored bases that start with `prefix`, sorted."""
    names = (k.removeprefix(BASES + "/") for k in _store().keys(BASES))
    return [n.removesuffix(".tar") for n in names if n.endswith(".tar") and n.startswith(prefix)]


def fetch(weights_hash: str, dest: str | Path) -> Path:
    """The base whose weights hash is `weights_hash`, fetched from the store into the folder `dest` (which must not
    exist yet) and checked (the module docstring); returns `dest`. A store without it, a corrupted object, or a base
    of other weights: one line naming the hashes."""
    dest, store = Path(dest), _store()
    key = object_key(weights_hash)
    recorded = store.digest(key)
    if recorded is None:
        raise BinacError(
            f"the store holds no base with weights sha256 {weights_hash} ({store.where(key)} is missing): "
            "the study that names it puts it there before submitting runs"
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.fetch-", dir=dest.parent))
    try:
        store.get_file(key, tmp / "base.tar", recorded)
        folder = tmp / "base"
        with tarfile.open(tmp / "base.tar") as tar:
            tar.extractall(folder, filter="data")
        got = _weights_of(folder, store.where(key))
        if got != weights_hash:
            raise BinacError(
                f"store object {store.where(key)} holds a base with weights sha256 {got}, expected {weights_hash}"
            )
        _into_place(folder, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def _weights_of(folder: Path, where: str) -> str:
    """The unpacked base's weights hash, checked against its own record; one line naming the object otherwise."""
    try:
        return weights.verified(folder)
    except BinacError as exc:
        raise BinacError(f"store object {where}: {exc}") from None


def _into_place(folder: Path, dest: Path) -> None:
    """Rename the checked folder onto `dest`; a process that put the same base there first wins."""
    try:
        os.rename(folder, dest)
    except OSError as exc:
        if not (dest / "config.json").is_file():
            raise BinacError(f"cannot put the fetched base at {dest}: {exc.strerror}") from None


def _write_tar(folder: Path, out: Path) -> None:
    """The folder's files as an uncompressed tar at `out`, in name order, owners and times fixed (equal folders,
    equal bytes, whose unpacked folder has the same content digest, `files.file_digest`)."""
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    if not files:
        raise BinacError(f"base {folder}: no files to put into the store")
    with tarfile.open(out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for f in files:
            info = tarfile.TarInfo(f.relative_to(folder).as_posix())
            info.size, info.mode, info.mtime = f.stat().st_size, 0o644, 0
            with open(f, "rb") as src:
                tar.addfile(info, src)


def _store() -> ObjectStore:
    store = store_from_env()
    if store is None:
        raise BinacError(f"{STORE_VAR} is not set: no store to put bases in or fetch them from")
    return store
