"""A base model's checks without a study run: build (or reuse) a tiny base, measure it with the study's own function
(`binac_core.studies.regimes.measure_base`: single-turn at the training temperature and greedy, the all-wrong share,
the bounds of feedback, the shortcut check and the preconditions G1-G4 of `binac_core.studies.preconditions`), and,
given a study file, choose its regimes by its rules and apply its gates, before any RL run.

    python scripts/base_checks.py --study studies/testbed-controls.yaml --out /tmp/testbed   # rules and gates
    python scripts/base_checks.py --preset study2 --difficulties 2,6 --split eval --out /tmp/base2   # measures only

With `--study`, the measurements read the validation split (choices made before the main runs never see the
reported split), print one line per measure with its interval, then one line per failing gate naming the gate, the
regime and its value, and exit 1 when any gate fails (0 when all hold). The base's weights sha256
(`binac_core.model.weights`) is printed first and kept in `checks.json`. Without, every listed difficulty is
measured with the bounds on `--split` and nothing is judged. Writes `<out>/model` (the base, reused when it
exists; `--model` names another folder) and `<out>/checks.json`. It does not use Prefect, MLflow or the
pipeline's cache.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

from binac_core.benchmarks.problems import load_problems
from binac_core.foundation.config import Config, load_config
from binac_core.foundation.stats import wilson_interval
from binac_core.model.pretrain import build_base_model
from binac_core.model.runtime import configure_threads, policy_and_backend, pretraining_threads
from binac_core.model.weights import verified
from binac_core.studies.preconditions import GATES
from binac_core.studies.regimes import measure_base
from binac_core.studies.study import (
    choose_difficulties,
    gate_failures,
    gates_at,
    load_study,
    wanted_difficulties,
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", type=Path, help="a study file: its preset, overrides, regime rules and gates")
    ap.add_argument("--preset", default="study2")
    ap.add_argument("--difficulties", default="3,6", help="without --study: the difficulties measured")
    ap.add_argument("--split", default="val", choices=("val", "eval"), help="without --study: the problems measured")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="config override (YAML value)")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", type=Path, help="an existing base folder (default: <out>/model, built if missing)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    overrides = {k: yaml.safe_load(v) for k, v in (s.split("=", 1) for s in args.set)}
    study = load_study(args.study) if args.study else None
    if study is not None:
        overrides = {**study.overrides, **overrides}
    preset = study.preset if study else args.preset
    model = args.model or args.out / "model"
    if not (model / "config.json").exists():
        configure_threads(pretraining_threads())
        build_base_model(load_config(preset, overrides), model, log=lambda s: print(s, flush=True))
    configure_threads()
    weights = verified(model)  # the base's identity (binac_core/model/weights.py), printed and kept with the checks
    print(f"base {model}: weights sha256 {weights}", flush=True)
    group = study.group_size if study else args.group_size
    seed = study.measure_seed if study else args.seed

    def measure(d: int, bounds: bool) -> dict:
        cfg = load_config(preset, {**overrides, "task.difficulty": d})
        m = _measure(model, cfg, "val" if study else args.split, group, seed, bounds)
        _print(m)
        return m

    if study is None:
        results = {d: measure(int(d), True) for d in args.difficulties.split(",")}
        (args.out / "checks.json").write_text(json.dumps({"weights_sha256": weights, **results}, indent=1))
        return
    wanted, fixed = wanted_difficulties(study)
    results = {d: measure(d, d in fixed) for d in sorted(wanted)}
    difficulties, deviations = choose_difficulties(study, results)
    for regime, d in difficulties.items():
        if "oracle" not in results[d]:
            results[d] = measure(d, True)
        print(f"regime {regime}: difficulty {d}; gates {', '.join(gates_at(study, regime)) or 'none'}", flush=True)
    failures = gate_failures(study, results, difficulties)
    (args.out / "checks.json").write_text(
        json.dumps(
            {
                "weights_sha256": weights,
                "difficulties": difficulties,
                "deviations": deviations,
                "failures": failures,
                "measured": results,
            },
            indent=1,
        )
    )
    for line in deviations + failures:
        print(line, flush=True)
    verdict = f"{len(failures)} gate(s) failed" if failures else "every gate holds"
    print(f"{verdict} (base weights sha256 {weights})", flush=True)
    sys.exit(1 if failures else 0)


def _measure(model: Path, cfg: Config, split: str, group: int, seed: int, bounds: bool) -> dict:
    _, backend = policy_and_backend(model, cfg, seed)
    return measure_base(
        backend,
        load_problems(cfg, split),
        group_size=group,
        gen=cfg.generation,
        seed=seed,
        bounds=bounds,
        benchmark=cfg.task.benchmark,
    )


def _print(m: dict) -> None:
    d = m["difficulty"]
    print(
        f"d{d}: single {100 * m['single']:.1f} %, greedy {100 * m['greedy_single']:.1f} %, all-wrong "
        f"{m['all_wrong_frac']:.3f}" + (f", oracle {100 * m['oracle']:.1f} %" if "oracle" in m else ""),
        flush=True,
    )
    if m.get("shortcut_n"):
        right = round(m["shortcut_right"] * m["shortcut_n"])
        low, high = wilson_interval(right, m["shortcut_n"])
        print(
            f"d{d}: shortcut: right after approval {100 * m['shortcut_right']:.1f} % [{100 * low:.1f}, "
            f"{100 * high:.1f}] of {m['shortcut_n']}, answer kept {100 * m['shortcut_copy']:.1f} %",
            flush=True,
        )
    gate_of = {g.measure: name for name, g in GATES.items()}
    for name, e in (m.get("preconditions") or {}).items():
        gate = f"  (gate {gate_of[name]})" if name in gate_of else ""
        print(f"d{d}: {name} {e['value']:.3f} [{e['low']:.3f}, {e['high']:.3f}] n={e['n']}{gate}", flush=True)


if __name__ == "__main__":
    main()
