"""Stage outputs on disk: JSON files written atomically and referred to by path + content digest."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from binac_core.errors import BinacError


def write_json(path: str | Path, obj) -> dict:
    """Write `obj` atomically; returns the reference {"path", "digest"} that stages pass to each other."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(obj, sort_keys=True).encode()
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return {"path": str(path), "digest": hashlib.sha256(data).hexdigest()[:16]}


def read_json(ref: dict):
    """Load a reference, checking that the file is the one the reference names."""
    path = Path(ref["path"])
    if not path.exists():
        raise BinacError(f"stage output missing: {path} (delete $BINAC_HOME/prefect to drop stale cache records)")
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest()[:16] != ref["digest"]:
        raise BinacError(f"stage output changed on disk: {path}")
    return json.loads(data)
