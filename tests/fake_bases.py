"""Fake base model folders for the tests of bases in the object store: a weights file, a config.json and the
base_meta.json recording the weights' sha256, as `binac_core.model.weights` reads a base (no model loads them);
and a fresh bucket on the session's `moto_server` named by `BINAC_STORE`."""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path

from binac_core.foundation.objects import ObjectStore, store_from_env

W1, W2 = b"\x01weights" * 40, b"\x02weights" * 40
"""Two bases' weights bytes."""
H1, H2 = hashlib.sha256(W1).hexdigest(), hashlib.sha256(W2).hexdigest()
"""Their weights hashes (`sha256sum model.safetensors`)."""


def fake_base(folder: Path, weights: bytes = W1) -> Path:
    """A model folder at `folder` with `weights` as its model.safetensors, recorded in its base_meta.json."""
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(weights)
    (folder / "config.json").write_text('{"model_type": "llama"}')
    (folder / "base_meta.json").write_text(json.dumps({"weights_sha256": hashlib.sha256(weights).hexdigest()}))
    return folder


def use_store(object_store: dict, monkeypatch) -> ObjectStore:
    """`BINAC_STORE` naming a fresh bucket on the session's moto_server (`object_store`: the conftest fixture's
    variables), set in this process with no model cache or base search path of the machine's."""
    for name, value in object_store.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_ENDPOINT_URL", "BINAC_MODEL_CACHE", "BINAC_BASE_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("BINAC_STORE", f"s3://b-{uuid.uuid4().hex[:12]}")
    store = store_from_env()
    store.ensure_bucket()
    return store
