"""Where a run writes: everything lives under one folder, `$BINAC_HOME` (default `./.binac`).

Layout:
    mlflow.db, mlartifacts/      MLflow sqlite store and artifacts (unless MLFLOW_TRACKING_URI is set)
    trajectories/                Parquet shards, one file per (run, split, step): atomic, idempotent writes
    trajectories.duckdb          DuckDB file holding the `trajectories` view over the shards
    feedback_index/<run>/        full-text index of the shards' feedback, per shard (binac_core/store/feedback_index.py)
    data/<benchmark>-<digest>/   the problem splits of a task config, one JSON file per split
    models/base-<digest>/        tiny base models built here (shared by every run with the same model config;
                                 `BINAC_MODEL_CACHE` moves them to a folder shared by several workspaces)
    models/banks/bank-<w>-<key>  the critic's fixed attempt banks, by base weights and settings, and the frozen
                                 critic's feedback on each (binac_core/rl/bank.py; moves with `BINAC_MODEL_CACHE`)
    weights_sha256.json          the weights hashes of base models, by file identity (binac_core/model/weights.py)
    runs/<run_key>/              adapter and optimizer checkpoints, rollout files, per-step outputs
    prefect/                     Prefect result storage (the task cache records)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Workspace:
    home: Path

    @property
    def mlflow_uri(self) -> str:
        """`MLFLOW_TRACKING_URI` wins over the embedded sqlite store."""
        return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{self.home / 'mlflow.db'}"

    @property
    def artifact_root(self) -> Path:
        return self.home / "mlartifacts"

    @property
    def shards(self) -> Path:
        return self.home / "trajectories"

    @property
    def duckdb_path(self) -> Path:
        return self.home / "trajectories.duckdb"

    @property
    def prefect_storage(self) -> Path:
        return self.home / "prefect"

    @property
    def models_root(self) -> Path:
        """The folder of base models built or converted here: `models/`, or `BINAC_MODEL_CACHE` (a folder shared
        by several workspaces, e.g. across tests) when set."""
        shared = os.environ.get("BINAC_MODEL_CACHE")
        return Path(shared).expanduser().resolve() if shared else self.home / "models"

    def base_model_dir(self, digest: str) -> Path:
        """The tiny base model built from a config whose `Config.base_digest` is `digest`."""
        return self.models_root / f"base-{digest}"

    def bank_file(self, name: str) -> Path:
        """A file of the critic's attempt banks (binac_core/rl/bank.py): `models/banks/<name>.json`, beside the base
        models they are sampled from."""
        return self.models_root / "banks" / f"{name}.json"

    def problems_dir(self, benchmark: str, data_digest: str) -> Path:
        """The problem splits of one task config (`Config.data_digest`), written once (`prepare-data`)."""
        return self.home / "data" / f"{benchmark}-{data_digest}"

    def run_dir(self, run_key: str) -> Path:
        return self.home / "runs" / run_key


def workspace() -> Workspace:
    home = Path(os.environ.get("BINAC_HOME", ".binac")).expanduser().resolve()
    home.mkdir(parents=True, exist_ok=True)
    return Workspace(home)
