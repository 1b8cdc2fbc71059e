"""Files named by what determines them rather than by their content (the critic's attempt banks under
`models/banks/`), shared through the object store (`BINAC_STORE`, `binac_core.foundation.objects`).

A reader knows such a file's path, hence its store-relative key (`binac_core.foundation.store_keys`), but not its
digest: `sync` fetches a file this host lacks by its key, its bytes checked against the sha256 its writer recorded
with the object (a corrupted object is one line, and nothing is left at the path), and puts a file this host holds
that the store lacks. A file here and in the store with other bytes is left as it is on both sides: the first
writer's object stays, and this host keeps reading its own. Nothing here runs without `BINAC_STORE`."""

from __future__ import annotations

import os
from pathlib import Path

from binac_core.errors import BinacError
from binac_core.foundation.objects import STORE_VAR, store_from_env
from binac_core.foundation.store_keys import store_key
from binac_core.foundation.workspace import workspace


def enabled() -> bool:
    """Whether `BINAC_STORE` names a store (only then is `sync` used)."""
    return bool(os.environ.get(STORE_VAR, "").strip())


def sync(path: str | Path) -> str | None:
    """The file at `path` on this host and in the store (the module docstring); returns its key, or None for a
    path outside the workspace's roots or shipped in the package (nothing done). Whether the file is here
    afterwards says whether either side had it."""
    path = Path(path).absolute()
    key = store_key(path, workspace())
    if key is None or key.startswith("package/"):
        return None
    store = store_from_env()
    if store is None:
        raise BinacError(f"{STORE_VAR} is not set: no store to share {path} through")
    recorded = store.digest(key)
    if path.is_file():
        if recorded is None:
            store.put_file(key, path)
    elif recorded is not None:
        store.get_file(key, path, recorded)
    return key
