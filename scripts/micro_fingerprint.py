"""A micro comparison's numbers, written so that two commits' can be compared byte for byte: a refactor that
changes no logic must leave them equal.

    python scripts/micro_fingerprint.py run OUT.json [KEY=VALUE ...]  # a fresh `binac compare` of every method on micro
    python scripts/micro_fingerprint.py dump HOME OUT.json  # the same of an existing workspace
    python scripts/micro_fingerprint.py diff A.json B.json [--except-bank]

`run` starts one `binac compare --preset micro --methods <all> --seeds 0 --steps 5` (the test suite's
`micro_compare`) in a new workspace, then writes every stored trajectory row (every column but the run ids and
`created_at`) and every metric point of every run (key, step, value; every key but `perf/*`, which times the
machine), each run named by its method, seed and MLflow run name, not its id. Values are written with `repr`,
so floats compare exactly. `run`'s KEY=VALUE settings are passed on as `--set` (e.g. `bank.enabled=true`).
`diff` prints what differs and exits 1 if anything does; with `--except-bank` it leaves out the critic's attempt
bank (rows of splits `bank_val`, `bank_eval`; metrics `bank_*`), so a run with the bank on compares with one
without it: everything else must be equal. It compares what is stored, not the adapters' weights
(tests/integration/test_micro_compare.py checks those).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

IGNORED_COLUMNS = ("run_id", "parent_run_id", "created_at")
IGNORED_METRIC_PREFIX = "perf/"


def _compare(home: Path, settings: list[str]) -> None:
    from binac_core.rl.methods import METHODS

    env = {
        **os.environ,
        "BINAC_HOME": str(home),
        "PREFECT_HOME": str(home / "prefect"),
        "HF_HUB_OFFLINE": "1",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "TOKENIZERS_PARALLELISM": "false",
    }
    for name in ("PREFECT_API_URL", "MLFLOW_TRACKING_URI"):
        env.pop(name, None)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "flows.cli",
            "compare",
            "--preset",
            "micro",
            "--methods",
            ",".join(METHODS),
            "--seeds",
            "0",
            "--steps",
            "5",
            *(arg for setting in settings for arg in ("--set", setting)),
        ],
        cwd=REPO,
        env=env,
        check=True,
    )


def fingerprint(home: Path) -> dict:
    """The stored rows and metric points of the workspace `home`, without ids, timestamps or `perf/*`."""
    import pandas as pd

    from binac_core.foundation.workspace import Workspace
    from binac_core.store import sqlrun, tracking
    from binac_core.store.storage import columns

    ws = Workspace(home)
    cols = [c for c in columns() if c not in IGNORED_COLUMNS]
    df = sqlrun.run(ws, f"SELECT {', '.join(cols)} FROM trajectories")
    rows = sorted(repr(tuple(None if pd.isna(v) else v for v in r)) for r in df.itertuples(index=False))
    client = tracking.client(ws)
    metrics: dict[str, dict[str, list[str]]] = {}
    for run in client.search_runs([tracking.experiment_id(client, ws)]):
        name = f"{run.data.tags.get('kind', 'train')}:{run.info.run_name}"
        metrics[name] = {
            key: sorted(repr((m.step, m.value)) for m in client.get_metric_history(run.info.run_id, key))
            for key in sorted(run.data.metrics)
            if not key.startswith(IGNORED_METRIC_PREFIX)
        }
    return {"columns": cols, "rows": rows, "metrics": dict(sorted(metrics.items()))}


BANK_SPLITS = ("'bank_val'", "'bank_eval'")
"""The attempt bank's `split` values as a row's repr holds them."""


def without_bank(fp: dict) -> dict:
    """`fp` without the attempt bank's rows and metrics (`--except-bank`)."""
    rows = [r for r in fp["rows"] if not any(s in r for s in BANK_SPLITS)]
    metrics = {run: {k: v for k, v in m.items() if not k.startswith("bank_")} for run, m in fp["metrics"].items()}
    return {**fp, "rows": rows, "metrics": metrics}


def diff(a: dict, b: dict) -> list[str]:
    """What differs between two fingerprints, one line each."""
    out = [] if a["columns"] == b["columns"] else [f"columns: {a['columns']} != {b['columns']}"]
    only_a, only_b = sorted(set(a["rows"]) - set(b["rows"])), sorted(set(b["rows"]) - set(a["rows"]))
    out += [f"row only in A: {r[:200]}" for r in only_a[:10]] + [f"row only in B: {r[:200]}" for r in only_b[:10]]
    if len(a["rows"]) != len(b["rows"]):
        out.append(f"rows: {len(a['rows'])} != {len(b['rows'])}")
    for run in sorted(set(a["metrics"]) | set(b["metrics"])):
        ma, mb = a["metrics"].get(run), b["metrics"].get(run)
        if ma is None or mb is None:
            out.append(f"run only in {'B' if ma is None else 'A'}: {run}")
            continue
        for key in sorted(set(ma) | set(mb)):
            if ma.get(key) != mb.get(key):
                out.append(f"{run} {key}: {ma.get(key)} != {mb.get(key)}")
    return out


def main(argv: list[str]) -> int:
    if argv[:1] == ["run"] and len(argv) >= 2:
        home = Path(tempfile.mkdtemp(prefix="binac-fingerprint-"))
        _compare(home, argv[2:])
        Path(argv[1]).write_text(json.dumps(fingerprint(home), indent=0))
        print(f"{argv[1]}: fingerprint of {home}")
        return 0
    if argv[:1] == ["dump"] and len(argv) == 3:
        Path(argv[2]).write_text(json.dumps(fingerprint(Path(argv[1])), indent=0))
        return 0
    if argv[:1] == ["diff"] and len(argv) in (3, 4) and argv[3:] in ([], ["--except-bank"]):
        prints = [json.loads(Path(p).read_text()) for p in argv[1:3]]
        found = diff(*(map(without_bank, prints) if argv[3:] else prints))
        print("\n".join(found) if found else "identical: every row and every metric point but perf/*")
        return 1 if found else 0
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
