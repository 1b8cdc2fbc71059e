"""`make ui-check`: the MLflow UI over a store holding a comparison, opened in headless Chromium the way a new user
opens it, checked, and screenshots saved.

Uses the store of `$BINAC_UI_HOME`, else `$BINAC_HOME`, else ./.binac; when it holds no comparison yet, runs a small
one there first (`binac compare --preset micro --methods grpo,fixed_critic,binac --seeds 0,1 --steps 6`: 96
actor samples, a budget every method reaches exactly). Starts an MLflow server on a free 127.0.0.1 port (stopped
again at the end, by its process group) and checks, failing with a one-line reason otherwise:
- the experiment's link as binac prints it (`tracking.ui_link`: `make serve`, the runs' Prefect artifacts) opens
  on its runs table, showing the comparison's parent run without any click (MLflow 3.17 opens an experiment in its
  GenAI mode, an empty traces overview, unless the link asks for "Model training");
- the chart view, with the comparison expanded, has an `eval_at_samples/acc_single` chart; its points (read over
  the same server's REST API, the data the chart draws) sit at the same actor-sample counts for every method;
- the parent run's page shows the report's summary metrics (`<method>/acc_single`, ...).
Screenshots go to `$BINAC_HOME/ui-check/` (`--docs`: to docs/, replacing the README's images):
mlflow-compare.png (the chart view) and mlflow-parent-run.png (the parent run's page).
`--link URL` instead opens the link `binac demo` printed (the children's held-out curves, `tracking.curves_link`)
over the same store, checks that it names every run it lists and that each has points of its metric, and saves
mlflow-demo-curves.png: `make ui-check LINK='<the link>'`.
Installs Debian's `chromium` with apt-get when it is missing and this runs as root. Drives Chromium over the
DevTools protocol; judging how the page looks is left to a person looking at the PNGs.
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

from binac_core.store.tracking import ui_link  # noqa: E402

DOCS = REPO / "docs"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
    "--window-size=1400,900",
]


def store_home() -> Path:
    home = os.environ.get("BINAC_UI_HOME") or os.environ.get("BINAC_HOME") or str(REPO / ".binac")
    return Path(home).expanduser().resolve()


def comparison(home: Path) -> tuple[str, str, str, dict[str, str]] | None:
    """(experiment id, parent run name, parent run id, {child run id: name}) of the latest finished comparison in
    the store, or None. Leaves the experiment's tags as the pipeline made them."""
    if not (home / "mlflow.db").exists():
        return None
    from mlflow.tracking import MlflowClient

    c = MlflowClient(f"sqlite:///{home / 'mlflow.db'}")
    exp = c.get_experiment_by_name("binac")
    if exp is None:
        return None
    parents = c.search_runs(
        [exp.experiment_id],
        "tags.method = 'compare' and attributes.status = 'FINISHED'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    if not parents:
        return None
    pid = parents[0].info.run_id
    children = c.search_runs([exp.experiment_id], f"tags.mlflow.parentRunId = '{pid}'")
    return exp.experiment_id, parents[0].info.run_name, pid, {r.info.run_id: r.info.run_name for r in children}


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        print("installing chromium with apt-get ...")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "install", "-y", "-q", "chromium"], env=env, check=True, stdout=subprocess.DEVNULL)
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
        self.proc = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={self.profile}", "--remote-debugging-port=0", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
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

    def wait_for(self, texts: list[str], timeout: float = 300) -> None:
        """Wait until the page shows every text (the timeout only guards against a hang; a slow machine is fine)."""
        t0 = time.time()
        while missing := [t for t in texts if t not in self.text()]:
            if time.time() - t0 > timeout:
                raise RuntimeError(f"the page does not show {missing} after {timeout:.0f}s")
            time.sleep(0.5)

    def click(self, selector: str) -> None:
        self.call(
            "Runtime.evaluate", expression=f"document.querySelectorAll({json.dumps(selector)}).forEach(e => e.click())"
        )

    def open(self, url: str, must_show: list[str]) -> str:
        """Open `url` and wait until it shows `must_show`, without any click; returns the page's text."""
        self.call("Page.navigate", url=url)
        self.wait_for(must_show)
        return self.text()

    def scroll_to(self, text: str) -> None:
        """Scroll the first element whose own text is `text` to the top (the chart view draws a section's charts
        only once it is on screen)."""
        self.call(
            "Runtime.evaluate",
            expression=(
                "(() => { const w = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT); let n;"
                f" while ((n = w.nextNode())) if (n.textContent.trim() === {json.dumps(text)})"
                " { n.parentElement.scrollIntoView({block: 'start'}); return true; } return false; })()"
            ),
        )

    def shot(
        self,
        url: str,
        must_show: list[str],
        out: Path,
        first: list[str] = (),
        click: str | None = None,
        scroll_to: str | None = None,
    ):
        """Open `url`; once it shows `first`, click every element matching `click` and scroll `scroll_to` to the
        top; once it shows `must_show`, close the assistant panel and save the screenshot."""
        self.call("Page.navigate", url=url)
        if click or scroll_to:
            self.wait_for(list(first))
            time.sleep(1)
        if click:
            self.click(click)
        if scroll_to:
            self.wait_for([scroll_to])
            self.scroll_to(scroll_to)
        self.wait_for(must_show)
        self.click(CLOSE_ASSISTANT)
        time.sleep(3)  # let the charts finish drawing after the layout change
        png = self.call("Page.captureScreenshot", format="png")["data"]
        out.write_bytes(base64.b64decode(png))
        print(f"saved {out} ({out.stat().st_size // 1024} KiB): shows {', '.join(must_show)}")

    def close(self) -> None:
        self.ws.close()
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)


CLOSE_ASSISTANT = '[data-component-id="mlflow.assistant.chat_panel.close"]'
EXPAND_RUN = '[data-component-id$="runnamecellrenderer.tsx_46"]'  # the +/- before a parent run's name
SMALL_COMPARISON = [
    "compare",
    "--preset",
    "micro",
    "--methods",
    "grpo,fixed_critic,binac",
    "--seeds",
    "0,1",
    "--steps",
    "6",
]


def rest(base: str, path: str, body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        f"{base}/api/2.0/mlflow/{path}", data=data, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)


def chart_points(base: str, children: dict[str, str], key: str = "eval_at_samples/acc_single") -> dict[str, list]:
    """{child run name: sorted steps of `key`}: the x values of the chart's points, as the UI reads them."""
    out = {}
    for rid, name in children.items():
        hist = rest(base, f"metrics/get-history?run_id={rid}&metric_key={key}").get("metrics", [])
        out[name] = sorted(int(m.get("step", 0)) for m in hist)
    return out


def serve_mlflow(home: Path) -> tuple[subprocess.Popen, str]:
    """An MLflow server over the store on a free 127.0.0.1 port, in its own process group; waits until healthy."""
    port = free_port()
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(port)]
        + ["--workers", "1", "--backend-store-uri", f"sqlite:///{home / 'mlflow.db'}"]
        + ["--default-artifact-root", (home / "mlartifacts").as_uri()],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    base, t0 = f"http://127.0.0.1:{port}", time.time()
    while not http_ok(f"{base}/health"):
        if server.poll() is not None or time.time() - t0 > 600:
            stop_group(server)
            raise RuntimeError("the MLflow server did not start")
        time.sleep(0.5)
    return server, base


def stop_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def check(home: Path, out: Path) -> dict:
    """Run the checks of the module docstring over the store's latest comparison, saving the screenshots into
    `out`; returns what was seen ({"parent", "children", "points", "parent_metrics", "files"}). Raises
    RuntimeError naming the first check that fails."""
    found = comparison(home)
    if found is None:
        raise RuntimeError(f"no finished comparison in {home}")
    exp, parent_name, parent, children = found
    server, base = serve_mlflow(home)
    browser = None
    try:
        browser = Browser(chromium())
        out.mkdir(parents=True, exist_ok=True)
        names = sorted(children.values())
        # 1. The experiment's link as binac prints it (tracking.ui_link), no click: the runs table must list the
        # comparison (without `workflowType` in the address, MLflow 3.17 opens an empty GenAI overview).
        browser.open(ui_link(base, exp), [parent_name, "Runs"])
        # 2. Chart view with the comparison expanded: one line per child run, the equal-budget chart among them.
        key = "eval_at_samples/acc_single"
        browser.shot(
            f"{base}/#/experiments/{exp}/runs?compareRunsMode=CHART&workflowType=machine_learning",
            [*names, key],
            out / "mlflow-compare.png",
            first=[parent_name],
            click=EXPAND_RUN,
            scroll_to="eval_at_samples",
        )
        points = chart_points(base, children, key)
        if len({tuple(p) for p in points.values()}) != 1:
            raise RuntimeError(f"{key}: the methods' points are at different actor-sample counts: {points}")
        # 3. The parent run's page shows the report's summary metrics.
        metrics = {m["key"] for m in rest(base, f"runs/get?run_id={parent}")["run"]["data"].get("metrics", [])}
        shown = sorted(m for m in metrics if m.startswith("summary/") and m.endswith("/acc_single"))
        if not shown:
            raise RuntimeError(f"the parent run {parent_name} has no summary metrics")
        browser.shot(ui_link(base, exp, parent), [parent_name, *shown], out / "mlflow-parent-run.png")
    finally:
        if browser is not None:
            browser.close()
        stop_group(server)
    return {
        "parent": parent_name,
        "children": names,
        "points": points,
        "parent_metrics": sorted(metrics),
        "files": [out / "mlflow-compare.png", out / "mlflow-parent-run.png"],
    }


def check_link(home: Path, link: str, out: Path) -> dict:
    """The link `binac demo` printed (`tracking.curves_link`), its host replaced by an MLflow server started here
    over the store: opened without any click, the page must name every run the link lists and the metric, and each
    run must have points of that metric (read over the same server's REST API, the data the chart draws); the
    screenshot is saved as `out`. Returns {"runs": {name: steps}, "file"}."""
    from urllib.parse import parse_qs, unquote

    fragment = link[link.index("#/") :]
    query = parse_qs(fragment.split("?", 1)[1])
    run_ids, metric = json.loads(unquote(query["runs"][0])), json.loads(unquote(query["metric"][0]))
    server, base = serve_mlflow(home)
    browser = None
    try:
        names = {rid: rest(base, f"runs/get?run_id={rid}")["run"]["info"]["run_name"] for rid in run_ids}
        points = chart_points(base, names, metric)
        empty = [n for n, p in points.items() if not p]
        if empty:
            raise RuntimeError(f"{metric}: no points for {', '.join(empty)}")
        browser = Browser(chromium())
        out.parent.mkdir(parents=True, exist_ok=True)
        browser.shot(f"{base}/{fragment}", [metric, *names.values()], out)
    finally:
        if browser is not None:
            browser.close()
        stop_group(server)
    return {"runs": points, "file": out}


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", action="store_true", help="save the screenshots into docs/ (the README's images)")
    ap.add_argument(
        "--link",
        help="instead: open this link as `binac demo` printed it (the children's curves) and save its screenshot",
    )
    a = ap.parse_args(argv)
    home = store_home()
    if a.link:
        out = (DOCS if a.docs else home / "ui-check") / "mlflow-demo-curves.png"
        try:
            seen = check_link(home, a.link, out)
        except RuntimeError as exc:
            print(f"error: ui-check: {exc}", file=sys.stderr)
            return 1
        for name, steps in seen["runs"].items():
            print(f"{name}: points at steps {steps}")
        return 0
    if comparison(home) is None:
        print(f"no comparison in {home}: running a small one (micro preset) ...")
        env = {**os.environ, "BINAC_HOME": str(home)}
        subprocess.run([sys.executable, "-m", "flows.cli", *SMALL_COMPARISON], cwd=REPO, env=env, check=True)
    try:
        seen = check(home, DOCS if a.docs else home / "ui-check")
    except RuntimeError as exc:
        print(f"error: ui-check: {exc}", file=sys.stderr)
        return 1
    print(f"store {home}: comparison {seen['parent']} with child runs {', '.join(seen['children'])}")
    print(
        f"eval_at_samples/acc_single points (actor samples), the same for every run: "
        f"{next(iter(seen['points'].values()))}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
