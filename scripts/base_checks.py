"""A study's base-model checks without a study: build (or reuse) a tiny base and measure it at some difficulties
with the study's own function (`binac_core.runs.regimes.measure_base`: single-turn, all-wrong share, the bounds and the
shortcut check) and the gates of `binac_core.runs.study.GATES`, before any RL run. For trying a base for the synthetic
task (docs/results-study-v2.md) on the checks alone.

    python scripts/base_checks.py --preset study2 --difficulties 3,6,8 \\
        --set model.hidden_size=128 --set model.intermediate_size=384 --out /tmp/base2

Writes `<out>/model` (the base, reused when it exists) and `<out>/checks.json` (the measurements by difficulty),
and prints one line per difficulty. It does not use Prefect, MLflow or the pipeline's cache.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml

from binac_core.benchmarks.problems import load_problems
from binac_core.model.pretrain import build_base_model
from binac_core.model.runtime import configure_threads, policy_and_backend, pretraining_threads
from binac_core.reports.stats import wilson_interval
from binac_core.runs.config import load_config
from binac_core.runs.regimes import measure_base


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="study2")
    ap.add_argument("--difficulties", default="3,6")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="config override (YAML value)")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    overrides = {k: yaml.safe_load(v) for k, v in (s.split("=", 1) for s in args.set)}
    model = args.out / "model"
    if not (model / "config.json").exists():
        configure_threads(pretraining_threads())
        build_base_model(load_config(args.preset, overrides), model, log=lambda s: print(s, flush=True))
    configure_threads()
    results = {}
    for d in (int(x) for x in args.difficulties.split(",")):
        cfg = load_config(args.preset, {**overrides, "task.difficulty": d})
        _, backend = policy_and_backend(model, cfg, args.seed)
        m = measure_base(backend, load_problems(cfg, "eval"), group_size=args.group_size, gen=cfg.generation,
                         seed=args.seed, benchmark=cfg.task.benchmark)
        results[d] = m
        right = round(m["shortcut_right"] * m["shortcut_n"])
        low, high = wilson_interval(right, m["shortcut_n"])
        print(f"d{d}: single {100 * m['single']:.1f} %, all-wrong {m['all_wrong_frac']:.3f}, oracle "
              f"{100 * m['oracle']:.1f} %, right after approval {100 * m['shortcut_right']:.1f} % "
              f"[{100 * low:.1f}, {100 * high:.1f}] of {m['shortcut_n']}, answer kept {100 * m['shortcut_copy']:.1f} %",
              flush=True)
    (args.out / "checks.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
