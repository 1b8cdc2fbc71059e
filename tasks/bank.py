"""The critic's fixed attempt bank (binac_core/rl/bank.py) as pipeline stages: built, scored by the method's critic and
by the frozen base critic, stored and measured. It is built once per base and settings (a file cache of its own, like
the base model), scored by the method's critic at every evaluation (cached like any stage) and once by the frozen base
critic (a file cache beside the bank). With an object store (`BINAC_STORE`) both files are shared by their key
(`binac_core.foundation.shared_files`): put there by whoever samples them, fetched, digest checked, by a host that
lacks them instead of sampling them again."""

from __future__ import annotations

import hashlib
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from binac_core.foundation import shared_files
from binac_core.foundation.files import StageFile, read_json, write_json
from binac_core.foundation.workspace import workspace
from binac_core.model.stage_io import AdapterRef
from binac_core.reports.step_metrics import bank_step_metrics
from binac_core.rl import bank as banks
from binac_core.rl.kinds import EvalProtocol, FeedbackSource
from binac_core.store import step_records
from binac_core.store.identity import RunIdentity
from tasks._common import CACHED, config, loaded


def _existing(path: Path) -> StageFile | None:
    """The file at `path` as a stage file when this host has it or, with an object store, the store does (then
    fetched); None when neither has it."""
    key = shared_files.sync(path) if shared_files.enabled() else None
    if not path.exists():
        return None
    return StageFile(str(path), hashlib.sha256(path.read_bytes()).hexdigest()[:16], key=key)


@task(name="build-bank", cache_policy=NO_CACHE)
def build_bank(cfg_d: dict, base: StageFile, weights: str, seed: int) -> StageFile:
    """The bank of the config on the base whose weights hash is `weights`: the stored one where it exists (here, or
    in the object store), else sampled and written atomically (`workspace().bank_file`; with a store, put there
    too). Not cached by Prefect: the file is the cache."""
    cfg = config(cfg_d)
    path = workspace().bank_file(banks.bank_name(weights, banks.bank_key(cfg, weights)))
    if (found := _existing(path)) is not None:
        return found
    _, backend = loaded(cfg_d, base, seed)
    return write_json(path, banks.build_bank(backend, cfg, weights).to_json())


@task(name="frozen-bank", cache_policy=NO_CACHE)
def frozen_bank(cfg_d: dict, base: StageFile, bank: StageFile, seed: int) -> StageFile:
    """The frozen base critic's feedback on the bank: the stored file where it exists (`bank.frozen_key`), else
    sampled once and written atomically beside the bank."""
    cfg, found = config(cfg_d), banks.Bank.from_json(read_json(bank))
    path = workspace().bank_file(banks.frozen_name(cfg, found))
    if (stored := _existing(path)) is not None:
        return stored
    _, backend = loaded(cfg_d, base, seed)
    scores = banks.score_bank(backend, cfg, found, FeedbackSource.CRITIC_BASE, None)
    return write_json(path, banks.scores_to_json(scores))


@task(name="score-bank", **CACHED)
def score_bank(cfg_d: dict, base: StageFile, bank: StageFile, critic: AdapterRef, seed: int, step: int, out_dir: str):
    """The method's critic's feedback on the bank at an evaluation: `bank-step<step>.json` in `out_dir`."""
    _, backend = loaded(cfg_d, base, seed)
    found = banks.Bank.from_json(read_json(bank))
    scores = banks.score_bank(backend, config(cfg_d), found, FeedbackSource.CRITIC_TRAINED, critic)
    return write_json(Path(out_dir) / f"bank-step{step:05d}.json", banks.scores_to_json(scores))


@task(name="store-bank", cache_policy=NO_CACHE)
def store_bank(run: RunIdentity, step: int, bank: StageFile, method: StageFile, frozen: StageFile) -> dict:
    """Write the bank's rows of an evaluation (the method's critic's and the frozen critic's feedback) and return
    their metrics (`bank_<split>/...`, binac_core/reports/bank_measures.py)."""
    found = banks.Bank.from_json(read_json(bank))
    scores = {
        EvalProtocol.BANK: banks.scores_from_json(read_json(method)),
        EvalProtocol.BANK_FROZEN: banks.scores_from_json(read_json(frozen)),
    }
    problems = {s: part.problems for s, part in found.splits.items()}
    return bank_step_metrics(step_records.store_bank(workspace(), run, step, scores, problems))
