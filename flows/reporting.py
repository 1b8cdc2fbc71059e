"""What a flow run tells the person who started it, in Prefect's own records: progress lines, a refusal of bad
parameters, and a closing markdown artifact. The progress lines go through the run logger (they show in `prefect
flow-run logs` and `--watch`; printed too, for the CLI), a refusal is the run's one-line state message (the same line
the CLI prints), and the artifact holds the result, the MLflow run and where the report lies."""

from __future__ import annotations

import os
import re

from prefect import get_run_logger
from prefect.artifacts import create_markdown_artifact
from prefect.states import Failed

from binac_core.errors import BinacError
from binac_core.foundation.workspace import workspace
from binac_core.store import tracking


def progress(message: str) -> None:
    """One progress line: to the flow run's log (Prefect's API, shown by `--watch` and the UI) and to stdout."""
    get_run_logger().info(message)
    print(message, flush=True)


def refuse(exc: BinacError):
    """The run ends Failed with the CLI's one-line error as its state message, instead of a traceback."""
    message = f"error: {exc}"
    get_run_logger().error(message)
    return Failed(message=message)


def mlflow_where(run_id: str) -> str:
    """A link to the run in the MLflow UI (`MLFLOW_UI`, set by `make serve`), else how to open the store."""
    ws = workspace()
    ui = os.environ.get("MLFLOW_UI", "").rstrip("/")
    if ui:
        exp = tracking.client(ws).get_run(run_id).info.experiment_id
        return f"[{run_id}]({tracking.ui_link(ui, exp, run_id)})"
    return f"`{run_id}` (open: `mlflow ui --backend-store-uri {ws.mlflow_uri}`)"


def closing_artifact(key: str, title: str, body: str, run_id: str, report_path: str | None = None) -> None:
    """The run's closing markdown artifact: a title, `body` (a table), the MLflow run and the report's path.
    `key` groups the artifact's versions across runs of the same name (lower-case letters, digits, dashes)."""
    lines = [f"# {title}", "", body.strip(), "", f"MLflow run: {mlflow_where(run_id)}"]
    if report_path:
        lines.append(f"Report: `{report_path}`")
    key = re.sub(r"[^a-z0-9-]+", "-", key.lower()).strip("-")
    create_markdown_artifact("\n".join(lines) + "\n", key=key, description=title)
