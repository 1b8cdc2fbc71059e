"""One GRPO iteration inside `binac train` vs binac's bare loop, and where the pipeline's extra time goes.

The pipeline side runs in a child process (`python -m bench.run --child pipeline`), set up as `binac train` sets
itself up (`flows.cli._env_defaults`: WARNING logging, Prefect's temporary local API, cache records under a fresh
`$BINAC_HOME`, even where the parent's environment names others: `STORAGE_ENV`), and calls the train flow with
method `grpo` on the bench's base model (a model cache folder that links to it) and config, `fresh`, so every
stage computes. Everything a user's iteration does is inside: the Prefect tasks, stage files, the trajectory shard,
MLflow, the adapter save.
An iteration's time is the time between the progress lines of two consecutive iterations (each printed at the
end of its iteration). `train.eval_every` is set past the run, so only iteration 0 (before the first line) and
the last iteration evaluate, and the last interval is left out.
Per task, the child also times each call from outside (`Task.__call__`: Prefect's engine included) and the task
function inside; the difference is Prefect's part.

The bare side is `BinacGRPO.iteration()` (`bench.grpo`: the in-memory loop `binac_core.rl.loop.iteration` with the
grpo spec, whose numbers are the flow's: generate, grade, policy update, no Prefect, no files, no adapter save) in
the parent process, same config, base model and torch thread count. Interleaved: per repeat, one pipeline child
run, then as many bare iterations; the ratio is per repeat (each side the median of its
iterations). Not measured: a real Prefect server and workers (`make serve`), methods with feedback.
`tree` runs the pipeline child once more on another checkout's `binac_core`, `tasks` and `flows` (first on
`sys.path`), e.g. a commit before a change: the same harness, so its stage breakdown is directly comparable.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

EVAL_NEVER = 10**6
"""`train.eval_every` of the pipeline run: no evaluation between iteration 0 and the last."""

STORAGE_ENV = ("PREFECT_RESULTS_LOCAL_STORAGE_PATH", "PREFECT_LOCAL_STORAGE_PATH")
"""Where Prefect keeps results and cache records: a pipeline child drops what it inherits, so `_env_defaults` puts
them under the child's own `$BINAC_HOME` (a parent may have them set: a shell or process of `make serve`'s
environment, scripts/serve.py `run_env`; a pytest process where a test ran `flows.cli.main` in-process before)."""


def preset_file(cfg, work: Path) -> Path:
    """`cfg` as a preset file for the pipeline child: only the fields that differ from the defaults (what older
    code, `tree`, also understands when it has no newer fields set), `train.eval_every` past any run."""
    raw = cfg.model_dump(mode="json", exclude_defaults=True)
    raw.setdefault("train", {})["eval_every"] = EVAL_NEVER
    path = work / "pipeline-preset.yaml"
    path.write_text(json.dumps(raw))  # JSON is YAML
    return path


def child(preset: Path, base_dir: Path, threads: int, iterations: int, method: str = "grpo") -> dict:
    """Child side: {"iteration_s": [...], "tasks": {name: {"calls", "outer_ms", "inner_ms"}}, "code": where the
    code came from}; per task, the calls per measured iteration and the medians of those calls."""
    from binac_core.foundation.config import load_config

    with tempfile.TemporaryDirectory(prefix="binac-bench-pipeline-") as tmp:
        home, models = Path(tmp) / "home", Path(tmp) / "models"
        models.mkdir()
        (models / f"base-{load_config(str(preset)).base_digest()}").symlink_to(Path(base_dir).resolve())
        os.environ.update(BINAC_HOME=str(home), BINAC_MODEL_CACHE=str(models), BINAC_TORCH_THREADS=str(threads))
        os.environ.pop("PREFECT_API_URL", None)  # the temporary API, as a plain `binac train`
        # Cache records under this fresh $BINAC_HOME, whatever the parent's environment says (`_env_defaults` only
        # sets them where unset): records shared between children would hand a later child an earlier child's
        # `build-base-model` result (its cache key is the config alone), a model folder inside that child's
        # removed temp dir, which transformers then takes for a hub repo id.
        for key in STORAGE_ENV:
            os.environ.pop(key, None)
        from flows.cli import _env_defaults

        _env_defaults()
        return _run(str(preset), iterations, method)


def _run(preset: str, iterations: int, method: str) -> dict:
    import prefect.tasks

    import flows.train

    ends: list[float] = []
    printer = _progress_printer()
    progress = printer.progress

    def stamped(message: str) -> None:
        ends.append(time.perf_counter())
        progress(message)

    printer.progress = stamped
    outer, inner = _instrument(prefect.tasks.Task, _flow_modules())
    flows.train.train(preset=preset, method=method, steps=iterations, seed=0, fresh=f"bench-{time.time()}")
    gaps = [b - a for a, b in zip(ends, ends[1:], strict=False)][:-1]  # the last iteration evaluates
    lo, hi = ends[0], ends[-2]  # the measured iterations: the calls that ended between these two lines

    def window(calls: list[tuple[float, float]]) -> list[float]:
        return [d for t, d in calls if lo < t <= hi]

    tasks = {}
    for name in outer:
        out_s, in_s = window(outer[name]), window(inner.get(name, []))
        if out_s and in_s:
            tasks[name] = {
                "calls": len(out_s) / len(gaps),
                "outer_ms": 1000 * statistics.median(out_s),
                "inner_ms": 1000 * statistics.median(in_s),
            }
    return {"iteration_s": gaps, "tasks": tasks, "code": str(Path(flows.train.__file__).parent.parent)}


def _progress_printer():
    """The module whose `progress` prints the train flow's iteration lines: flows/bookkeeping.py, or in older code
    (a `tree` checkout without it) flows/train.py itself."""
    import importlib.util

    import flows.train

    if importlib.util.find_spec("flows.bookkeeping") is None:
        return flows.train
    import flows.bookkeeping

    return flows.bookkeeping


def _flow_modules() -> list:
    """The loaded modules of flows/ and tasks/ (flows.train imports them all): the train flow's tasks are
    module attributes there, whichever module calls them (flows/train.py, or flows/stages.py for the stages
    of an iteration)."""
    import sys

    return [m for name, m in list(sys.modules.items()) if name.split(".")[0] in ("flows", "tasks") and m]


def _instrument(task_cls, modules) -> tuple[dict, dict]:
    """Time every task call from outside and, for every task that is an attribute of one of `modules`, its
    function from inside: {name: [(end, seconds)]}. Each task's function is wrapped once."""
    outer: dict[str, list[tuple[float, float]]] = {}
    inner: dict[str, list[tuple[float, float]]] = {}
    call = task_cls.__call__

    def timed_call(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return call(self, *args, **kwargs)
        finally:
            t1 = time.perf_counter()
            outer.setdefault(self.name, []).append((t1, t1 - t0))

    task_cls.__call__ = timed_call
    found = {id(obj): obj for m in modules for obj in vars(m).values() if isinstance(obj, task_cls)}
    for obj in found.values():
        obj.fn = _timed_fn(obj.fn, obj.name, inner)
    return outer, inner


def _timed_fn(fn, name: str, inner: dict):
    import functools

    @functools.wraps(fn)
    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            t1 = time.perf_counter()
            inner.setdefault(name, []).append((t1, t1 - t0))

    return timed


def compare(
    cfg,
    base_dir: Path,
    work: Path,
    threads: int,
    bare_loop,
    repeats: int,
    iterations: int,
    log,
    tree: str | None = None,
) -> dict:
    """{"pipeline": [s per repeat], "bare": [...], "tasks": the last child's breakdown, "binac": the breakdown of
    one `binac` run (not compared: the bare loop is GRPO's), "before": `tree`'s breakdown (one child run of that
    code, after the interleaved repeats) or None, "error": ...}."""
    from bench.common import collect, run_child

    args = [
        "--config-json",
        str(preset_file(cfg, work)),
        "--base-dir",
        str(base_dir),
        "--threads",
        str(threads),
        "--iterations",
        str(iterations),
    ]
    out = {"pipeline": [], "bare": [], "tasks": {}, "binac": None, "before": None}
    for r in range(repeats):
        log(f"pipeline vs bare loop: repeat {r + 1}/{repeats}")
        res = collect(run_child("pipeline", args))
        if "error" in res:
            return out | {"error": res["error"]}
        out["pipeline"].append(statistics.median(res["iteration_s"]))
        out["tasks"] = res["tasks"]
        out["bare"].append(statistics.median(_bare(bare_loop, iterations)))
    log("pipeline breakdown of a binac iteration")
    out["binac"] = _with_median(collect(run_child("pipeline", [*args, "--method", "binac"])))
    if tree:
        log(f"pipeline breakdown of the code in {tree}")
        out["before"] = _with_median(collect(run_child("pipeline", [*args, "--code-tree", tree])))
    return out


def _with_median(res: dict) -> dict:
    return res if "error" in res else res | {"iteration": statistics.median(res["iteration_s"])}


def _bare(loop, n: int) -> list[float]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        loop.iteration()
        times.append(time.perf_counter() - t0)
    return times


def breakdown(tasks: dict) -> list[tuple[str, float, float, float, float]]:
    """(task, calls per iteration, outside ms, inside ms, Prefect ms) per task of the measured iterations, the
    task that takes most of an iteration first."""
    rows = [
        (name, t["calls"], t["outer_ms"], t["inner_ms"], t["outer_ms"] - t["inner_ms"]) for name, t in tasks.items()
    ]
    return sorted(rows, key=lambda r: -r[2] * r[1])


def markdown(p: dict, iterations: int, tree: str | None) -> str:
    """The stage breakdown section of the results file: grpo (after, and before when `tree` ran), then binac."""
    lines = [
        "## Where a pipeline iteration goes (per task, median ms per call)",
        "",
        "Outside = the task call with Prefect's engine (`Task.__call__`); inside = the task function; "
        "Prefect = the difference. grpo: the calls of the measured iterations of the last pipeline child of the "
        f"comparison above ({iterations} iterations a run, the first and the last not measured); the other "
        "runs are one child each, after the comparison, measured alike.",
        "",
    ]
    runs = (
        ("grpo, after (this checkout)", {"tasks": p["tasks"], "iteration": statistics.median(p["pipeline"])}),
        (f"grpo, before (code of `{tree}`)", p["before"]),
        ("binac, after (this checkout)", p["binac"]),
    )
    for label, res in runs:
        if not res:
            continue
        if "error" in res:
            lines += [f"{label}: failed: {res['error'][:300]}", ""]
            continue
        lines += [
            f"### {label}" + (f": iteration {res['iteration']:.3f} s" if "iteration" in res else ""),
            "",
            "| task | calls per iteration | outside | inside | Prefect |",
            "| --- | --- | --- | --- | --- |",
        ]
        rows = breakdown(res["tasks"])
        for name, per, o, i, e in rows:
            lines.append(f"| {name} | {per:.3g} | {o:.1f} | {i:.1f} | {e:.1f} |")
        total = sum(per * o for _, per, o, _, _ in rows)
        lines.append(f"| all tasks of an iteration | | {total:.1f} | | |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit("run through `python -m bench.run` (the pipeline row)")
