"""`lab.env`: what a worker on any host needs to join a lab (`make lab` writes it, `make worker LAB=lab.env` reads it).

One `export NAME=value` line per variable, each value quoted for a POSIX shell (`shlex.quote`), so the file can be
`source`d as well as read here. Written with mode 0600 (it holds credentials) and replaced whole; never committed
(`.gitignore`). It holds the three shared addresses and their credentials, nothing of the writer's own host:

- the Prefect API: `PREFECT_API_URL`, and `PREFECT_API_AUTH_STRING` where the server requires it;
- the MLflow tracking server: `MLFLOW_TRACKING_URI` (artifacts go through its proxy, so MLflow needs no store
  credentials), and `MLFLOW_TRACKING_USERNAME` / `MLFLOW_TRACKING_PASSWORD` where it requires them;
- the object store: `BINAC_STORE`, `BINAC_STORE_ENDPOINT`, and boto3's `AWS_*` credentials and region (trajectory
  shards, stage files and Prefect's results);
- `PREFECT_RESULTS_DEFAULT_STORAGE_BLOCK`: the result storage block in that store (scripts/result_block.py).

It does not check that the addresses answer (a worker that cannot reach them fails in its own log)."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

STORE_VARS = (
    "BINAC_STORE",
    "BINAC_STORE_ENDPOINT",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_DEFAULT_REGION",
)
"""The object store's variables, copied from the lab's environment where set (`binac_core.foundation.objects`; the
lab passes the endpoint and region as the store resolved them, whichever variable named them)."""


def lab_values(prefect_url: str, mlflow_url: str, result_block: str, auth: bool, environ: dict) -> dict[str, str]:
    """The variables of `lab.env`: the servers' addresses, the store's variables of `environ`, and with `auth` the
    credentials both servers require (`environ`'s `PREFECT_SERVER_API_AUTH_STRING` and `MLFLOW_TRACKING_*`)."""
    values = {"PREFECT_API_URL": prefect_url, "MLFLOW_TRACKING_URI": mlflow_url}
    if auth:
        values["PREFECT_API_AUTH_STRING"] = environ["PREFECT_SERVER_API_AUTH_STRING"]
        values["MLFLOW_TRACKING_USERNAME"] = environ["MLFLOW_TRACKING_USERNAME"]
        values["MLFLOW_TRACKING_PASSWORD"] = environ["MLFLOW_TRACKING_PASSWORD"]
    values.update({v: environ[v] for v in STORE_VARS if environ.get(v)})
    values["PREFECT_RESULTS_DEFAULT_STORAGE_BLOCK"] = result_block
    values["MLFLOW_UI"] = mlflow_url  # flow runs link their Prefect artifacts to their MLflow runs
    return values


def write(path: Path, values: dict[str, str]) -> None:
    """Write `values` to `path` with mode 0600, replacing it whole (the file is created 0600, never wider)."""
    text = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in values.items())
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o600)  # an existing temporary file keeps its mode through O_CREAT
    os.replace(tmp, path)


def read(path: Path) -> dict[str, str]:
    """The variables a `lab.env` sets; a missing file or a line that is not `export NAME=value` is one line."""
    if not path.is_file():
        raise SystemExit(f"error: no lab file {path} (`make lab` writes it on the server host; copy it here)")
    values = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        words = shlex.split(line)
        if len(words) != 2 or words[0] != "export" or "=" not in words[1]:
            raise SystemExit(f"error: {path}:{n} is not `export NAME=value`")
        name, _, value = words[1].partition("=")
        values[name] = value
    return values
