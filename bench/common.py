"""Shared pieces of the bench harness: timing, paired ratios, table rows, the machine description, children.

Nothing here measures anything by itself. The rule the harness follows: compared variants run interleaved in one
process (A B A B ...), and what is reported is the median of each variant plus the ratio of paired repeats with
its min–max, because the machines are shared and absolute seconds drift with the load of other jobs.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from binac_core.runs.process_group import start_in_group, stop_group

REPO = Path(__file__).resolve().parents[1]
CHILD_TAG = "BENCH_JSON "
"""Prefix of the one stdout line a child process reports its JSON result on (the rest of its output is logs)."""


@dataclass
class Row:
    """One line of the results table: variant `a` vs variant `b` and the ratio `b / a` (or as `ratio_of` says)."""

    key: str
    """Stable identifier (the smoke test checks these)."""
    what: str
    unit: str
    a_label: str
    a: float | None
    b_label: str
    b: float | None
    ratio_of: str
    ratio: tuple[float, float, float] | None
    """(median, min, max) over paired repeats; None when not measured."""
    note: str = ""


@dataclass
class Report:
    meta: dict
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Settings that could not be matched, measurements that failed (with their error text)."""
    sections: list[str] = field(default_factory=list)
    """Markdown sections after the table and notes (the pipeline's per-task breakdown)."""


def timed(fn: Callable, *args, **kwargs) -> tuple[float, object]:
    """(wall seconds, result) of one call; perf_counter, so it counts waiting for the CPU on a busy machine."""
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - t0, out


def median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def paired_ratio(num: list[float], den: list[float]) -> tuple[float, float, float] | None:
    """Median, min and max of num[i] / den[i]: each pair ran back to back, so a load change hits both alike."""
    rs = [n / d for n, d in zip(num, den, strict=False) if d]
    return (statistics.median(rs), min(rs), max(rs)) if rs else None


def interleave(variants: dict[str, Callable[[], float]], repeats: int, warmup: int = 1) -> dict[str, list[float]]:
    """Call the variants round-robin (A B C A B C ...), `warmup` discarded rounds first; each call returns its
    own measurement (so a variant can exclude its preparation from the figure)."""
    for _ in range(warmup):
        for fn in variants.values():
            fn()
    out: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, fn in variants.items():
            out[name].append(fn())
    return out


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} / {five:.2f} / {fifteen:.2f}"


def machine() -> dict:
    """What the numbers were measured on; the load averages say how shared the machine was."""
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "memory_gib": round(mem_gib, 1),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "gpu": torch.cuda.is_available(),
    }


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, in MiB: `VmHWM` of /proc/self/status.

    Not `getrusage().ru_maxrss`: Linux carries that high-water mark across fork and exec, so a child started by
    a big parent reports at least the parent's peak. VmHWM belongs to the process's own address space.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_mib() -> float | None:
    """Current resident set size of this process in MiB (`VmRSS`), None where /proc is not there."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def reset_peak_rss() -> bool:
    """Reset this process's RSS high-water mark (`VmHWM`) to its current RSS (Linux: `5` to /proc/self/clear_refs),
    so `peak_rss_mib` then measures the peak of what follows, not of model loading; False where not possible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def release_memory() -> None:
    """Collect garbage and hand the allocator's free heap back to the OS (`binac_core.model.memory`): after an update,
    glibc keeps gigabytes of freed activations mapped, which would count against the machine while a child process
    measures its own peak."""
    import gc

    from binac_core.model.memory import return_freed_memory

    gc.collect()
    return_freed_memory()


def emit(result: dict) -> None:
    """A child's result line (JSON after `CHILD_TAG`), flushed so the parent finds it even if exit is slow."""
    print(CHILD_TAG + json.dumps(result), flush=True)


def run_child(name: str, args: list[str], env: dict | None = None) -> subprocess.Popen:
    """Start `python -m bench.run --child NAME ARGS...` from the repository root; `collect` waits for it."""
    cmd = [sys.executable, "-m", "bench.run", "--child", name, *args]
    # A process group of its own, so that `stop` also reaches what the child started (Prefect's temporary API
    # server): binac_core/runs/process_group.py, shared with scripts/gpu_check.py.
    return start_in_group(
        cmd, cwd=REPO, env=env or dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def stop(proc: subprocess.Popen) -> None:
    """Kill a child started by `run_child` together with its own children (SIGKILL to its group, at once)."""
    stop_group(proc)


def collect(proc: subprocess.Popen, timeout: int = 900) -> dict:
    """The child's JSON result, or {"error": ...} with the tail of its output when it failed or said nothing."""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop(proc)
        out, _ = proc.communicate()
        return {"error": f"timed out after {timeout}s: {out[-1500:]}"}
    for line in reversed(out.splitlines()):
        if line.startswith(CHILD_TAG):
            return json.loads(line[len(CHILD_TAG) :])
    return {"error": f"exit {proc.returncode}, no result: {out[-1500:]}"}


# ------------------------------------------------- marked sections of the results file (one writer per section)


_SECTION = re.compile(r"<!-- bench:(?P<key>[\w.-]+) -->\n.*?<!-- /bench:(?P=key) -->\n?", re.DOTALL)


def marked(key: str, body: str) -> str:
    return f"<!-- bench:{key} -->\n{body.rstrip()}\n<!-- /bench:{key} -->\n"


def write_section(path: Path, key: str, body: str) -> None:
    """Put `body` into `path` as the section `key`: replacing that section where there is one, else appended."""
    old = path.read_text() if path.exists() else ""
    block = marked(key, body)
    for m in _SECTION.finditer(old):
        if m.group("key") == key:
            path.write_text(old[: m.start()] + block + old[m.end() :])
            return
    path.write_text((old.rstrip() + "\n\n" if old.strip() else "") + block)


def kept_sections(path: Path) -> str:
    """The marked sections of `path` (what a full rewrite of the file by a micro/tiny run keeps), or ''."""
    if not path.exists():
        return ""
    return "".join("\n" + m.group(0) for m in _SECTION.finditer(path.read_text()))


# ----------------------------------------------------- pieces bench.run and bench.smol share


CACHE = Path(tempfile.gettempdir()) / "binac-bench"
"""Kept between runs: base models (one per config) and the Prefect home of the overhead measurement."""


def child_args(cfg, base_dir: Path, work: Path, threads: int) -> list[str]:
    """Arguments that give a child process the exact config (overrides included) and the base model."""
    path = work / "config.json"
    path.write_text(json.dumps(cfg.model_dump(mode="json")))
    return ["--config-json", str(path), "--base-dir", str(base_dir), "--threads", str(threads)]


def single_ratio(x: float | None, y: float | None) -> tuple[float, float, float] | None:
    return (y / x,) * 3 if x and y is not None else None


def paired_row(
    key: str,
    what: str,
    unit: str,
    a_label: str,
    a: list[float],
    b_label: str,
    b: list[float],
    ratio_of: str,
    note: str = "",
) -> Row:
    """The row of variant `b` against variant `a` from their per-repeat samples: each side's median and the paired
    ratio b / a (all None for a side without samples, e.g. a failed measurement)."""
    return Row(key, what, unit, a_label, median(a), b_label, median(b), ratio_of, paired_ratio(b, a), note)


def run_meta(cfg, repeats: int, threads: int, load_start: str, **extra) -> dict:
    """The report meta a bench run starts with: date (UTC), preset, repeats, torch threads, the load average at
    the start, then `extra` (the run's own fields), the machine and the library versions."""
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "preset": cfg.name,
        "repeats": repeats,
        "threads": threads,
        "load_start": load_start,
        **extra,
        **machine(),
        **versions(),
    }


def grpo_rows(g: dict, cfg) -> tuple[list[Row], list[str]]:
    t = cfg.train
    shape = f"B×G = {t.batch_problems}×{t.group_size}, ≤{cfg.generation.max_new_tokens} new tokens"
    tok = f"mean completion tokens: binac {fmt(median(g['binac_tokens']))}, TRL {fmt(median(g['trl_tokens']))}"
    note = g["trl_error"] and f"TRL failed: {g['trl_error'][:300]}" or tok
    skipped = sum(1 for k in g.get("binac_skipped", []) if k)
    if skipped:
        note += f"; binac skipped the optimizer step in {skipped} of {len(g['binac_skipped'])} measured iterations (no signal)"
    rows = [
        paired_row(
            "grpo_iter",
            f"GRPO iteration ({shape}, 1 update)",
            "s",
            "binac",
            g["binac"],
            "TRL",
            g["trl"],
            "TRL / binac",
            note,
        ),
        Row(
            "binac_save",
            "binac adapter save (pipeline does it each iteration; excluded above)",
            "s",
            "save",
            median(g["save"]),
            "",
            None,
            "save / binac iteration",
            single_ratio(median(g["binac"]), median(g["save"])),
        ),
    ]
    notes = [n for n in [g["layout_note"]] if n]
    if g.get("reward") == "parity":
        notes.append(
            "GRPO rewards: `bench.grpo.parity_reward` on both sides (1 when a completion's sha256 starts with an even "
            "byte), not the task's verifier: this base solves none of the task, so under the verifier every group's "
            "rewards are equal and binac's update skips its optimizer step while TRL's runs forward and backward anyway."
        )
    if g["trl_error"]:
        notes.append(f"TRL GRPOTrainer could not be measured: {g['trl_error']}")
    return rows, notes


def default_threads() -> int:
    """The pipeline's torch thread count: `BINAC_TORCH_THREADS`, default 1 (as `binac_core.model.runtime`)."""
    return int(os.environ.get("BINAC_TORCH_THREADS", "1"))


def stderr_log(t0: float):
    return lambda msg: print(f"[bench {time.perf_counter() - t0:5.0f}s] {msg}", file=sys.stderr, flush=True)


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("transformers", "peft", "trl", "prefect"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def fmt(x: float | None) -> str:
    if x is None:
        return "–"
    if abs(x) >= 100:
        return f"{x:.0f}"
    return f"{x:.3g}" if abs(x) >= 0.01 else f"{x:.2g}"


def table(rows: list[Row]) -> str:
    lines = ["| measurement | A | B | ratio: median [min–max] | notes |", "| --- | --- | --- | --- | --- |"]
    for r in rows:
        cells = [
            r.what,
            _cell(r.a_label, r.a, r.unit),
            _cell(r.b_label, r.b, r.unit),
            _ratio(r.ratio, r.ratio_of),
            r.note,
        ]
        lines.append("| " + " | ".join(" ".join(c.replace("|", "/").split()) for c in cells) + " |")
    return "\n".join(lines)


def _cell(label: str, x: float | None, unit: str) -> str:
    return "" if not label else f"{label}: {fmt(x)} {unit}" if x is not None else f"{label}: –"


def _ratio(r: tuple[float, float, float] | None, of: str) -> str:
    if r is None:
        return "–"
    spread = "" if r[1] == r[2] else f" [{fmt(r[1])}–{fmt(r[2])}]"
    return f"**{fmt(r[0])}**{spread} ({of})"
