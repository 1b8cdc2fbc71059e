"""Start and stop the lab servers over one `$BINAC_HOME` (`make serve`, `make stop`), on 127.0.0.1 unless told.

`start` launches a Prefect server, an MLflow tracking server (over `$BINAC_HOME/mlflow.db` and
`$BINAC_HOME/mlartifacts`, the stores local runs write) and `BINAC_WORKERS` (default 2) Prefect process workers
that take one flow run at a time each (`--limit 1`; `BINAC_WORKER_LIMIT` changes it), creates the work pool
`binac-local`, deploys everything in prefect.yaml, and writes what it started to `$BINAC_HOME/serve/`:
`<name>.pid` ("pid starttime"), `<name>.log`, and `env.sh` (ports and `PREFECT_API_URL`, to `source`).
`stop` stops exactly those processes: each was started as the leader of its own session, so it and its children
form one process group, which is signalled by its id (never by name), after checking that the pid still belongs
to the process that was started (its start time matches). The worker goes first (it ignores its first SIGTERM),
then MLflow, then the Prefect server. On this 2-core machine two workers run a study's runs two at a time (each
run uses one torch thread); more workers can join from other machines (README, "Running in a lab").

One worker per GPU: with `BINAC_GPUS` (a device list, `0,1,2,3`) each worker is started with its own
`CUDA_VISIBLE_DEVICES` (one device of the list, recorded in `<name>.device`), `BINAC_WORKERS` defaults to the list's
length and may not exceed it, and `add-worker` takes a device no live worker holds; the flow runs a process worker
starts inherit its environment, so each run sees its worker's device alone (as device 0).

Environment: BINAC_HOME (default ./.binac), BINAC_PREFECT_PORT (default 4200), BINAC_MLFLOW_PORT (default 5000);
a port of 0 picks a free one; BINAC_GPUS (above). The Prefect server's own database lives in `$BINAC_HOME/serve/prefect-home`.
An MLFLOW_TRACKING_URI in the environment is dropped: deployment runs log to the store the MLflow server shows.
It does not daemonise beyond that or restart crashed servers.

Access: both servers bind to `BINAC_SERVE_HOST` (default 127.0.0.1). Off loopback (any address outside 127.0.0.0/8
and ::1, `0.0.0.0` included) they require authentication, and `start` refuses in one line, before anything starts,
unless the environment holds the credentials: `PREFECT_SERVER_API_AUTH_STRING` (`user:password`, Prefect's server
basic auth: https://docs.prefect.io/v3/advanced/security-settings), which the workers and this script's own
requests send as `PREFECT_API_AUTH_STRING`, and `MLFLOW_TRACKING_USERNAME` with `MLFLOW_TRACKING_PASSWORD`, MLflow's
admin user on its basic-auth app (`mlflow server --app-name basic-auth`, its users in `$BINAC_HOME/serve/
mlflow-auth.db`: https://mlflow.org/docs/latest/self-hosting/security/basic-http-auth/), which clients send.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from flows.liveness import ensure_crash_automation, heartbeat_env

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
HOST = "127.0.0.1"
"""The default address the servers bind to (`BINAC_SERVE_HOST`)."""
AUTH_VARS = ("PREFECT_SERVER_API_AUTH_STRING", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")
"""The credentials servers off loopback require (the module docstring)."""
POOL = "binac-local"
SERVERS = ("mlflow", "prefect-server")  # stop order: workers first, then these (the server last)


def gpus() -> list[str]:
    """The devices of `BINAC_GPUS` (comma-separated CUDA device ids or UUIDs), [] when unset."""
    return [d.strip() for d in os.environ.get("BINAC_GPUS", "").split(",") if d.strip()]


def wanted_workers() -> int:
    """`BINAC_WORKERS`, by default one per device of `BINAC_GPUS`, else 2 (unchecked: `worker_count`)."""
    return int(os.environ.get("BINAC_WORKERS", len(gpus()) or 2))


def worker_count() -> int:
    """`BINAC_WORKERS`, by default 2, or one per device of `BINAC_GPUS`; more workers than devices exits in one
    line."""
    devices, n = gpus(), wanted_workers()
    if n < 1:
        sys.exit("error: BINAC_WORKERS must be at least 1")
    if devices and n > len(devices):
        sys.exit(f"error: BINAC_WORKERS={n} but BINAC_GPUS lists {len(devices)} devices: one worker per GPU")
    return n


def worker_names(recorded: bool = False) -> list[str]:
    """The workers a start creates (`worker_count()` of them); with `recorded`, also those an earlier start wrote
    pid files for (stop finds every one of them)."""
    names = {f"prefect-worker-{i}" for i in range(1, (wanted_workers() if recorded else worker_count()) + 1)}
    if recorded and state_dir().exists():
        names |= {p.stem for p in state_dir().glob("prefect-worker-*.pid")}
    return sorted(names)


def order() -> list[str]:
    return [*worker_names(recorded=True), *SERVERS]


def home() -> Path:
    return Path(os.environ.get("BINAC_HOME", REPO / ".binac")).expanduser().resolve()


def state_dir() -> Path:
    return home() / "serve"


def bind_host() -> str:
    """The address the servers bind to: `BINAC_SERVE_HOST`, default 127.0.0.1."""
    return os.environ.get("BINAC_SERVE_HOST", "").strip() or HOST


def client_host() -> str:
    """The address this machine's clients reach the servers at: the bound one, or 127.0.0.1 for a wildcard."""
    host = bind_host()
    return HOST if host in ("0.0.0.0", "::") else host


def loopback(host: str) -> bool:
    """Whether `host` is a loopback address (127.0.0.0/8, ::1) or `localhost`."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to any interface
        return False


def authenticated() -> bool:
    """Whether the servers require authentication: off loopback, where `start` refuses in one line (before anything
    starts) unless every variable of `AUTH_VARS` is set (the module docstring)."""
    host = bind_host()
    if loopback(host):
        return False
    missing = [v for v in AUTH_VARS if not os.environ.get(v)]
    auth = os.environ.get("PREFECT_SERVER_API_AUTH_STRING", "")
    if auth and ":" not in auth:
        missing.append("PREFECT_SERVER_API_AUTH_STRING in the form user:password")
    if 0 < len(os.environ.get("MLFLOW_TRACKING_PASSWORD", "")) < 12:  # MLflow's own rule for its admin
        missing.append("MLFLOW_TRACKING_PASSWORD of at least 12 characters")
    if missing:
        sys.exit(
            f"error: BINAC_SERVE_HOST={host} is off loopback, where the servers require authentication: "
            f"set {', '.join(missing)} (or bind to 127.0.0.1)"
        )
    return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind((bind_host(), 0))
        return s.getsockname()[1]


def port(var: str, default: int) -> int:
    p = int(os.environ.get(var, default))
    if p == 0:
        return free_port()
    with socket.socket() as s:
        try:
            s.bind((bind_host(), p))
        except OSError:
            sys.exit(f"error: port {p} on {bind_host()} is in use (set {var} to another port, or 0 for a free one)")
    return p


def proc_stat(pid: int | str) -> list[str] | None:
    """Fields 3.. of /proc/<pid>/stat (state, ppid, pgrp, ...), None if the process is gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else fields


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/<pid>/stat), None if gone."""
    fields = proc_stat(pid)
    return fields[19] if fields else None


def group_alive(pgid: int) -> bool:
    """Whether any live (non-zombie) process is still in process group `pgid`."""
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            fields = proc_stat(d.name)
            if fields and int(fields[2]) == pgid:
                return True
    return False


def read_pid(name: str) -> int | None:
    """The recorded pid if that very process is still alive (same start time), else None."""
    f = state_dir() / f"{name}.pid"
    if not f.exists():
        return None
    pid, started = f.read_text().split()
    return int(pid) if start_time(int(pid)) == started else None


def spawn(name: str, argv: list[str], env: dict) -> subprocess.Popen:
    log = open(state_dir() / f"{name}.log", "ab")  # noqa: SIM115 (the child keeps it)
    proc = subprocess.Popen(
        argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
    )
    (state_dir() / f"{name}.pid").write_text(f"{proc.pid} {start_time(proc.pid)}\n")
    return proc


def spawn_worker(name: str, env: dict, device: str | None = None, pool: str = POOL) -> subprocess.Popen:
    """A process worker on `pool` taking `BINAC_WORKER_LIMIT` (default 1) flow runs at a time; with `device`, it
    and its flow runs see that GPU alone (`CUDA_VISIBLE_DEVICES`, recorded in `<name>.device`). Its name on the
    server (`worker_name`) holds this host's name, so workers of several hosts on one pool stay apart."""
    (state_dir() / f"{name}.device").unlink(missing_ok=True)
    env = {**env, **heartbeat_env()}  # flows/liveness.py: its flow runs send heartbeats every 30 s
    if device is not None:
        env = {**env, "CUDA_VISIBLE_DEVICES": device}
        (state_dir() / f"{name}.device").write_text(device + "\n")
    argv = [
        str(BIN / "prefect"),
        "worker",
        "start",
        "--pool",
        pool,
        "--type",
        "process",
        "--name",
        worker_name(name),
        "--limit",
        os.environ.get("BINAC_WORKER_LIMIT", "1"),
    ]
    return spawn(name, argv, env)


def worker_name(name: str) -> str:
    """The Prefect worker name of `prefect-worker-<n>`: `binac-<host name>-<pid of this script>-<n>` (the server
    tells workers, and a flow run's `prefect.worker.name` label its worker, by this name; pids alone repeat across
    hosts)."""
    return f"binac-{socket.gethostname()}-{os.getpid()}-{name.rsplit('-', 1)[1]}"


def http_ok(url: str, data: bytes | None = None) -> bytes | None:
    """The body of a 200 answer to `url` (a POST of `data`), or None; with Prefect's basic auth when it is on."""
    headers = {}
    if auth := os.environ.get("PREFECT_API_AUTH_STRING"):
        import base64

        headers["Authorization"] = "Basic " + base64.b64encode(auth.encode()).decode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers), timeout=5) as r:
            return r.read() if r.status == 200 else None
    except (urllib.error.URLError, OSError):
        return None


def wait_until(what: str, check, procs: list[subprocess.Popen], timeout: float = 180) -> None:
    t0 = time.time()
    while time.time() - t0 < timeout:
        if check():
            return
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(f"{what}: a server exited early (status {p.returncode}); see {state_dir()}/*.log")
        time.sleep(0.5)
    raise RuntimeError(f"{what}: not ready after {timeout:.0f}s; see {state_dir()}/*.log")


def run_env(prefect_port: int, mlflow_port: int) -> dict:
    """The environment of every process started here; the worker passes it on to flow runs (MLFLOW_UI: their
    Prefect artifacts link to their MLflow runs)."""
    h = home()
    env = dict(os.environ)
    env.update(
        BINAC_HOME=str(h),
        BINAC_REPO=str(REPO),
        PWD=str(REPO),
        PREFECT_HOME=str(state_dir() / "prefect-home"),
        PREFECT_API_URL=f"http://{client_host()}:{prefect_port}/api",
        MLFLOW_UI=f"http://{client_host()}:{mlflow_port}",
        PREFECT_RESULTS_LOCAL_STORAGE_PATH=str(h / "prefect"),
        PREFECT_LOCAL_STORAGE_PATH=str(h / "prefect"),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
    )
    # A run's log holds the progress lines the flows write (flows/reporting.py), not one "Finished in state
    # Completed()" per task: task runs log warnings and errors only.
    if authenticated():  # the workers, deployments and flow runs send Prefect's credentials
        env["PREFECT_API_AUTH_STRING"] = env["PREFECT_SERVER_API_AUTH_STRING"]
    for key, value in (
        ("PREFECT_WORKER_QUERY_SECONDS", "2"),
        ("TOKENIZERS_PARALLELISM", "false"),
        ("PREFECT_LOGGING_LOGGERS_PREFECT_TASK_RUNS_LEVEL", "WARNING"),
        # the server streams runs' logs to `prefect deployment run ... --watch` (off by default)
        ("PREFECT_SERVER_LOGS_STREAM_OUT_ENABLED", "true"),
        ("PREFECT_SERVER_LOGS_STREAM_PUBLISHING_ENABLED", "true"),
    ):
        env.setdefault(key, value)
    return env


def spawn_workers(env: dict) -> list[subprocess.Popen]:
    """The workers of a start (`worker_names`), `prefect-worker-<n>` on the n-th device of `BINAC_GPUS` when it is
    set."""
    devices = gpus()
    number = lambda name: int(name.rsplit("-", 1)[1])  # noqa: E731 - prefect-worker-<n> takes device n - 1
    return [spawn_worker(name, env, devices[number(name) - 1] if devices else None) for name in worker_names()]


def mlflow_auth(env: dict) -> tuple[list[str], dict]:
    """The MLflow server's extra arguments and environment: its basic-auth app when `authenticated()`, its admin the
    `MLFLOW_TRACKING_*` user (created on the first start; its users in `serve/mlflow-auth.db`), else none
    (https://mlflow.org/docs/latest/self-hosting/security/basic-http-auth/)."""
    if not authenticated():
        return [], {}
    ini = state_dir() / "mlflow-auth.ini"
    ini.write_text(
        "[mlflow]\ndefault_permission = READ\n"
        f"database_uri = sqlite:///{state_dir() / 'mlflow-auth.db'}\n"
        f"admin_username = {env['MLFLOW_TRACKING_USERNAME']}\n"
        "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
    )
    import secrets

    return ["--app-name", "basic-auth"], {
        "MLFLOW_AUTH_CONFIG_PATH": str(ini),
        "MLFLOW_AUTH_ADMIN_PASSWORD": env["MLFLOW_TRACKING_PASSWORD"],
        # the app's CSRF protection needs a secret key: one server, so a fresh one per start unless given
        "MLFLOW_FLASK_SERVER_SECRET_KEY": env.get("MLFLOW_FLASK_SERVER_SECRET_KEY") or secrets.token_hex(32),
    }


def start() -> int:
    worker_count()  # a bad BINAC_WORKERS / BINAC_GPUS: one line before anything starts
    authenticated()  # off loopback without credentials: one line before anything starts
    running = [n for n in order() if read_pid(n)]
    if running:
        sys.exit(f"error: already running under {state_dir()}: {', '.join(running)} (run `make stop` first)")
    state_dir().mkdir(parents=True, exist_ok=True)
    # The UI serves $BINAC_HOME's store, so deployment runs must log there too, whatever the shell points at.
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    pp, mp = port("BINAC_PREFECT_PORT", 4200), port("BINAC_MLFLOW_PORT", 5000)
    env = run_env(pp, mp)
    h = home()
    (h / "mlartifacts").mkdir(parents=True, exist_ok=True)
    # Create/migrate the MLflow tables the way runs do (under binac's lock), not racing a run from the server.
    from binac_core.foundation.workspace import Workspace
    from binac_core.store import tracking

    experiment = tracking.experiment_id(tracking.client(Workspace(h)), Workspace(h))  # its UI link is printed
    try:
        server = spawn(
            "prefect-server", [str(BIN / "prefect"), "server", "start", "--host", bind_host(), "--port", str(pp)], env
        )
        # The same stores local runs use; artifacts of runs live where their experiment says
        # (file://$BINAC_HOME/mlartifacts/<experiment>, binac_core/store/tracking.py), under this root.
        auth_args, auth_env = mlflow_auth(env)
        mlflow = spawn(
            "mlflow",
            [
                str(BIN / "mlflow"),
                "server",
                *auth_args,
                "--host",
                bind_host(),
                "--port",
                str(mp),
                "--workers",
                "1",
                "--backend-store-uri",
                f"sqlite:///{h / 'mlflow.db'}",
                "--default-artifact-root",
                (h / "mlartifacts").as_uri(),
            ],
            # no GenAI job runner (seven extra processes): nothing here uses MLflow server jobs
            {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", **env, **auth_env},
        )
        wait_until("prefect server", lambda: http_ok(f"http://{client_host()}:{pp}/api/health"), [server])
        subprocess.run(
            [str(BIN / "prefect"), "--no-prompt", "work-pool", "create", "--type", "process", "--overwrite", POOL],
            cwd=REPO,
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        ensure_crash_automation(env=env)  # flows/liveness.py: a watched run whose heartbeats stop is CRASHED
        workers = spawn_workers(env)
        subprocess.run(
            [str(BIN / "prefect"), "--no-prompt", "deploy", "--all"],
            cwd=REPO,
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        filt = f"http://{client_host()}:{pp}/api/work_pools/{POOL}/workers/filter"
        wait_until(
            "prefect workers",
            lambda: len(json.loads(http_ok(filt, b"{}") or b"[]")) >= len(workers),
            [server, *workers],
        )
        wait_until("mlflow server", lambda: http_ok(f"http://{client_host()}:{mp}/health"), [mlflow])
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        stop()
        return 1
    write_env_sh(h, pp, mp)
    print(f"Prefect server  http://{client_host()}:{pp}   (UI; API {env['PREFECT_API_URL']})")
    print(f"MLflow UI       {tracking.ui_link(f'http://{client_host()}:{mp}', experiment)}   (store {h / 'mlflow.db'})")
    print(f"Work pool {POOL}, {len(workers)} workers and deployments ready; pids and logs in {state_dir()}")
    print("Run a comparison:")
    print(
        f"  PREFECT_API_URL={env['PREFECT_API_URL']} {BIN / 'prefect'} deployment run 'compare/micro' "
        "--param seeds='[0]' --watch"
    )
    print(f"  (or `source {state_dir() / 'env.sh'}` once, then `prefect deployment run ...`)")
    print("Stop everything: make stop")
    return 0


def write_env_sh(h: Path, prefect_port: int, mlflow_port: int) -> None:
    """`env.sh`, for `source`: the servers' addresses, and the project's environment first on PATH, so that
    `prefect deployment run ...` works in a fresh shell without activating `.venv` first."""
    lines = [
        f"export BINAC_HOME={shlex.quote(str(h))}",
        f"export PREFECT_API_URL=http://{client_host()}:{prefect_port}/api",
        f"export BINAC_PREFECT_PORT={prefect_port}",
        f"export BINAC_MLFLOW_PORT={mlflow_port}",
        f"export BINAC_SERVE_HOST={shlex.quote(bind_host())}",
        f"export MLFLOW_UI=http://{client_host()}:{mlflow_port}",
        f'export PATH={shlex.quote(str(BIN))}:"$PATH"',
    ]
    (state_dir() / "env.sh").write_text("\n".join(lines) + "\n")


def read_env_sh() -> dict[str, str]:
    """The variables `env.sh` sets (PATH as written, unexpanded)."""
    lines = (state_dir() / "env.sh").read_text().splitlines()
    return {k: v for k, _, v in (line.removeprefix("export ").partition("=") for line in lines)}


def signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def wait_gone(pgid: int, timeout: float) -> bool:
    t0 = time.time()
    while time.time() - t0 < timeout:
        if not group_alive(pgid):
            return True
        time.sleep(0.2)
    return False


def stop() -> int:
    for name in order():
        pid = read_pid(name)
        if pid is not None:
            signal_group(pid, signal.SIGTERM)
            if name.startswith(
                "prefect-worker"
            ):  # the worker treats the first SIGTERM as "finish up"; a second one stops it
                time.sleep(1)
                signal_group(pid, signal.SIGTERM)
            if not wait_gone(pid, 30):
                signal_group(pid, signal.SIGKILL)
                wait_gone(pid, 10)
            print(f"stopped {name} (pid {pid})")
        (state_dir() / f"{name}.pid").unlink(missing_ok=True)
        (state_dir() / f"{name}.device").unlink(missing_ok=True)
    (state_dir() / "env.sh").unlink(missing_ok=True)
    return 0


def add_worker() -> int:
    """One more process worker on the running pool (`make worker`): to replace a worker that died, or to add one.
    Recorded like the others (`prefect-worker-<n>.pid`), so `make stop` stops it too."""
    env_file = state_dir() / "env.sh"
    if not env_file.exists() or not read_pid("prefect-server"):
        sys.exit(f"error: no server started under {state_dir()} (run `make serve` first)")
    ports = read_env_sh()
    os.environ["BINAC_SERVE_HOST"] = ports.get("BINAC_SERVE_HOST", HOST)  # the servers' address decides the auth
    env = run_env(int(ports["BINAC_PREFECT_PORT"]), int(ports["BINAC_MLFLOW_PORT"]))
    env.pop("MLFLOW_TRACKING_URI", None)
    n = 1
    while read_pid(f"prefect-worker-{n}") is not None:
        n += 1
    name = f"prefect-worker-{n}"
    device = free_device()
    spawn_worker(name, env, device)
    on = f" on GPU {device}" if device is not None else ""
    print(f"started {name} (pid {read_pid(name)}) on pool {POOL}{on}; log {state_dir() / (name + '.log')}")
    return 0


def free_device() -> str | None:
    """With `BINAC_GPUS`: its first device no live worker holds (exits in one line when each is held); else None."""
    devices = gpus()
    if not devices:
        return None
    held = {
        (state_dir() / f"{p.stem}.device").read_text().strip()
        for p in state_dir().glob("prefect-worker-*.pid")
        if read_pid(p.stem) is not None and (state_dir() / f"{p.stem}.device").is_file()
    }
    for device in devices:
        if device not in held:
            return device
    sys.exit(f"error: every GPU of BINAC_GPUS ({','.join(devices)}) has a live worker: one worker per GPU")


if __name__ == "__main__":
    commands = {"start": start, "stop": stop, "add-worker": add_worker}
    if len(sys.argv) != 2 or sys.argv[1] not in commands:
        sys.exit(f"usage: {sys.argv[0]} start|stop|add-worker")
    sys.exit(commands[sys.argv[1]]())
