"""A pre-registered study: the regimes chosen on the base model, then every regime × method × seed as a flow run of the
`train` deployment over the Prefect work pool's workers, then the report.

    base model (its identity: the sha256 of its weights; a study whose parent run or runs recorded other base
    weights refuses, `binac_core.runs.bases`; with an object store, put there by its weights hash, which every
    run is given: `binac_core.model.base_objects`)
    → measure it at every difficulty the regimes need (rule statistic + feedback bounds)
    → regimes' difficulties → the study file's gates on the base (a failure stops here) → one MLflow parent run
    → the critic's attempt banks the runs score on, built once (`build_banks`) → submit the grid's runs (done ones
    skipped) → wait
    → report (tables, hypotheses, plots) logged to the parent run

With an archive folder (`binac study FILE --archive DIR`, `binac_core/store/archive.py`), its base models and
finished runs are restored into the store first (a fresh `$BINAC_HOME` on another machine reruns only what the
archive lacks) and every run is archived as it finishes, and again before the report; the archive keeps its bases'
weights hashes, and a base that differs from the archive's, or from what the archived runs recorded, refuses. The
critic's attempt banks of the base (binac_core/rl/bank.py) are restored with the bases and archived before the
report.

Runs on the machine that starts it (`binac study FILE`) against a Prefect server (PREFECT_API_URL); the training
runs themselves run wherever the pool's workers are. Re-running the same command resumes: finished runs are
skipped, live ones waited on, killed ones resubmitted (flows/fanout.py).
"""

from __future__ import annotations

import functools
from pathlib import Path

import duckdb
from prefect import flow

from binac_core.errors import BinacError
from binac_core.foundation.config import load_config
from binac_core.foundation.files import StageFile
from binac_core.foundation.provenance import stage_code_digest
from binac_core.foundation.workspace import workspace
from binac_core.model import base_objects
from binac_core.model.base_model import hash_cache
from binac_core.model.weights import PARAM
from binac_core.rl.bank import bank_key, bank_name, banked
from binac_core.rl.methods import method_spec
from binac_core.runs.bases import STUDY_HINT, check_run, check_runs
from binac_core.runs.plans import train_run_key
from binac_core.store import tracking
from binac_core.store.archive import (
    export_banks,
    export_finished,
    export_model,
    restore_banks,
    restore_models,
    restore_runs,
)
from binac_core.studies.study import (
    Study,
    choose_difficulties,
    equal_budget_totals,
    gate_failures,
    grid,
    load_study,
    wanted_difficulties,
)
from binac_core.studies.study_report import BaseIdentity, build_study_report
from flows.fanout import Tracked, check_deployment, fan_out
from tasks.bank import build_bank, frozen_bank
from tasks.prepare import base_weights, build_base_model
from tasks.regimes import measure_base_at
from tasks.track import finish_run, start_run


@flow(name="study")
def study(path: str, report_only: bool = False, retries: int = 1, archive: str | None = None) -> dict:
    """Run (or resume) the study in the file at `path`; `report_only` writes the report from the finished runs
    without submitting anything (marked partial when runs are missing); `archive`: a folder to restore finished
    runs from and archive them to."""
    st = load_study(path)
    ws = workspace()
    pool = None if report_only else check_deployment(st.deployment, ws.home)
    key, code = st.key(), stage_code_digest()
    if archive and (models := restore_models(ws, Path(archive))):
        _say(f"restored the base model(s) {', '.join(models)} from {archive}")
    if archive and (banks := restore_banks(ws, Path(archive))):
        _say(f"restored {len(banks)} attempt bank file(s) from {archive}")
    base = build_base_model(st.config().model_dump(mode="json"))
    weights = base_weights(base)
    _say(f"base model {base.path}: weights sha256 {weights}")
    # A resumed study keeps its base (binac_core/runs/bases.py): its parent run's record, before any measurement.
    check_run(ws, f"study-{key}", weights, f"study {st.name} (study-{key})", STUDY_HINT)
    if archive and export_model(Path(archive), Path(base.path), weights, hash_cache(ws)):
        _say(f"archived the base model {Path(base.path).name} to {archive}")
    measured, difficulties, deviations = choose_regimes(st, base)
    runs = grid(st, difficulties)
    keys = [run_key(st, r, key, code) for r in runs]
    # Every run the store or the archive holds ran on this base, or the study refuses before any run is restored.
    check_runs(
        ws, keys, {k: r.name for k, r in zip(keys, runs, strict=True)}, weights, Path(archive) if archive else None
    )
    failures = gate_failures(st, measured, difficulties)
    if failures and not report_only:  # the base fails a pre-registered check: no run is submitted
        raise BinacError(
            f"study {st.name}: the base model (weights sha256 {weights}) fails its gates; no run submitted: "
            + "; ".join(failures)
        )
    deviations += [f"gate failed (report only): {f}" for f in failures]
    totals = equal_budget_totals(st)
    params = {
        "study": st.name,
        "study_file": str(st.path),
        "preset": st.preset,
        "methods": ",".join(st.methods),
        "seeds": ",".join(map(str, st.seeds)),
        "iterations": str(st.iterations),
        "eval_every": str(st.eval_every),
        "equal_actor_train_samples": str(totals["actor_train"]),
        "equal_generated_samples": str(totals["generated"]),
        "variants": ",".join(f"{m}:{v}" for m, named in st.variants.items() for v in named),
        **{f"regime.{r}": str(d) for r, d in difficulties.items()},
        **st.config().flat(),
        PARAM: weights,
    }
    parent = start_run(
        f"study-{key}",
        f"study-{st.name}",
        {"kind": "study", "method": "study", "preset": st.preset, "study": st.name},
        params,
    )
    # With an object store the runs name the base by its weights hash, and workers fetch that one (put there when
    # it was built or found, `binac_core.model.base_model`); without one they share this disk's.
    shared = weights if base_objects.enabled() else ""
    tracked = [
        Tracked(r.name, k, train_parameters(st, r, parent, key, code, shared), r.method)
        for r, k in zip(runs, keys, strict=True)
    ]
    try:
        if archive:
            _say(f"restored {len(restore_runs(ws, Path(archive), parent, keys))} finished run(s) from {archive}")
        if not report_only:
            if built := build_banks(st, runs, base, weights):
                _say(f"attempt bank(s) ready before any run: {', '.join(built)}")
            is_finished = finished_keys(ws)
            fan_out(
                st.deployment,
                pool,
                tracked,
                f"binac-study:{key}",
                ws.home,
                is_finished,
                retries,
                on_done=functools.partial(archive_run, ws, archive) if archive else None,
            )
        if archive:
            _say(f"archived {len(export_finished(ws, Path(archive), keys))} more finished run(s) to {archive}")
            if banks := export_banks(ws, Path(archive), weights):
                _say(f"archived {len(banks)} attempt bank file(s) of the base to {archive}")
        outcome = collect(ws, runs, tracked)
        report = build_study_report(
            st,
            measured,
            difficulties,
            deviations,
            outcome,
            ws.home / "reports" / f"study-{key}",
            base=BaseIdentity(Path(base.path).name, weights),
        )
        for f in report["files"]:
            tracking.log_path(ws, parent, f, "report")
        complete = all(o["finished"] for o in outcome)
        if not report_only:  # a report of a study still running leaves its parent run as it is
            tracking.finish(ws, parent, "FINISHED" if complete else "FAILED")
    except BaseException:
        if not report_only:
            finish_run(parent, "FAILED")
        raise
    return {
        "parent_run_id": parent,
        "report_text": report["text"],
        "report_files": report["files"],
        "complete": complete,
        "runs": len(runs),
        "finished": sum(o["finished"] for o in outcome),
    }


def build_banks(st: Study, runs, base: StageFile, weights: str) -> list[str]:
    """The critic's attempt banks the grid's runs score on (binac_core/rl/bank.py), each built once here, with the
    frozen base critic's feedback on it, before the runs are submitted: runs started together would otherwise each
    sample the same missing bank. Returns the banks' file names (those already stored included)."""
    built = {}
    for r in runs:
        cfg = load_config(st.preset, r.overrides)
        if not banked(cfg, method_spec(r.method).train_critic):
            continue
        cfg_d = cfg.model_dump(mode="json")
        name = bank_name(weights, bank_key(cfg, weights))
        if name not in built:
            built[name] = frozen_bank(cfg_d, base, build_bank(cfg_d, base, weights, 0), 0)
    return sorted(built)


def _say(line: str) -> None:
    print(f"[study] {line}", flush=True)


def archive_run(ws, archive: str, t: Tracked) -> None:
    """Archive one run as it finishes; a failure is said and left to the archiving before the report."""
    try:
        export_finished(ws, Path(archive), [t.key])
    except (OSError, duckdb.Error) as exc:
        _say(f"{t.name}: not archived now ({type(exc).__name__}: {exc}); archived again before the report")


def choose_regimes(st: Study, base: StageFile) -> tuple[dict, dict, list[str]]:
    """Measure the base at every difficulty a regime needs; apply the rules (`choose_difficulties`). Returns
    (measurements by difficulty, difficulty by regime, deviations to report)."""
    wanted, fixed = wanted_difficulties(st)
    measured = {
        d: measure_base_at(
            st.config(d).model_dump(mode="json"),
            base,
            group_size=st.group_size,
            seed=st.measure_seed,
            bounds=d in fixed,
        )
        for d in sorted(wanted)
    }
    difficulties, deviations = choose_difficulties(st, measured)
    for r in st.regimes:  # the bounds of every chosen difficulty
        d = difficulties[r.name]
        if "oracle" not in measured[d]:
            measured[d] = measure_base_at(
                st.config(d).model_dump(mode="json"), base, group_size=st.group_size, seed=st.measure_seed, bounds=True
            )
    return measured, difficulties, deviations


def run_key(st: Study, r, study_key: str, code: str) -> str:
    cfg = load_config(st.preset, r.overrides)
    return train_run_key(cfg, r.method, r.seed, st.iterations, study_key, code, "")


def train_parameters(st: Study, r, parent: str, study_key: str, code: str, base_sha256: str = "") -> dict:
    """The `train` flow's parameters for one run (a preset given as a file path travels as an absolute path), with
    the study's stage code digest `code`, which a worker on other code refuses (`check_stage_code`), and, when
    given, its base's weights hash `base_sha256`, which a worker fetches or refuses (`bases.check_submitted`)."""
    preset = st.preset
    if Path(preset).suffix:
        preset = str((st.path.parent / preset).resolve()) if not Path(preset).is_absolute() else preset
    return {
        "preset": preset,
        "method": r.method,
        "steps": st.iterations,
        "seed": r.seed,
        "overrides": r.overrides,
        "parent_run_id": parent,
        "parent_key": study_key,
        "label": r.variant,
        "stage_code": code,
        **({"base_sha256": base_sha256} if base_sha256 else {}),
    }


def finished_keys(ws):
    """`is_finished(run_key)`: whether the run's MLflow run is FINISHED (asked afresh each time)."""
    c = tracking.client(ws)
    exp = tracking.experiment_id(c, ws)

    def is_finished(key: str) -> bool:
        found = c.search_runs([exp], filter_string=f"tags.`binac.run_key` = '{key}'", max_results=1)
        return bool(found) and found[0].info.status == "FINISHED"

    return is_finished


def collect(ws, runs, tracked: list[Tracked]) -> list[dict]:
    """Every run's metric histories from MLflow (what the report reads), by run key."""
    c = tracking.client(ws)
    exp = tracking.experiment_id(c, ws)
    out = []
    for r, t in zip(runs, tracked, strict=True):
        found = c.search_runs([exp], filter_string=f"tags.`binac.run_key` = '{t.key}'", max_results=1)
        item = {
            "regime": r.regime,
            "difficulty": r.difficulty,
            "method": r.method,
            "variant": r.variant,
            "seed": r.seed,
            "overrides": r.overrides,
            "finished": bool(found) and found[0].info.status == "FINISHED",
            "metrics": {},
            "run_id": None,
            "notes": t.notes,
            "state": t.state,
        }
        if found:
            run = found[0]
            item["run_id"] = run.info.run_id
            item["isolation"] = run.data.params.get("grading.isolation")
            item["base_weights"] = run.data.params.get(PARAM)
            for name in run.data.metrics:
                item["metrics"][name] = {m.step: m.value for m in c.get_metric_history(run.info.run_id, name)}
        cfg, spec = load_config(t.parameters["preset"], r.overrides), method_spec(r.method)
        item["actor_train_per_iteration"] = spec.actor_train_samples_per_iteration(cfg)
        item["generated_per_iteration"] = spec.generated_samples_per_iteration(cfg)
        out.append(item)
    return out
