"""A `testbed` training run before and after a change: wall time, phase by phase, and the numbers it produces.

    python -m bench.testbed_run --before DIR [--seeds 0,1,2,3,4] [--steps 60] [--out DIR]

`--before` is a checkout of the commit to compare against (e.g. `git worktree add DIR <commit>`); the other side
is this checkout. For each seed, one `binac train --preset testbed --method binac` of each side is started at the
same time, one per core, so each pair runs under the same load and its ratio (before / after wall time) is
paired; the settings are the third study's (`SETTINGS`: difficulty 7, `actor_lr` 0.005, `t_high` 4, `lam` 0.25),
its evaluations included. Both sides run on the same base model's weights (`--base`, by default the third study's
archived base), copied into each side's workspace under that side's config digest, so neither pretrains.

Reported (and written to OUT/testbed_run.json, which a rerun resumes: seeds already there are not run again):
each pair's wall and CPU seconds and their ratios, with the load average at its start and at each run's end;
the median over seeds of each phase's seconds (`perf/<phase>_s`, `bench.stage_costs.phase_totals`); and, per
seed, the areas under held-out acc_single and acc_feedback (`pilot_rule.curve_area` over the evaluations) on each
side, with the mean paired difference and its 95 % t interval: the check that a change which alters the
random stream (float rounding in another order is enough for sampling to diverge) leaves what a run learns the
same within 3 points (bench/results.md). A run's wall time includes its process start and its evaluations.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SETTINGS = {"task.difficulty": 7, "train.actor_lr": 0.005, "train.t_high": 4, "train.lam": 0.25}
"""The third study's main-grid settings (studies/sparse-feedback-v3.yaml) at its sparse regime's difficulty."""
BASE = REPO / "studies/archive/models/base-2709520264f5790b"
MEASURES = ("acc_single", "acc_feedback")


def _env(side: Path, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "MLFLOW_TRACKING_URI")}
    return {
        **env,
        "BINAC_HOME": str(home),
        "PREFECT_HOME": str(home / "prefect"),
        "PYTHONPATH": str(side),
        "HF_HUB_OFFLINE": "1",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "TOKENIZERS_PARALLELISM": "false",
    }


def seed_workspace(side: Path, home: Path, base: Path) -> None:
    """`base` copied into `home` as the base model of `side`'s testbed config digest (its pretraining code's)."""
    code = f"from binac_core.foundation.config import load_config as l; print(l('testbed', {SETTINGS!r}).base_digest())"
    digest = subprocess.run(
        [sys.executable, "-c", code], cwd=side, env=_env(side, home), capture_output=True, text=True, check=True
    ).stdout.strip()
    target = home / "models" / f"base-{digest}"
    if not target.exists():
        shutil.copytree(base, target)


def extra_settings(side: Path, home: Path) -> dict:
    """Settings that keep `side`'s run doing the work the other side's does: measurements added since (the fixed
    attempt bank, `bank.enabled`, scored at every evaluation) turned off where `side`'s config has them."""
    code = "from binac_core.foundation.config import Config as C; print('bank' in C.model_fields)"
    has_bank = subprocess.run(
        [sys.executable, "-c", code], cwd=side, env=_env(side, home), capture_output=True, text=True, check=True
    ).stdout.strip()
    return {"bank.enabled": "false"} if has_bank == "True" else {}


def _train(side: Path, home: Path, seed: int, steps: int, log: Path) -> subprocess.Popen:
    settings = {**SETTINGS, **extra_settings(side, home)}
    sets = [a for k, v in settings.items() for a in ("--set", f"{k}={v}")]
    args = ["train", "--preset", "testbed", "--method", "binac", "--steps", str(steps), "--seed", str(seed), *sets]
    out = log.open("w")
    return subprocess.Popen(
        [sys.executable, "-m", "flows.cli", *args], cwd=side, env=_env(side, home), stdout=out, stderr=subprocess.STDOUT
    )


def run_pair(sides: dict[str, Path], homes: dict[str, Path], seed: int, steps: int, out: Path) -> dict:
    """Both sides' runs of `seed` started together: their wall seconds and CPU seconds (user + system of the run's
    process and the processes it waited for, `os.wait4`: what the run cost the machine, which moves less with the
    other jobs' load than its wall time does), and the load average at the start and at each end."""
    load = os.getloadavg()[0]
    start = time.perf_counter()
    procs = {name: _train(sides[name], homes[name], seed, steps, out / f"{name}-s{seed}.log") for name in sides}
    wall: dict[str, float] = {}
    cpu: dict[str, float] = {}
    end_load: dict[str, float] = {}
    while len(wall) < len(procs):
        for name, p in procs.items():
            if name in wall:
                continue
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid == 0:
                continue
            if os.waitstatus_to_exitcode(status) != 0:
                raise SystemExit(f"{name} seed {seed} failed: see {out / f'{name}-s{seed}.log'}")
            wall[name] = time.perf_counter() - start
            cpu[name] = usage.ru_utime + usage.ru_stime
            end_load[name] = os.getloadavg()[0]
        time.sleep(0.5)
    return {"seed": seed, "load": load, "wall": wall, "cpu": cpu, "end_load": end_load}


def run_values(home: Path, steps: int) -> dict[int, dict]:
    """seed -> {"phases": phase seconds, measure: area} of each finished testbed run in `home`."""
    os.environ["BINAC_HOME"] = str(home)
    from bench.stage_costs import phase_totals
    from binac_core.foundation.timing import PHASES
    from binac_core.foundation.workspace import workspace
    from binac_core.store import tracking
    from binac_core.studies.pilot_rule import curve_area

    ws = workspace()
    client = tracking.client(ws)
    out = {}
    for run in client.search_runs([tracking.experiment_id(client, ws)], "attributes.status = 'FINISHED'"):
        if run.data.tags.get("kind") or "seed" not in run.data.params:
            continue

        def history(key, run_id=run.info.run_id):
            return {m.step: m.value for m in client.get_metric_history(run_id, key)}

        phases = phase_totals({f"perf/{p}_s": list(history(f"perf/{p}_s").values()) for p in PHASES})
        values = {"phases": phases}
        for name in MEASURES:
            points = history(f"eval/{name}")
            values[name] = curve_area(points, sorted(points))
        out[int(run.data.params["seed"])] = values
    return out


def report(pairs: list[dict], values: dict[str, dict[int, dict]]) -> str:
    from binac_core.foundation.stats import t_interval
    from binac_core.foundation.timing import PHASES

    lines = [
        "| seed | load at start / at after's end / at before's end | wall s before | after | before / after "
        "| CPU s before | after | before / after |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for p in pairs:
        (b, a), (cb, ca) = ((p[k]["before"], p[k]["after"]) for k in ("wall", "cpu"))
        ends = " / ".join(f"{p['end_load'][s]:.1f}" for s in ("after", "before"))
        lines.append(
            f"| {p['seed']} | {p['load']:.1f} / {ends} | {b:.0f} | {a:.0f} | {b / a:.2f} | {cb:.0f} | {ca:.0f} "
            f"| {cb / ca:.2f} |"
        )
    for kind in ("wall", "cpu"):
        ratios = [p[kind]["before"] / p[kind]["after"] for p in pairs]
        lines += ["", f"median before / after ({kind}): **{statistics.median(ratios):.2f}** "]
        lines[-1] += f"[{min(ratios):.2f}-{max(ratios):.2f}]"
    lines += ["", "| side | " + " | ".join(PHASES) + " |", "| --- | " + " | ".join("---" for _ in PHASES) + " |"]
    for side in ("before", "after"):
        med = {p: statistics.median(v["phases"][p] for v in values[side].values()) for p in PHASES}
        lines.append(f"| {side} (median s) | " + " | ".join(f"{med[p]:.1f}" for p in PHASES) + " |")
    seeds = sorted(set(values["before"]) & set(values["after"]))
    lines += ["", "| measure | " + " | ".join(f"seed {s} before / after" for s in seeds) + " | mean after - before |"]
    lines.append("| --- | " + " | ".join("---" for _ in seeds) + " | --- |")
    for m in MEASURES:
        diffs = [100 * (values["after"][s][m] - values["before"][s][m]) for s in seeds]
        mean, half = t_interval(diffs) if len(diffs) > 1 else (statistics.mean(diffs), float("nan"))
        cells = [f"{100 * values['before'][s][m]:.1f} / {100 * values['after'][s][m]:.1f}" for s in seeds]
        lines.append(
            f"| {m} area | " + " | ".join(cells) + f" | {mean:+.1f} [{mean - half:+.1f}, {mean + half:+.1f}] |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, required=True, help="a checkout of the commit compared against")
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--base", type=Path, default=BASE, help="the base model folder both sides run on")
    ap.add_argument("--out", type=Path, default=Path(".binac/bench-testbed"))
    ap.add_argument("--report-only", action="store_true", help="report the pairs OUT already holds; run nothing")
    args = ap.parse_args(argv)
    sides = {"before": args.before.resolve(), "after": REPO}
    homes = {name: (args.out / name).resolve() for name in sides}
    args.out.mkdir(parents=True, exist_ok=True)
    for name in sides:
        seed_workspace(sides[name], homes[name], args.base)
    record = args.out / "testbed_run.json"
    pairs = json.loads(record.read_text())["pairs"] if record.exists() else []
    done = {p["seed"] for p in pairs}
    for seed in [] if args.report_only else [int(s) for s in args.seeds.split(",") if int(s) not in done]:
        pairs.append(run_pair(sides, homes, seed, args.steps, args.out))
        record.write_text(json.dumps({"pairs": pairs}, indent=1))  # each pair kept as it finishes
    values = {name: run_values(homes[name], args.steps) for name in sides}
    record.write_text(json.dumps({"pairs": pairs, "values": values}, indent=1))
    print(report(pairs, values))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
