"""binac's benchmark harness: side-by-side measurements in one run, reported as medians and paired ratios.

    python -m bench.run [--preset micro|tiny|smol-synthetic] [--repeats N] [--out bench/results.md] [--calls N]
                        [--base-dir DIR] [--threads N] [--compare-threads] [--no-memory]
    python -m bench.run --roofline [--repeats N] [--before TREE] [--out bench/results.md]

What it measures (each module's docstring says exactly what is and is not inside each figure):
1. one GRPO iteration, binac's loop (HFBackend + policy_update) vs TRL 1.16's GRPOTrainer (`bench.grpo`);
2. HFBackend generation throughput, batch 8 vs 64 and actor adapter vs adapters disabled, optionally 1 vs 2
   torch threads (`bench.throughput`);
3. Prefect's per-call overhead of a cached task vs a plain call, against one GRPO iteration (`bench.orchestration`);
4. fresh-process import/setup time and peak RSS of one binac vs one TRL iteration (`bench.memory`);
5. one GRPO iteration inside `binac train` vs the bare loop of 1., and the pipeline's time per task, optionally
   also on an older checkout's code (`bench.pipeline`, `--before-tree`).
`--roofline` measures instead the decode loop's roofline on `smol` (`bench.roofline`: the machine's matmul rate and
memory bandwidth, the share of them the decode loop and transformers' `generate` achieve, optionally the loop of an
older checkout, `--before-tree`), written as its own section of the results file.
Ratios, not absolute seconds, are the result: the machines are shared, and seconds move with everyone's load.
Every variant runs with the same torch thread count: the pipeline's (`BINAC_TORCH_THREADS`, default 1) unless
`--threads` says otherwise.

A preset on the `smol` model (`model.source: smol`, e.g. `smol-synthetic`) runs the smol bench instead
(`bench.smol`: GRPO with its stage profile, generation at batch 1/32/64 and the adapter's cost, the actor update's
peak memory before/after the full-vocabulary log-softmax change) and writes its own section of the results file,
leaving the rest of the file as it is; a micro/tiny run rewrites the file and keeps that section.

The base model is built once per preset into a temp dir (`$TMPDIR/binac-bench/base-<preset>-<digest>`) and reused
by later runs; `--base-dir` picks another folder (built there if it holds no model of this config).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from bench.common import (
    CACHE,
    Report,
    Row,
    child_args,
    collect,
    default_threads,
    fmt,
    grpo_rows,
    kept_sections,
    load_average,
    median,
    paired_ratio,
    paired_row,
    run_child,
    run_meta,
    single_ratio,
    stderr_log,
    stop,
    table,
    write_section,
)

PIPELINE_TASKS_PER_GRPO_ITERATION = 4
"""generate-rollouts, score-rewards, update-actor, store-train-step (flows/train.py)."""


def default_base_dir(cfg) -> Path:
    return CACHE / f"base-{cfg.name}-{cfg.base_digest()}"


def ensure_base(cfg, base_dir: Path, log) -> float | None:
    """Build the base model into `base_dir` unless it already holds this config's; returns build seconds or
    None when reused. Not part of any comparison (both loops start from the finished folder)."""
    meta = base_dir / "base_meta.json"
    if meta.exists() and json.loads(meta.read_text()).get("config_digest") == cfg.base_digest():
        log(f"base model: reusing {base_dir}")
        return None
    from binac_core.model.pretrain import build_base_model

    t0 = time.perf_counter()
    build_base_model(cfg, base_dir, log=log)
    return time.perf_counter() - t0


# ------------------------------------------------------------------------------------------------ measurements


def measure_grpo(cfg, base_dir: Path, work: Path, repeats: int, threads: int, log) -> dict:
    from bench import grpo

    return grpo.compare(cfg, base_dir, work, repeats, threads, log)


def measure_throughput(cfg, binac_loop, repeats: int, compare_threads: bool, log) -> dict[str, list[float]]:
    from bench import throughput
    from bench.common import interleave

    args = (cfg, binac_loop.policy, binac_loop.actor, binac_loop.rows)
    log("throughput: batch 8 / batch 64 / adapters disabled, interleaved")
    out = interleave(throughput.variants(*args), repeats)
    if compare_threads:
        log("throughput: thread counts, interleaved")
        out |= interleave(throughput.thread_variants(*args), repeats)
    return out


DEFAULT_REPEATS, SMOL_REPEATS = 5, 3
"""Default `--repeats`: micro/tiny, and the smol presets (an iteration takes tens of seconds there)."""


PREFECT_REPEATS = 3
"""At most this many Prefect repeats: each costs two flow runs, seconds apiece on a busy machine."""


def prefect_job(repeats: int, calls: int, home: Path) -> dict:
    """{"prefect": child arguments} of the Prefect overhead measurement (needs no model)."""
    n = min(repeats, PREFECT_REPEATS)
    return {"prefect": ["--repeats", str(n), "--calls", str(calls), "--prefect-home", str(home)]}


def memory_jobs(cfg, base_dir: Path, work: Path, threads: int) -> dict:
    """{"binac": args, "trl": args}: the two fresh-process iterations (need the base model)."""
    args = child_args(cfg, base_dir, work, threads)
    return {"binac": args, "trl": args}


def start_children(jobs: dict) -> dict:
    return {name: run_child(name, args) for name, args in jobs.items()}


def run_children(jobs: dict, log) -> dict:
    """Run the children one after another (side by side they would slow each other down) and collect them."""
    out = {}
    for name, args in jobs.items():
        log(f"child: {name}")
        out[name] = collect(run_child(name, args))
    return out


# --------------------------------------------------------------------------------------------------- table rows


def pipeline_rows(p: dict | None, cfg) -> list[Row]:
    if p is None:
        return []
    t = cfg.train
    what = (
        f"pipeline iteration (`binac train`, grpo, B×G = {t.batch_problems}×{t.group_size}: tasks, stage files, "
        "shard, MLflow, adapter save) vs the bare loop"
    )
    failed = "error" in p
    bare, pipe = ([], []) if failed else (p["bare"], p["pipeline"])
    note = f"failed: {p['error'][:300]}" if failed else "goal ≤ 1.10; per-task breakdown below"
    return [paired_row("pipeline_iter", what, "s", "bare loop", bare, "pipeline", pipe, "pipeline / bare loop", note)]


def throughput_rows(tp: dict[str, list[float]], threads: int) -> list[Row]:
    from bench.throughput import other_threads

    b8, b64, base = tp["batch8_actor"], tp["batch64_actor"], tp["batch64_base"]
    rows = [
        paired_row(
            "gen_batch",
            "HFBackend generation, actor adapter, 64 prompts: batch 8 vs batch 64",
            "tok/s",
            "batch 8",
            b8,
            "batch 64",
            b64,
            "throughput 64 / 8",
        ),
        Row(
            "gen_lora",
            "HFBackend generation, batch 64: adapters disabled vs actor adapter",
            "tok/s",
            "disabled",
            median(base),
            "actor",
            median(b64),
            "time per token, actor / disabled",
            paired_ratio(base, b64),
            "LoRA overhead (adapter merged per call, binac_core.model.decode)",
        ),
    ]
    if "batch64_actor_generate" in tp:
        gen = tp["batch64_actor_generate"]
        rows.append(
            paired_row(
                "gen_loop",
                "HFBackend generation, actor, batch 64: transformers generate vs binac's loop",
                "tok/s",
                "generate",
                gen,
                "decode",
                b64,
                "throughput decode / generate",
                "binac_core.model.decode",
            )
        )
    if "run_threads" not in tp:
        return rows
    run_thr, alt, n = tp["run_threads"], tp["other_threads"], other_threads(threads)
    return rows + [
        paired_row(
            "gen_threads",
            f"HFBackend generation, actor, batch 16: {threads} vs {n} torch threads",
            "tok/s",
            f"{threads} thr",
            run_thr,
            f"{n} thr",
            alt,
            f"throughput {n} thr / {threads} thr",
            "A = the thread count of every other row",
        ),
    ]


def prefect_rows(p: dict, iter_s: float | None) -> list[Row]:
    if "error" in p:
        bad = [Row(k, w, "ms", "plain", None, "task", None, "", None, "failed") for k, w in _PREFECT]
        bad.append(Row("prefect_flow", _FLOW, "s", "flow run", None, "", None, "", None, "failed"))
        return bad + [Row("prefect_start", _START, "s", "start", None, "", None, "", None, p["error"][:300])]
    iter_ms = iter_s * 1000 if iter_s else None
    rows = []
    for (key, what), col in zip(_PREFECT, ("miss_ms", "hit_ms"), strict=True):
        per_iter = [x * PIPELINE_TASKS_PER_GRPO_ITERATION for x in p[col]]
        rows.append(
            Row(
                key,
                what,
                "ms/call",
                "plain fn",
                median(p["plain_ms"]),
                "task",
                median(p[col]),
                "task call / binac GRPO iteration",
                paired_ratio(p[col], [iter_ms] * len(p[col])),
                f"×{PIPELINE_TASKS_PER_GRPO_ITERATION} tasks per pipeline iteration ≈ {fmt(median(per_iter))} ms",
            )
        )
    rows.append(
        Row(
            "prefect_flow",
            _FLOW,
            "s",
            "flow run",
            median(p["flow_s"]),
            "",
            None,
            "flow run / binac GRPO iteration",
            paired_ratio(p["flow_s"], [iter_s] * len(p["flow_s"])) if iter_s else None,
            "once per flow run (`binac train` is one flow run)",
        )
    )
    rows.append(
        Row(
            "prefect_start",
            _START,
            "s",
            "first run",
            p["start_s"],
            "",
            None,
            "start / binac GRPO iteration",
            single_ratio(iter_s, p["start_s"]),
            f"once per process; {p['records']} files written to the temp result storage",
        )
    )
    return rows


_PREFECT = (
    ("prefect_miss", "Prefect task (INPUTS+TASK_SOURCE, persisted) in a flow, cache miss"),
    ("prefect_hit", "Prefect task (INPUTS+TASK_SOURCE, persisted) in a flow, cache hit"),
)
_FLOW = "Prefect flow run overhead (a flow call minus its task calls)"
_START = "Prefect temporary local API start + first flow run"
_MEMORY = (
    ("import", "import time, fresh process (torch + the loop's stack)", "s", "import_s"),
    ("setup", "setup: Policy+adapters / GRPOTrainer(...)", "s", "setup_s"),
    ("first_iter", "first iteration in a fresh process (one-time allocations)", "s", "first_iter_s"),
    ("rss_peak", "peak RSS after one iteration, fresh process", "MiB", "rss_peak_mib"),
    ("rss_growth", "peak RSS growth during that iteration", "MiB", None),
)


def memory_rows(b: dict, t: dict) -> list[Row]:
    """Single-sample rows (one child per side): the ratio's min and max equal its median."""

    def value(d, field):
        if "error" in d:
            return None
        return d[field] if field else d["rss_peak_mib"] - d["rss_before_mib"]

    rows = []
    for key, what, unit, field in _MEMORY:
        a, c = value(b, field), value(t, field)
        err = "; ".join(f"{n} failed: {d['error'][:200]}" for n, d in (("binac", b), ("TRL", t)) if "error" in d)
        rows.append(Row(key, what, unit, "binac", a, "TRL", c, "TRL / binac", single_ratio(a, c), err or "1 sample"))
    return rows


# ------------------------------------------------------------------------------------------------------ running


def run_bench(
    cfg,
    repeats: int = 5,
    base_dir: Path | None = None,
    calls: int = 50,
    threads: int | None = None,
    memory: bool = True,
    compare_threads: bool = False,
    prefect_home: Path | None = None,
    overlap_children: bool = False,
    pipeline_iterations: int = 12,
    before_tree: str | None = None,
    log=None,
) -> Report:
    """Run every measurement for `cfg` and return the report (rows in table order, notes, machine meta).

    `overlap_children` starts the child processes as soon as they can start instead of after the in-process
    measurements: faster, and every figure is then distorted (for the smoke test, which checks the table only).
    """
    log = log or stderr_log(time.perf_counter())
    threads = threads or default_threads()
    t_start, load_start = time.perf_counter(), load_average()
    prefect = prefect_job(repeats, calls, prefect_home or CACHE / "prefect")
    early: dict = {}
    try:
        if overlap_children:
            early |= start_children(prefect)
        import torch

        from bench import pipeline

        torch.set_num_threads(threads)
        base_dir = Path(base_dir or default_base_dir(cfg))
        build_s = ensure_base(cfg, base_dir, log)
        base = _base_meta(base_dir, build_s)
        report = Report(meta=run_meta(cfg, repeats, threads, load_start, calls=calls, base=base))
        with tempfile.TemporaryDirectory(prefix="binac-bench-") as tmp:
            mem = memory_jobs(cfg, base_dir, Path(tmp), threads) if memory else {}
            if overlap_children:
                early |= start_children(mem)
            g = measure_grpo(cfg, base_dir, Path(tmp), repeats, threads, log)
            tp = measure_throughput(cfg, g["binac_obj"], repeats, compare_threads, log)
            bare_loop = g["binac_obj"]
            pipe = (  # None with `pipeline_iterations` 0: no pipeline row
                pipeline.compare(
                    cfg, base_dir, Path(tmp), threads, bare_loop, repeats, pipeline_iterations, log, before_tree
                )
                if pipeline_iterations
                else None
            )
            ch = {n: collect(p) for n, p in early.items()} if overlap_children else run_children(prefect | mem, log)
    except BaseException:
        for proc in early.values():
            stop(proc)  # no-op for children already collected
        raise
    rows, notes = grpo_rows(g, cfg)
    iter_s = median(g["binac"])
    report.rows = rows + pipeline_rows(pipe, cfg) + throughput_rows(tp, threads) + prefect_rows(ch["prefect"], iter_s)
    if pipe:
        report.sections.append(pipeline.markdown(pipe, pipeline_iterations, before_tree))
    if memory:
        report.rows += memory_rows(ch["binac"], ch["trl"])
    from bench.grpo import UNMATCHED

    report.notes = notes + UNMATCHED + _thread_notes(threads, g, ch)
    report.meta |= {"load_end": load_average(), "total_s": round(time.perf_counter() - t_start, 1)}
    return report


def _thread_notes(threads: int, g: dict, children: dict) -> list[str]:
    """A warning when some library changed torch's thread count under a measurement (none is expected)."""
    seen = {"grpo": g["threads_end"]} | {k: v.get("threads_end") for k, v in children.items() if k != "prefect"}
    bad = {k: v for k, v in seen.items() if v is not None and v != threads}
    return [f"torch thread count changed during the run (expected {threads}): {bad}"] if bad else []


def _base_meta(base_dir: Path, build_s: float | None) -> str:
    meta = json.loads((base_dir / "base_meta.json").read_text())
    built = f"built in {build_s:.0f} s" if build_s is not None else "reused from an earlier run"
    return f"{meta['parameters'] / 1e6:.2f} M parameters, vocab {meta['vocab_size']} ({built})"


# ------------------------------------------------------------------------------------------------------ output


def markdown(report: Report) -> str:
    m = report.meta
    head = [
        "# binac benchmarks",
        "",
        f"Run `python -m bench.run --preset {m['preset']} --repeats {m['repeats']} --threads {m['threads']}` on "
        f"{m['date']}, {m['total_s']} s in all (a base-model build included, when one was needed).",
        "",
        f"- Machine: {m['nproc']} CPUs ({m['cpu']}), {m['memory_gib']} GiB RAM, GPU: {m['gpu']}; torch "
        f"{m['torch']} with {m['threads']} intra-op thread{'' if m['threads'] == 1 else 's'}; Python {m['python']}; transformers {m['transformers']}, "
        f"peft {m['peft']}, trl {m['trl']}, prefect {m['prefect']}.",
        f"- Load average (1/5/15 min) at start {m['load_start']}, at end {m['load_end']}. The machine is shared "
        "and busy (other jobs run alongside): absolute seconds are not comparable between runs, the ratios of "
        "interleaved variants are the result.",
        f"- Preset `{m['preset']}`; base model {m['base']}.",
        f"- {m['repeats']} repeats per variant after one warm-up, variants interleaved (A B A B ...); A and B are "
        "medians, the ratio is the median of per-repeat ratios with its min–max. Prefect: "
        f"{min(m['repeats'], PREFECT_REPEATS)} repeats of {m['calls']} calls (each repeat = two flow runs).",
        "",
    ]
    notes = ["## Not matched or not measured", ""] + [f"- {n}" for n in report.notes]
    sections = "".join("\n" + s for s in report.sections)
    return "\n".join(head) + "\n" + table(report.rows) + "\n\n" + "\n".join(notes) + "\n" + sections


# -------------------------------------------------------------------------------------------------- entry point


def child_main(args) -> None:
    """Child processes: one measurement each, result printed as one JSON line (see `common.emit`)."""
    from bench.common import emit

    try:
        if args.child == "prefect":
            from bench.orchestration import measure

            emit(measure(args.calls, args.repeats, Path(args.prefect_home)))
            return
        if args.child == "pipeline":
            from bench.pipeline import child

            emit(child(Path(args.config_json), Path(args.base_dir), args.threads, args.iterations, args.method))
            return
        from bench import memory
        from binac_core.foundation.config import Config

        cfg = Config.model_validate(json.loads(Path(args.config_json).read_text()))
        if args.child == "update":
            from bench.smol import update_child

            emit(update_child(cfg, Path(args.base_dir), Path(args.samples_json), args.variant, args.threads))
            return
        fn = memory.binac_child if args.child == "binac" else memory.trl_child
        emit(fn(cfg, Path(args.base_dir), args.threads))
    except Exception as exc:
        emit({"error": f"{type(exc).__name__}: {exc}"})
        raise


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n")[0])
    p.add_argument(
        "--preset",
        default="micro",
        help="config preset (micro: a few minutes; tiny: the real numbers, and a long first base-model build; smol-synthetic: the real pretrained model, ~15 minutes)",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=None,
        help=f"measured repeats per variant (after one warm-up; default {DEFAULT_REPEATS}, {SMOL_REPEATS} on smol)",
    )
    p.add_argument("--out", default="bench/results.md", help="markdown file to write ('-': print only)")
    p.add_argument("--calls", type=int, default=50, help="Prefect task calls per repeat")
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads of every variant (default: $BINAC_TORCH_THREADS or 1, the pipeline's)",
    )
    p.add_argument(
        "--base-dir",
        help="base model folder (default: a per-config temp dir, built once; smol: a "
        "converted checkpoint folder, used as it is, or a models root to convert into)",
    )
    p.add_argument("--no-memory", action="store_true", help="skip the fresh-process import/memory children")
    p.add_argument(
        "--compare-threads",
        action="store_true",
        help="also compare generation at 1 vs 2 torch threads (slow on a busy machine)",
    )
    p.add_argument(
        "--pipeline-iterations",
        type=int,
        default=12,
        help="iterations of each pipeline run of the pipeline-vs-bare-loop row (0: skip the row)",
    )
    p.add_argument(
        "--before-tree",
        help="also break a pipeline iteration down on this checkout's code (e.g. a "
        "`git worktree` of an older commit), beside this checkout's",
    )
    p.add_argument(
        "--roofline",
        action="store_true",
        help="measure the decode loop's roofline on smol instead (bench.roofline; ~20 minutes on a busy 2-core machine)",
    )
    p.add_argument("--child", choices=["prefect", "binac", "trl", "update", "pipeline"], help=argparse.SUPPRESS)
    p.add_argument("--iterations", type=int, help=argparse.SUPPRESS)
    p.add_argument("--method", default="grpo", help=argparse.SUPPRESS)
    p.add_argument("--code-tree", help=argparse.SUPPRESS)
    p.add_argument("--config-json", help=argparse.SUPPRESS)
    p.add_argument("--samples-json", help=argparse.SUPPRESS)
    p.add_argument("--variant", help=argparse.SUPPRESS)
    p.add_argument("--prefect-home", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.child:
        if args.code_tree:  # before anything imports binac_core, tasks or flows
            sys.path.insert(0, str(Path(args.code_tree).resolve()))
        child_main(args)
        return
    if args.roofline:
        from bench import roofline

        if args.threads:
            os.environ["BINAC_TORCH_THREADS"] = str(args.threads)
        before = ["--before", args.before_tree] if args.before_tree else []
        roofline.main(["--repeats", str(args.repeats or SMOL_REPEATS), "--out", args.out, *before])
        return
    from bench import smol
    from binac_core.foundation.config import load_config

    cfg = load_config(args.preset)
    if smol.is_smol(cfg):
        report = smol.run_smol(cfg, args.repeats or SMOL_REPEATS, args.base_dir, args.threads)
        text = smol.markdown(report)
        print(text)
        if args.out != "-":
            write_section(Path(args.out), cfg.name, text)
            print(f"written to {args.out} (section {cfg.name})", file=sys.stderr)
        return
    report = run_bench(
        cfg,
        args.repeats or DEFAULT_REPEATS,
        args.base_dir,
        args.calls,
        args.threads,
        memory=not args.no_memory,
        compare_threads=args.compare_threads,
        pipeline_iterations=args.pipeline_iterations,
        before_tree=args.before_tree,
    )
    text = markdown(report)
    print(text)
    if args.out != "-":
        Path(args.out).write_text(text + kept_sections(Path(args.out)))
        print(f"written to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
