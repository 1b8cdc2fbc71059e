"""A base model is its weights: the sha256 of its weights file(s) names it across machines, rebuilds and archives.
A folder's name (`base-<config digest>`) says how a base was meant to be built, not what was built: two builds
under one config digest can differ (another machine, another thread count), and the digest itself moves with
every edit of the pretraining code.

The hash is sha256 over the bytes of the weights files transformers loads from the folder, in name order:
`model.safetensors`; else the shards `model.safetensors.index.json` names; else `pytorch_model.bin` or the shards
of its index. For a one-file checkpoint it is `sha256sum model.safetensors`; for shards,
`cat <shards in name order> | sha256sum`. Not hashed: the config, the tokenizer, `base_meta.json`, file names.

Where it is kept: a tiny base records it in its `base_meta.json` (`weights_sha256`) when it is built
(`binac_core.model.pretrain`); every training and evaluation run logs it as the parameter `base.weights_sha256`
(`PARAM`); a study's parent run and report name it; an archive lists its bases' hashes
(`binac_core.store.archive`). A folder with no record (`smol`, an older build, an archived one) is hashed when
asked. Hashes are cached by the identity of the files hashed (resolved path, device, inode, size, modification
time), in the process and in a JSON file the caller names, so a large checkpoint is read once; a file rewritten in
place with its size and modification time restored would be served from the cache.

`find_base` finds a base by its hash (or a prefix of at least `MIN_PREFIX` hex digits) among the model folders of
a search path: the workspace's models folder, the folders of `BINAC_BASE_PATH`, then the bases the package ships
(`SHIPPED`); it never builds one. A folder whose record names the base but whose weights hash otherwise (a corrupt
copy) is refused in one line naming both hashes. No torch.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from binac_core import presets
from binac_core.errors import BinacError
from binac_core.foundation.files import write_atomic

PARAM = "base.weights_sha256"
"""The run parameter that names a run's base by its weights."""
RECORD = "weights_sha256"
"""The key of `base_meta.json` that records a built base's weights hash."""
META = "base_meta.json"
SEARCH_PATH_ENV = "BINAC_BASE_PATH"
"""Folders (separated by `os.pathsep`) searched for a base named by its weights, after the workspace's models
folder: a model folder, a folder of model folders, or an archive (its `models/` is searched)."""
CACHE_FILE = "weights_sha256.json"
"""The cache of weights hashes in `$BINAC_HOME` (a file identity key -> the hash)."""
MIN_PREFIX = 8
"""The fewest hex digits a base may be named by (`model.base_weights`'s pattern says the same)."""
CACHE_ENTRIES = 1000
"""The most entries the cache file keeps (the newest)."""
_CHECKPOINTS = (
    ("model.safetensors", "model.safetensors.index.json"),
    ("pytorch_model.bin", "pytorch_model.bin.index.json"),
)
SHIPPED = Path(presets.__file__).parent / "bases"
"""The bases shipped in the package (`binac_core/presets/bases/`, its README says what they are and how one is
rebuilt): searched last. Each records its weights hash in its `base_meta.json`, checked on load (`find_base`)."""
_MEMO: dict[str, str] = {}


def weight_files(folder: str | Path) -> list[Path]:
    """The weights files transformers loads from `folder`, in name order (the module docstring); a folder without
    any, or an index naming a missing shard: one line naming the folder."""
    folder = Path(folder)
    for single, index in _CHECKPOINTS:
        if (folder / single).is_file():
            return [folder / single]
        if (folder / index).is_file():
            try:
                shards = sorted(set(json.loads((folder / index).read_text())["weight_map"].values()))
            except (ValueError, KeyError, TypeError, AttributeError):
                raise BinacError(f"{folder / index}: not a checkpoint index (no weight_map)") from None
            missing = [s for s in shards if not (folder / s).is_file()]
            if missing or not shards:
                raise BinacError(f"{folder / index} names shards that are missing: {', '.join(missing) or 'none'}")
            return [folder / s for s in shards]
    raise BinacError(f"{folder}: no weights file (model.safetensors, pytorch_model.bin, or a sharded index of either)")


def weights_sha256(folder: str | Path, cache: str | Path | None = None) -> str:
    """sha256 (64 hex digits) of the weights of the model folder `folder`, read once per file identity (the
    module docstring); `cache`: a JSON file that keeps the hashes between processes (None: this process only)."""
    files = weight_files(folder)
    key = _identity(files)
    if key in _MEMO:
        return _MEMO[key]
    stored = _read_cache(cache).get(key) if cache else None
    if stored is None:
        h = hashlib.sha256()
        for f in files:
            with open(f, "rb") as fh:
                for chunk in iter(lambda fh=fh: fh.read(1 << 20), b""):
                    h.update(chunk)
        stored = h.hexdigest()
        if cache:
            _write_cache(Path(cache), key, stored)
    _MEMO[key] = stored
    return stored


def _identity(files: list[Path]) -> str:
    """The cache key of a hash: every file's resolved path, device, inode, size and modification time."""
    parts = []
    for f in files:
        st = f.stat()
        parts.append([str(f.resolve()), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns])
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def _read_cache(cache: str | Path) -> dict[str, str]:
    try:
        data = json.loads(Path(cache).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_cache(cache: Path, key: str, digest: str) -> None:
    """Add one entry (atomically; two writers at once may lose one entry, which is then hashed again)."""
    data = _read_cache(cache)
    data.pop(key, None)
    data[key] = digest
    kept = dict(list(data.items())[-CACHE_ENTRIES:])
    try:
        write_atomic(cache, json.dumps(kept, indent=0))
    except OSError:
        pass  # a read-only workspace: the hash is kept in this process only


def recorded(folder: str | Path) -> str | None:
    """The weights hash the folder's `base_meta.json` records (None: no record, or no such file)."""
    try:
        value = json.loads((Path(folder) / META).read_text()).get(RECORD)
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def verified(folder: str | Path, cache: str | Path | None = None) -> str:
    """The folder's weights hash, checked against its record: a base whose weights no longer hash to what its
    `base_meta.json` records refuses in one line naming both."""
    actual, record = weights_sha256(folder, cache), recorded(folder)
    if record is not None and record != actual:
        raise BinacError(
            f"base {folder}: its {META} records weights sha256 {record} but its weights hash to {actual} "
            "(the weights changed after it was built: a corrupt or altered copy)"
        )
    return actual


def search_path(models_root: str | Path, extra: tuple[str | Path, ...] = ()) -> list[Path]:
    """Where a base named by its weights is looked for, in order: `models_root` (the workspace's models folder),
    `extra`, the folders of `BINAC_BASE_PATH`, then the bases shipped in the package (`SHIPPED`)."""
    env = [p for p in os.environ.get(SEARCH_PATH_ENV, "").split(os.pathsep) if p]
    return list(dict.fromkeys(Path(p).expanduser().resolve() for p in (models_root, *extra, *env, SHIPPED)))


def model_folders(entry: str | Path) -> list[Path]:
    """The model folders (with a `config.json`) a search entry holds: itself when it is one, else its
    subfolders that are, then those of its `models/` (an archive); hidden folders (a build in progress) skipped."""
    entry = Path(entry)
    if (entry / "config.json").is_file():
        return [entry]
    out = []
    for parent in (entry, entry / "models"):
        if parent.is_dir():
            out += [p for p in sorted(parent.iterdir()) if not p.name.startswith(".") and (p / "config.json").is_file()]
    return out


def find_base(prefix: str, where: list[Path], cache: str | Path | None = None) -> tuple[Path, str]:
    """(folder, full hash) of the one base among `where`'s model folders whose weights hash starts with `prefix`;
    copies of one base (equal hashes) are one base, the first found is used. None found, or two different bases:
    one line naming where it looked, or both hashes."""
    found: dict[str, Path] = {}
    for entry in where:
        for folder in model_folders(entry):
            try:
                digest = weights_sha256(folder, cache)
            except (BinacError, OSError):
                continue  # a folder without weights (a tokenizer alone) is no base
            if digest.startswith(prefix):
                found.setdefault(digest, folder)
            elif (recorded(folder) or "").startswith(prefix):
                verified(folder, cache)  # a copy of the named base whose weights changed: one line naming both
    if not found:
        looked = ", ".join(str(p) for p in where)
        raise BinacError(
            f"no base model with weights sha256 {prefix} in {looked} (add the folder holding it to "
            f"{SEARCH_PATH_ENV}, or restore it with `binac study FILE --archive DIR`)"
        )
    if len(found) > 1:
        named = ", ".join(f"{d} ({p})" for d, p in sorted(found.items()))
        raise BinacError(f"model.base_weights {prefix} names more than one base: {named}; give more digits")
    [(digest, folder)] = found.items()
    return folder, verified(folder, cache)


def check_same(recorded_hash: str | None, actual: str, what: str, hint: str = "") -> None:
    """Refuse, in one line naming both hashes, when `what` (a run, a study) recorded base weights other than
    `actual`; nothing recorded passes. `hint`: what to do, appended after a semicolon."""
    if recorded_hash and recorded_hash != actual:
        raise BinacError(
            f"{what} ran on base weights sha256 {recorded_hash}, but this base's weights are {actual}"
            + (f"; {hint}" if hint else "")
        )
