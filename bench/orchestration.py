"""Prefect task overhead: a trivial task with the project's cache policy vs calling the plain function.

Runs in a child process, because Prefect reads its storage settings when it is imported: the child points
result storage at a fresh temp dir and `PREFECT_HOME` at the harness's own folder before importing Prefect, so
the benchmark neither reads nor fills the user's cache. The home (the temporary API's database) is kept between
bench runs on purpose: a brand-new database is created and migrated on first use, a one-time cost a user's
existing home does not pay. The task is `tasks._common.CACHED` (INPUTS + TASK_SOURCE, persist_result=True), the
policy every pipeline stage uses.

Measured per repeat, in this order: N calls inside one flow run with fresh inputs (cache misses: run, persist the
result, write the cache record), N calls in a second flow run with the same inputs (cache hits: read the
record), N calls of the plain function. Reported as milliseconds per call, timed inside the flow function so the
flow run's own creation is not in the per-call figure; what a flow call costs beyond its task calls is reported
on its own (`flow_s`). The first flow run, which starts Prefect's temporary local API, is timed separately
(`start_s`). Not measured: a real Prefect server or worker (`binac serve`).
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from pathlib import Path


def isolate(home: Path, storage: Path) -> None:
    """Prefect settings for the bench's home and a throw-away result storage; must run before `import prefect`."""
    # The temporary API does not create missing parents of its home: it then never answers, and the client
    # only gives up after the start-up timeout.
    home.mkdir(parents=True, exist_ok=True)
    os.environ.update(
        PREFECT_HOME=str(home),
        PREFECT_RESULTS_LOCAL_STORAGE_PATH=str(storage),
        PREFECT_LOCAL_STORAGE_PATH=str(storage),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        # The default 20 s (and the Makefile's 90 s) were exceeded on a busy machine: the start is what is
        # measured here, so wait long rather than fail.
        PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="300",
    )
    os.environ.pop("PREFECT_API_URL", None)  # a stale URL would make every run wait for a dead server


def measure(calls: int, repeats: int, home: Path) -> dict:
    """Child side: {"start_s", "miss_ms", "hit_ms", "plain_ms", "flow_s", "records"}: lists over repeats of ms
    per call, `flow_s` the seconds of each flow call outside its task calls (creating, starting and finishing
    the flow run), `records` the files written to the temp result storage (a check that the cache went there)."""
    with tempfile.TemporaryDirectory(prefix="binac-bench-prefect-") as tmp:
        storage = Path(tmp) / "storage"
        isolate(home, storage)
        from prefect import flow, task

        from tasks._common import CACHED

        def bump(x: int, nonce: str) -> int:
            return x + 1

        cached_bump = task(name="bench-bump", **CACHED)(bump)

        @flow(name="bench-task-overhead")
        def loop(n: int, nonce: str) -> float:
            t0 = time.perf_counter()
            for i in range(n):
                cached_bump(i, nonce)
            return time.perf_counter() - t0

        out = {"miss_ms": [], "hit_ms": [], "plain_ms": [], "flow_s": []}

        def flow_run(n: int, nonce: str) -> float:
            """Seconds of the task calls inside one flow run; the rest of the flow call goes to `flow_s`."""
            t0 = time.perf_counter()
            inner = loop(n, nonce)
            out["flow_s"].append(time.perf_counter() - t0 - inner)
            return inner

        t0 = time.perf_counter()
        loop(1, "warm-up")
        out["start_s"] = time.perf_counter() - t0
        for _ in range(repeats):
            nonce = uuid.uuid4().hex  # new inputs = guaranteed cache misses on the first pass
            out["miss_ms"].append(flow_run(calls, nonce) * 1000 / calls)
            out["hit_ms"].append(flow_run(calls, nonce) * 1000 / calls)
            t0 = time.perf_counter()
            for i in range(calls):
                bump(i, nonce)
            out["plain_ms"].append((time.perf_counter() - t0) * 1000 / calls)
        out["records"] = sum(1 for p in storage.rglob("*") if p.is_file())
        return out
