"""`make ui-check`: the MLflow UI over a store holding a comparison, opened in headless Chromium, screenshots saved.

Uses the store of `$BINAC_UI_HOME`, else `$BINAC_HOME`, else ./.binac; when it holds no comparison yet, runs a small
one there first (`binac compare --preset micro --methods grpo,fixed_critic,binac --seeds 0,1 --steps 2`). Starts an
MLflow server on a free 127.0.0.1 port (stopped again at the end, by its process group), and saves
- docs/mlflow-compare.png: the experiment's runs in chart view with the comparison's parent run expanded, so every
  chart (eval/*, train/*, perf/* by step) has one line per child run (method x seed),
- docs/mlflow-parent-run.png: the parent run's page, listing its child runs.
Installs Debian's `chromium` with apt-get when it is missing and this runs as root. Drives Chromium over the
DevTools protocol and fails unless each page shows the run names (and, for the charts, a metric name) before the
screenshot is taken; judging how the page looks is left to a person looking at the PNGs. Tags the experiment
`mlflow.experimentKind=custom_model_development` when it has no kind yet (otherwise the UI shows GenAI pages).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO))
from serve import free_port, http_ok  # noqa: E402

DOCS = REPO / "docs"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
         "--window-size=1400,900"]


def store_home() -> Path:
    home = os.environ.get("BINAC_UI_HOME") or os.environ.get("BINAC_HOME") or str(REPO / ".binac")
    return Path(home).expanduser().resolve()


def comparison(home: Path) -> tuple[str, str, str, dict[str, str]] | None:
    """(experiment id, parent run name, parent run id, {child run id: name}) of the latest finished comparison in
    the store, or None."""
    if not (home / "mlflow.db").exists():
        return None
    from mlflow.tracking import MlflowClient

    c = MlflowClient(f"sqlite:///{home / 'mlflow.db'}")
    exp = c.get_experiment_by_name("binac")
    if exp is None:
        return None
    parents = c.search_runs([exp.experiment_id], "tags.method = 'compare' and attributes.status = 'FINISHED'",
                            order_by=["attributes.start_time DESC"], max_results=1)
    if not parents:
        return None
    pid = parents[0].info.run_id
    children = c.search_runs([exp.experiment_id], f"tags.mlflow.parentRunId = '{pid}'")
    if exp.tags.get("mlflow.experimentKind") is None:
        # Without it the UI guesses a GenAI experiment and shows its "evaluation runs" pages.
        c.set_experiment_tag(exp.experiment_id, "mlflow.experimentKind", "custom_model_development")
    return exp.experiment_id, parents[0].info.run_name, pid, {r.info.run_id: r.info.run_name for r in children}


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        print("installing chromium with apt-get ...")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "install", "-y", "-q", "chromium"], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        found = shutil.which("chromium")
    if not found:
        sys.exit("error: chromium not found (Debian: apt-get install chromium)")
    return found


class Browser:
    """Headless Chromium driven over the DevTools protocol: open a URL, wait until the page shows given texts,
    close MLflow's assistant side panel, save a PNG. (Chromium's plain `--screenshot` flag cannot wait for the
    UI's API calls or click, so it could capture an empty page.)"""

    def __init__(self, binary: str):
        from websockets.sync.client import connect

        self.profile = tempfile.mkdtemp(prefix="binac-chromium-")
        self.proc = subprocess.Popen([binary, *FLAGS, f"--user-data-dir={self.profile}", "--remote-debugging-port=0",
                                      "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        port_file, t0 = Path(self.profile) / "DevToolsActivePort", time.time()
        while not port_file.exists() or not port_file.read_text().strip():
            if self.proc.poll() is not None or time.time() - t0 > 60:
                raise RuntimeError("chromium did not start")
            time.sleep(0.2)
        port = port_file.read_text().split()[0]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            page = next(t for t in json.load(r) if t["type"] == "page")
        self.ws, self.next_id = connect(page["webSocketDebuggerUrl"], max_size=None), 0
        self.call("Emulation.setDeviceMetricsOverride", width=1400, height=900, deviceScaleFactor=1, mobile=False)

    def call(self, method: str, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=60))
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]

    def text(self) -> str:
        res = self.call("Runtime.evaluate", expression="document.body ? document.body.innerText : ''")
        return res["result"].get("value", "")

    def wait_for(self, texts: list[str], timeout: float = 90) -> None:
        t0 = time.time()
        while missing := [t for t in texts if t not in self.text()]:
            if time.time() - t0 > timeout:
                raise RuntimeError(f"the page does not show {missing} after {timeout:.0f}s")
            time.sleep(0.5)

    def click(self, selector: str) -> None:
        self.call("Runtime.evaluate", expression=f"document.querySelectorAll({json.dumps(selector)})"
                                                 ".forEach(e => e.click())")

    def shot(self, url: str, must_show: list[str], out: Path, first: list[str] = (), click: str | None = None):
        """Open `url`; once it shows `first`, click every element matching `click`; once it shows `must_show`,
        close the assistant panel and save the screenshot."""
        self.call("Page.navigate", url=url)
        if click:
            self.wait_for(list(first))
            time.sleep(1)
            self.click(click)
        self.wait_for(must_show)
        self.click(CLOSE_ASSISTANT)
        time.sleep(3)  # let the charts finish drawing after the layout change
        png = self.call("Page.captureScreenshot", format="png")["data"]
        out.write_bytes(base64.b64decode(png))
        print(f"saved {out.relative_to(REPO)} ({out.stat().st_size // 1024} KiB): shows {', '.join(must_show)}")

    def close(self) -> None:
        self.ws.close()
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)


CLOSE_ASSISTANT = '[data-component-id="mlflow.assistant.chat_panel.close"]'
EXPAND_RUN = '[data-component-id$="runnamecellrenderer.tsx_46"]'  # the +/- before a parent run's name


def main() -> int:
    home = store_home()
    found = comparison(home)
    if found is None:
        print(f"no comparison in {home}: running a small one (micro preset) ...")
        env = {**os.environ, "BINAC_HOME": str(home)}
        subprocess.run([sys.executable, "-m", "flows.cli", "compare", "--preset", "micro", "--methods",
                        "grpo,fixed_critic,binac", "--seeds", "0,1", "--steps", "2"], cwd=REPO, env=env, check=True)
        found = comparison(home)
    exp, parent_name, parent, children = found
    port = free_port()
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1", "--backend-store-uri", f"sqlite:///{home / 'mlflow.db'}",
         "--default-artifact-root", (home / "mlartifacts").as_uri()],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    base, browser = f"http://127.0.0.1:{port}", None
    try:
        t0 = time.time()
        while not http_ok(f"{base}/health"):
            if server.poll() is not None or time.time() - t0 > 120:
                sys.exit("error: the MLflow server did not start")
            time.sleep(0.5)
        browser = Browser(chromium())
        DOCS.mkdir(exist_ok=True)
        names = sorted(children.values())
        # The experiment's runs in chart view, the comparison expanded: one line per child run on every chart.
        browser.shot(f"{base}/#/experiments/{exp}/runs?compareRunsMode=CHART", [*names, "eval/acc_single"],
                     DOCS / "mlflow-compare.png", first=[parent_name], click=EXPAND_RUN)
        browser.shot(f"{base}/#/experiments/{exp}/runs/{parent}", [parent_name, *names],
                     DOCS / "mlflow-parent-run.png")
    finally:
        if browser is not None:
            browser.close()
        try:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(server.pid, signal.SIGKILL)
    print(f"store {home}: comparison {parent_name} ({parent}) with child runs {', '.join(sorted(children.values()))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
