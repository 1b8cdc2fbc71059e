"""A run's base is its weights (`binac_core.model.weights`): the checks that a run resumed, or a study resumed or
restored, is given the base weights its runs ran on. Each refuses in one line naming both hashes.

Where a run records its base: the MLflow parameter `base.weights_sha256` of its run (the run's stored state, found
again by its run key); an archived run keeps it in its `run.json`. A run that recorded none (it ran before the
parameter existed) is not checked. `check_before` runs before any compute (the CLI): it can only hash a base that
is already there, so a base built again on resume (its folder was deleted) is checked once built, by the run
itself (`check_run`).

A run a study submits names the study's base by its weights hash (`check_submitted`): with an object store the
worker fetches that base into its home before any compute (`binac_core.model.base_objects`), and refuses when it
holds another base for the run's config, or the store lacks it.
"""

from __future__ import annotations

from pathlib import Path

from binac_core.errors import BinacError
from binac_core.foundation.config import Config
from binac_core.foundation.provenance import stage_code_digest
from binac_core.foundation.workspace import Workspace
from binac_core.model import base_objects
from binac_core.model.base_model import existing_base, fetch_named
from binac_core.model.weights import PARAM, check_same, search_path
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
SUBMITTED_HINT = (
    "a host's models folder is a cache: delete that base to fetch the study's from the store (no stage was computed)"
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


def check_submitted(cfg: Config, ws: Workspace, expected: str) -> None:
    """Before any compute, a run submitted with its study's base weights hash `expected` (empty: no check): with an
    object store, a tiny base this home lacks is fetched by that hash (into the folder of the config's base, or for
    a base named by `model.base_weights` into the models folder), then the base the config names here is
    refused in one line naming both hashes unless its weights hash to `expected`. A hub or smol base not there yet
    is checked once the run has it (`check_built`)."""
    if not expected:
        return
    m = cfg.model
    if m.base_weights and not expected.startswith(m.base_weights):
        raise BinacError(f"the study's base has weights sha256 {expected}, the config names {m.base_weights}")
    if m.source == "tiny" and base_objects.enabled():
        if m.base_weights:
            fetch_named(expected, search_path(ws.models_root), ws)
        elif not (ws.base_model_dir(cfg.base_digest()) / "config.json").is_file():
            base_objects.fetch(expected, ws.base_model_dir(cfg.base_digest()))
    found = existing_base(cfg, ws)
    if found is not None:
        check_built(expected, found[1], found[0])


def check_built(expected: str, actual: str, folder: str | Path) -> None:
    """The run's base (at `folder`, weights hash `actual`) is the one its study named (`expected`; empty: no
    check), or one line naming both hashes."""
    if expected and actual != expected:
        raise BinacError(
            f"this worker's base {folder} has weights sha256 {actual}, the study's has {expected}; {SUBMITTED_HINT}"
        )
