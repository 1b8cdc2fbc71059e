"""Atomic writes: a file at its path is always complete, whoever is killed while writing it."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path


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
