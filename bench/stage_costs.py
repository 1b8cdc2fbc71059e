"""Where a training run's wall time went, stage by stage, from Prefect's own records of its task runs.

    python -m bench.stage_costs [--flow-name train] [--limit 20] [--markdown]

For each finished `train` flow run (the newest `--limit`; those of `binac train`/`binac compare` on the Prefect
API the environment points at, or the local ephemeral one), sums the run time of its task runs by kind:
- generation: generate-rollouts, sample-feedback, refine (actor attempts, critic feedback, refinements, look-ahead);
- scoring: score-rewards, critic-reward;
- update: update-actor, update-critic;
- evaluation: evaluate (the held-out protocols, at step 0 and every evaluation point);
- storage and tracking: store-*, log-metrics, start-run, finalize-run, finish-run;
- setup: build-base-model, prepare-data, init-adapters, sample-batch;
and calls the rest of the flow run's wall time "orchestration" (Prefect's bookkeeping, cache-key hashing, stage
file reads and writes outside the tasks, Python between tasks). Cached task runs count with the time they took.
It reads records only; it runs no model.
"""

from __future__ import annotations

import argparse
import asyncio

KINDS = {
    "generation": ("generate-rollouts", "sample-feedback", "refine"),
    "scoring": ("score-rewards", "critic-reward"),
    "update": ("update-actor", "update-critic"),
    "evaluation": ("evaluate",),
    "storage and tracking": ("store-train-step", "store-eval", "store-eval-exec", "log-metrics", "start-run",
                             "finalize-run", "finish-run"),
    "setup": ("build-base-model", "prepare-data", "init-adapters", "sample-batch"),
}


def kind_of(task_run_name: str) -> str:
    """The kind of a task run named `<task>-<suffix>` (Prefect appends a short suffix to the task's name)."""
    task = task_run_name.rsplit("-", 1)[0]
    return next((k for k, names in KINDS.items() if task in names), "other tasks")


def breakdown(flow_seconds: float, task_runs: list[tuple[str, float]]) -> dict[str, float]:
    """Seconds per kind for one flow run; orchestration = the flow's wall time minus its task runs' time."""
    out = dict.fromkeys([*KINDS, "other tasks"], 0.0)
    for name, seconds in task_runs:
        out[kind_of(name)] += seconds
    out["orchestration"] = max(0.0, flow_seconds - sum(out.values()))
    return out


async def _collect(flow_name: str, limit: int) -> list[dict]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowFilter,
        FlowFilterName,
        FlowRunFilter,
        FlowRunFilterId,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.client.schemas.sorting import FlowRunSort

    async with get_client() as client:
        runs = await client.read_flow_runs(
            flow_filter=FlowFilter(name=FlowFilterName(any_=[flow_name])),
            flow_run_filter=FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(
                any_=[StateType.COMPLETED]))),
            sort=FlowRunSort.START_TIME_DESC, limit=limit)
        out = []
        for run in runs:
            tasks = await client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run.id])))
            wall = (run.end_time - run.start_time).total_seconds() if run.end_time and run.start_time else 0.0
            out.append({"name": run.name, "iterations": run.parameters.get("steps"), "wall": wall,
                        "kinds": breakdown(wall, [(t.name, t.total_run_time.total_seconds()) for t in tasks])})
        return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flow-name", default="train")
    ap.add_argument("--limit", type=int, default=20)
    a = ap.parse_args(argv)
    rows = asyncio.run(_collect(a.flow_name, a.limit))
    kinds = [*KINDS, "other tasks", "orchestration"]
    print("| run | wall s | " + " | ".join(kinds) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in kinds) + " |")
    for r in rows:
        cells = [f"{r['kinds'][k]:.1f} ({100 * r['kinds'][k] / max(r['wall'], 1e-9):.0f} %)" for k in kinds]
        print(f"| {r['name']} | {r['wall']:.1f} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
