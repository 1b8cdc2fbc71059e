"""Where a training run's iteration time went, phase by phase, from the `perf/<phase>_s` metrics the loop logs
where each phase runs (`binac_core.foundation.timing.PHASES`: sample, feedback, refine, score, actor update,
look-ahead, critic update, evaluation, storage).

    python -m bench.stage_costs [--limit 20]

For each finished training run of the workspace's MLflow experiment (the newest `--limit`; `$BINAC_HOME`),
sums each phase over the run's iterations and gives its share of the phases' total. A cached stage counts the
time its cache lookup took, not the time it once took to compute. It reads records only; it runs no model.
"""

from __future__ import annotations

import argparse

from binac_core.foundation.timing import PHASES


def phase_totals(histories: dict[str, list[float]]) -> dict[str, float]:
    """Seconds per phase over a run, from its `perf/<phase>_s` metric histories (key -> one value per
    iteration); a phase the run never logged counts 0."""
    return {phase: float(sum(histories.get(f"perf/{phase}_s", []))) for phase in PHASES}


def table(runs: list[tuple[str, dict[str, float]]]) -> str:
    """A markdown table: one row per (run name, phase totals), each phase's seconds and share of the total."""
    lines = [
        "| run | phases s | " + " | ".join(PHASES) + " |",
        "| --- | --- | " + " | ".join("---" for _ in PHASES) + " |",
    ]
    for name, totals in runs:
        total = sum(totals.values())
        cells = [f"{totals[p]:.1f} ({100 * totals[p] / max(total, 1e-9):.0f} %)" for p in PHASES]
        lines.append(f"| {name} | {total:.1f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _collect(limit: int) -> list[tuple[str, dict[str, float]]]:
    from binac_core.foundation.workspace import workspace
    from binac_core.store import tracking

    ws = workspace()
    client = tracking.client(ws)
    runs = client.search_runs(
        [tracking.experiment_id(client, ws)],
        "attributes.status = 'FINISHED'",
        order_by=["attributes.start_time DESC"],
        max_results=limit,
    )
    out = []
    for run in runs:
        if run.data.tags.get("kind"):  # a comparison's or a study's parent run: no iterations of its own
            continue
        keys = [f"perf/{p}_s" for p in PHASES if f"perf/{p}_s" in run.data.metrics]
        out.append(
            (
                run.info.run_name,
                phase_totals({k: [m.value for m in client.get_metric_history(run.info.run_id, k)] for k in keys}),
            )
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=20)
    print(table(_collect(ap.parse_args(argv).limit)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
