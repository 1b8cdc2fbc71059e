"""A lab over several hosts (`make lab`, `make worker LAB=lab.env`): hosts share the Prefect API, the MLflow server
and the object store `BINAC_STORE`, and nothing else; each worker's `$BINAC_HOME` is a disposable local cache.

`start` (`make lab`, on the server host, with `BINAC_STORE`, its endpoint and credentials in the environment):
creates the store's bucket if needed; starts the Prefect server and `mlflow server` with its artifact proxy
(`--serve-artifacts --artifacts-destination s3://<bucket>/<prefix>/mlartifacts`, the store's endpoint as
`MLFLOW_S3_ENDPOINT_URL` and path-style addresses in its environment: https://mlflow.org/docs/latest/self-hosting/
architecture/artifact-store/), so clients upload artifacts over HTTP without store credentials; saves Prefect's
result storage block in the store (scripts/result_block.py); creates the work pool `binac-lab` and deploys every
deployment of prefect.yaml on it (its `binac_lab` pool definition: job variables that carry nothing of this host;
deployed without `BINAC_REPO` in the environment, so the pull step keeps its `{{ $BINAC_REPO }}`, which Prefect fills
when a flow run starts, from its worker's environment: the comment at the top of prefect.yaml);
creates the `binac` experiment through the server (its artifacts at `mlflow-artifacts:/`, the proxy); and writes
the lab file (default `lab.env`, mode 0600: scripts/lab_env.py). The servers bind to `BINAC_SERVE_HOST` and
require credentials off loopback exactly as `make serve` does (scripts/serve.py); the lab file names them at
`BINAC_LAB_HOST`, the address other hosts reach this one at (default: the bound address, or this host's name when
bound to a wildcard), which MLflow's host check (`--allowed-hosts`) accepts besides its defaults. What started is
recorded under `$BINAC_HOME/serve/` as `make serve` records it (pids and logs, no `env.sh`: `source lab.env` instead),
so `make stop` stops it. It starts no worker.

`worker` (`make worker LAB=lab.env`, on any host): one Prefect process worker on `binac-lab`, in the environment of
the lab file plus this host's own `BINAC_HOME` (default `./.binac`, created empty when missing), `BINAC_REPO` (this
checkout: the deployments' pull step moves each flow run into it) and `PREFECT_HOME` (under its home); recorded
like `make worker`'s (`prefect-worker-<n>` under its home's `serve/`), so `make stop` on that host stops it.
`BINAC_GPUS` picks a free device as for `make worker`. Nothing checks that this checkout holds the study's code
(a run on other stage code refuses in its own line, binac_core/runs/plans.py)."""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
from pathlib import Path

import lab_env
import serve
import yaml

REPO = serve.REPO
BIN = serve.BIN
POOL = "binac-lab"
POOLS = ("binac_local", "binac_lab")
"""prefect.yaml's pool definitions: the one its deployments name, and the lab's that replaces it."""
LAB_FILE = REPO / "lab.env"


def lab_host() -> str:
    """The address other hosts reach the servers at: `BINAC_LAB_HOST`, else the bound one, else (a wildcard bind)
    this host's fully qualified name."""
    given = os.environ.get("BINAC_LAB_HOST", "").strip()
    if given:
        return given
    host = serve.bind_host()
    return socket.getfqdn() if host in ("0.0.0.0", "::") else host


def the_store():
    """The store `BINAC_STORE` names; unset or not an `s3://` URL, one line (a lab has no other place for what hosts
    share)."""
    sys.path.insert(0, str(REPO))
    from binac_core.errors import BinacError
    from binac_core.foundation.objects import store_from_env

    try:
        store = store_from_env()
    except BinacError as exc:  # not an s3:// URL
        sys.exit(f"error: {exc}")
    if store is None:
        sys.exit("error: make lab needs BINAC_STORE (an s3://bucket[/prefix] URL), its endpoint and credentials")
    return store


def allowed_hosts(mlflow_port: int) -> str:
    """MLflow's `--allowed-hosts`: its defaults (loopback on any port and the private address ranges,
    mlflow.server.security_utils) and the lab's address, with and without the port."""
    from mlflow.server.security_utils import get_default_allowed_hosts

    return ",".join([*get_default_allowed_hosts(), lab_host(), f"{lab_host()}:{mlflow_port}"])


def spawn_mlflow(env: dict, port: int, store):
    """`mlflow server` over `$BINAC_HOME/mlflow.db`, its artifacts proxied to `<store>/mlartifacts`."""
    auth_args, auth_env = serve.mlflow_auth(env)
    argv = [str(BIN / "mlflow"), "server", *auth_args, "--host", serve.bind_host(), "--port", str(port)]
    argv += ["--workers", "1", "--backend-store-uri", f"sqlite:///{serve.home() / 'mlflow.db'}"]
    argv += ["--serve-artifacts", "--artifacts-destination", f"{store.url}/mlartifacts"]
    argv += ["--allowed-hosts", allowed_hosts(port)]
    server_env = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", **env, **auth_env}
    server_env["MLFLOW_BOTO_CLIENT_ADDRESSING_STYLE"] = "path"
    if store.endpoint:
        server_env["MLFLOW_S3_ENDPOINT_URL"] = store.endpoint
    return serve.spawn("mlflow", argv, server_env)


def lab_prefect_file() -> Path:
    """prefect.yaml with every deployment on the `binac_lab` pool definition, written under the state folder."""
    spec = yaml.safe_load((REPO / "prefect.yaml").read_text())
    local, lab = (spec["definitions"]["work_pools"][name] for name in POOLS)
    for deployment in spec["deployments"]:
        if deployment.get("work_pool") == local:
            deployment["work_pool"] = lab
    out = serve.state_dir() / "prefect-lab.yaml"
    out.write_text(yaml.safe_dump(spec, sort_keys=False))
    return out


def prefect(env: dict, *args: str) -> None:
    """`prefect ARGS` from the checkout, its output dropped, failing on a non-zero exit."""
    subprocess.run([str(BIN / "prefect"), *args], cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL)


def create_experiment(uri: str) -> str:
    """The `binac` experiment, created through the server when missing (its artifacts where the server puts them:
    the proxy); one that stores artifacts elsewhere (a home `make serve` used) stops the start in one line."""
    sys.path.insert(0, str(REPO))
    from mlflow.tracking import MlflowClient

    from binac_core.foundation.workspace import Workspace
    from binac_core.store import tracking

    client = MlflowClient(uri)
    experiment = tracking.experiment_id(client, Workspace(serve.home()))
    where = client.get_experiment(experiment).artifact_location
    if not where.startswith("mlflow-artifacts:"):
        raise RuntimeError(
            f"experiment binac stores artifacts at {where}, not through the proxy: use a fresh BINAC_HOME"
        )
    return experiment


def configure(env: dict, mlflow_uri: str) -> tuple[str, str]:
    """On the running servers: the work pool, the result block, the deployments and the experiment; returns (the
    block's slug, the experiment's id)."""
    prefect(env, "--no-prompt", "work-pool", "create", "--type", "process", "--overwrite", POOL)
    block = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "result_block.py")], env=env, check=True, capture_output=True, text=True
    ).stdout.strip()
    deploy_env = {k: v for k, v in env.items() if k != "BINAC_REPO"}  # the pull step's, filled at run time
    prefect(deploy_env, "--no-prompt", "deploy", "--all", "--prefect-file", str(lab_prefect_file()))
    os.environ["MLFLOW_TRACKING_URI"] = mlflow_uri
    return block, create_experiment(mlflow_uri)


def start(lab_file: Path) -> int:
    auth = serve.authenticated()  # off loopback without credentials: one line before anything starts
    store = the_store()
    running = [n for n in serve.order() if serve.read_pid(n)]
    if running:
        sys.exit(f"error: already running under {serve.state_dir()}: {', '.join(running)} (run `make stop` first)")
    from binac_core.errors import BinacError

    try:
        store.ensure_bucket()  # an unreachable store or refused credentials: one line before anything starts
    except BinacError as exc:
        sys.exit(f"error: {exc}")
    serve.state_dir().mkdir(parents=True, exist_ok=True)
    pp, mp = serve.port("BINAC_PREFECT_PORT", 4200), serve.port("BINAC_MLFLOW_PORT", 5000)
    env = serve.run_env(pp, mp)
    mlflow_uri = f"http://{serve.client_host()}:{mp}"
    argv = [str(BIN / "prefect"), "server", "start", "--host", serve.bind_host(), "--port", str(pp)]
    try:
        server, mlflow = serve.spawn("prefect-server", argv, env), spawn_mlflow(env, mp, store)
        serve.wait_until("prefect server", lambda: serve.http_ok(f"{env['PREFECT_API_URL']}/health"), [server])
        serve.wait_until("mlflow server", lambda: serve.http_ok(f"{mlflow_uri}/health"), [mlflow])
        block, experiment = configure(env, mlflow_uri)
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        print(f"error: {exc}" + (f"\n{exc.stderr}" if getattr(exc, "stderr", None) else ""), file=sys.stderr)
        serve.stop()
        return 1
    outside = lambda url: url.replace(serve.client_host(), lab_host(), 1)  # noqa: E731
    resolved = {**os.environ, "BINAC_STORE_ENDPOINT": store.endpoint or "", "AWS_DEFAULT_REGION": store.region}
    values = lab_env.lab_values(outside(env["PREFECT_API_URL"]), outside(mlflow_uri), block, auth, resolved)
    lab_env.write(lab_file, values)  # no env.sh: `source lab.env` gives a shell the lab's settings
    print(f"Prefect server  {values['PREFECT_API_URL']}")
    print(f"MLflow server   {values['MLFLOW_TRACKING_URI']}   (experiment {experiment}, artifacts in the store)")
    print(f"Results         {block} in {store.url}; work pool {POOL}, deployments ready")
    print(f"Lab file        {lab_file} (mode 0600; copy it to each worker host, never commit it)")
    print(f"On each worker host: make worker LAB={lab_file.name}; stop here: make stop")
    return 0


def worker_env(values: dict[str, str]) -> dict:
    """A lab worker's environment: this process's, the lab file's `values`, and this host's own home and code."""
    home = serve.home()
    env = {**os.environ, **values}
    env.update(
        BINAC_HOME=str(home),
        BINAC_REPO=str(REPO),
        PWD=str(REPO),
        PREFECT_HOME=str(serve.state_dir() / "prefect-home"),
        PREFECT_RESULTS_LOCAL_STORAGE_PATH=str(home / "prefect"),
        PREFECT_LOCAL_STORAGE_PATH=str(home / "prefect"),
    )
    for key, value in (("PREFECT_WORKER_QUERY_SECONDS", "2"), ("TOKENIZERS_PARALLELISM", "false")):
        env.setdefault(key, value)
    env.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    return env


def worker(lab_file: Path) -> int:
    env = worker_env(lab_env.read(lab_file))
    serve.state_dir().mkdir(parents=True, exist_ok=True)
    n = 1
    while serve.read_pid(f"prefect-worker-{n}") is not None:
        n += 1
    name = f"prefect-worker-{n}"
    device = serve.free_device()
    serve.spawn_worker(name, env, device, pool=POOL)
    on = f" on GPU {device}" if device is not None else ""
    print(f"started {name} (pid {serve.read_pid(name)}) on pool {POOL} at {env['PREFECT_API_URL']}{on}")
    print(f"its home {serve.home()}, its code {REPO}; log {serve.state_dir() / (name + '.log')}; stop: make stop")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="scripts/lab.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["start", "worker"])
    parser.add_argument("--lab-file", type=Path, default=LAB_FILE, help="the lab file (default: lab.env here)")
    a = parser.parse_args(argv)
    lab_file = a.lab_file.expanduser().resolve()
    return start(lab_file) if a.command == "start" else worker(lab_file)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
