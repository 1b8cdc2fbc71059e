"""A run's base is its weights (`binac_core.model.weights`): the checks that a run resumed, or a study resumed or
restored, is given the base weights its runs ran on. Each refuses in one line naming both hashes.

Where a run records its base: the MLflow parameter `base.weights_sha256` of its run (the run's stored state, found
again by its run key); an archived run keeps it in its `run.json`. A run that recorded none (it ran before the
parameter existed) is not checked. `check_before` runs before any compute (the CLI): it can only hash a base that
is already there, so a base built again on resume (its folder was deleted) is checked once built, by the run
itself (`check_run`).
"""

from __future__ import annotations

from pathlib import Path

from binac_core.foundation.config import Config
from binac_core.foundation.provenance import stage_code_digest
from binac_core.foundation.workspace import Workspace
from binac_core.model.base_model import existing_base
from binac_core.model.weights import PARAM, check_same
from binac_core.runs.plans import train_run_key
from binac_core.store import archive as archives
from binac_core.store import tracking

RESUME_HINT = (
    "a run resumes only on the weights it started with (put that base back, name it with model.base_weights, "
    "or start a new run with --fresh)"
)
STUDY_HINT = (
    "a study's runs share one base (put that base back, name it with model.base_weights, or start the study "
    "under another name)"
)


def check_run(ws: Workspace, run_key: str, digest: str, what: str, hint: str = RESUME_HINT) -> None:
    """Refuse when the run with key `run_key` (`what`: how to name it; `hint`: what to do) recorded other base
    weights than `digest`."""
    check_same(tracking.recorded_params(ws, [run_key], PARAM).get(run_key), digest, what, hint)


def check_before(
    cfg: Config, ws: Workspace, run_key: str, what: str, extra: tuple[Path, ...] = (), hint: str = RESUME_HINT
) -> str | None:
    """Before any compute: the base the config names, when it is there (a base named by its weights must be: one
    line naming where it was looked for, `extra` included), checked against what the run `run_key` recorded.
    Returns its weights hash (None: not built yet, so not checked here)."""
    found = existing_base(cfg, ws, extra)
    if found is None:
        return None
    _, digest = found
    check_run(ws, run_key, digest, what, hint)
    return digest


def check_train(
    cfg: Config, ws: Workspace, method: str, seed: int, iterations: int, parent_key: str = "", fresh: str = ""
) -> str | None:
    """`check_before` for the training run these arguments make (its key: `plans.train_run_key` on this stage
    code); what `binac train` and `binac compare` check before any compute, and a run before its first stage."""
    key = train_run_key(cfg, method, seed, iterations, parent_key, stage_code_digest(), fresh)
    return check_before(cfg, ws, key, f"run {method}-{cfg.name}-s{seed} ({key})")


def check_runs(ws: Workspace, keys: list[str], names: dict[str, str], digest: str, archive: Path | None) -> None:
    """Refuse when any run of `keys` (named by `names`) recorded other base weights than `digest`, in the store
    or in the archive; the line names the first such run, both hashes and how many runs differ."""
    recorded = tracking.recorded_params(ws, keys, PARAM)
    if archive is not None:
        recorded = {**archives.recorded_params(archive, keys, PARAM), **recorded}
    other = [k for k in keys if recorded.get(k, digest) != digest]
    if other:
        first = other[0]
        more = f" (and {len(other) - 1} more run(s))" if len(other) > 1 else ""
        check_same(recorded[first], digest, f"run {names.get(first, first)} ({first}){more}", STUDY_HINT)
