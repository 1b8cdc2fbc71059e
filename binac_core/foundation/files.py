"""Files on disk, one way each: atomic writes, stage outputs as JSON by path + content digest, YAML mappings (presets,
study files), and the content digest of a folder (a checkpoint). No torch: `binac_core.runs.plans` validates adapter
folders with it."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from binac_core.errors import BinacError


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path beside `path` to write to (by hand or by a tool such as DuckDB's COPY), renamed onto `path`
    when the block ends without an error, removed when it raises; so a file at `path` is always complete, and a
    killed writer leaves at most a `.<name>.<pid>.<thread>.tmp` sibling, never a partial `path`. The name is unique
    per process and thread, so concurrent writers of one path never share a temporary file (the last rename wins)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_atomic(path: str | Path, data: bytes | str) -> None:
    """Write `data` (text as UTF-8) to `path` atomically (`atomic_path`)."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data.encode() if isinstance(data, str) else data)


@dataclass(frozen=True)
class StageFile:
    """A stage's output on disk, as stages hand it to each other: its path and content digest (a JSON file written
    by `write_json`, or a model folder: `file_digest`). The digest makes it a stable cache key of the next stage."""

    path: str
    digest: str


def write_json(path: str | Path, obj) -> StageFile:
    """Write `obj` atomically; returns the `StageFile` that names it."""
    data = json.dumps(obj, sort_keys=True).encode()
    write_atomic(path, data)
    return StageFile(str(Path(path)), hashlib.sha256(data).hexdigest()[:16])


MISSING_HINT = "a cached stage's output was deleted; run the command again with --fresh to recompute its stages"
"""The end of the one-line error for a stage output that a cache record names and the disk no longer holds."""


def read_json(file: StageFile):
    """Load a stage file, checking that it is the one the reference names."""
    path = Path(file.path)
    if not path.exists():
        raise BinacError(f"stage output missing: {path} ({MISSING_HINT})")
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest()[:16] != file.digest:
        raise BinacError(f"stage output changed on disk: {path}")
    return json.loads(data)


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


def file_digest(folder: str | Path) -> str:
    """sha256 over the files of a checkpoint folder (names and bytes), first 16 hex digits."""
    h = hashlib.sha256()
    for f in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
        h.update(f.relative_to(folder).as_posix().encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]
