"""A `binac train` with an object store and no study puts the base it built there, and the next host reuses it:
two real runs of the micro preset (its pretraining cut to two steps) under two homes sharing only the store
(`moto_server`) and the Prefect server; the second host dies if it pretrains (`BINAC_FAULT=pretrain@0:kill`),
and runs on the first host's base, byte for byte."""

from __future__ import annotations

import uuid

import pytest
from conftest import MINIMAL_BATCH, binac_env, run_binac

from binac_core.foundation.objects import store_from_env
from binac_core.foundation.workspace import Workspace
from binac_core.model.weights import PARAM
from binac_core.store import tracking

pytestmark = pytest.mark.integration
ARGS = ["train", "--preset", "micro", "--method", "grpo", "--steps", "1", "--seed", "0"]
SETTINGS = ("model.pretrain_steps=2", "model.pretrain_examples=100", *MINIMAL_BATCH)


def _env(home, prefect_home, object_store, bucket: str, **extra: str) -> dict:
    env = binac_env(home, prefect_home)
    env.pop("BINAC_MODEL_CACHE")  # each host's base inside its own home
    env.pop("AWS_ENDPOINT_URL", None)
    return {**env, **object_store, "BINAC_STORE": f"s3://{bucket}", **extra}


def _recorded_weights(home) -> str:
    ws = Workspace(home)
    c = tracking.client(ws)
    [run] = c.search_runs([tracking.experiment_id(c, ws)])
    return run.data.params[PARAM]


def test_the_next_host_runs_on_the_base_the_first_one_put(tmp_path, prefect_home, object_store, monkeypatch):
    bucket = f"h-{uuid.uuid4().hex[:12]}"
    for name, value in {**object_store, "BINAC_STORE": f"s3://{bucket}"}.items():
        monkeypatch.setenv(name, value)
    store = store_from_env()
    store.ensure_bucket()
    args = [*ARGS, *(x for s in SETTINGS for x in ("--set", s))]

    run_binac(args, _env(tmp_path / "a", prefect_home, object_store, bucket))
    weights = _recorded_weights(tmp_path / "a")
    [built] = (tmp_path / "a" / "models").glob("base-*")
    assert f"models/base/{weights}.tar" in store.keys("models/base")
    assert store.keys("models/base-by-config") == [f"models/base-by-config/{built.name.removeprefix('base-')}.json"]

    run_binac(args, _env(tmp_path / "b", prefect_home, object_store, bucket, BINAC_FAULT="pretrain@0:kill"))
    assert _recorded_weights(tmp_path / "b") == weights
    got = tmp_path / "b" / "models" / built.name
    assert sorted(p.name for p in got.iterdir()) == sorted(p.name for p in built.iterdir())
    assert all((got / p.name).read_bytes() == p.read_bytes() for p in built.iterdir()), "the same bytes"
