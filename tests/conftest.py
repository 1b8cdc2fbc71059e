"""Shared test setup. BINAC_DATA_DIR defaults to ../shared/data beside the repository, as in the Makefile, and the
tests never reach a model hub: HF_HUB_OFFLINE=1 for this process and every process it starts (a test that checks
what happens with the hub allowed removes it for its own child)."""

import os
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"

_beside = Path(__file__).resolve().parents[2] / "shared" / "data"
os.environ.setdefault("BINAC_DATA_DIR", str(_beside if _beside.exists() else Path("/work/shared/data")))

import atexit  # noqa: E402
import contextlib  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import pytest  # noqa: E402

from binac_core.rl.methods import METHODS  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


MODEL_CACHE_PREFIX = "binac-models-"
MODEL_CACHE_OWNER = "owner.pid"  # the pid of the process that made a temporary model cache
STALE_WITHOUT_OWNER_S = 3600  # a cache with no owner recorded, untouched this long, is an earlier session's


def remove_stale_model_caches(root: Path) -> list[Path]:
    """Remove the temporary model caches under `root` that no running session owns: those whose owner process is
    gone (a session killed before its exit handler ran), and those with no owner recorded left untouched for an hour
    (made by test code that recorded none; a folder is touched whenever a base lands in it). Returns the folders
    removed."""
    removed = []
    for folder in sorted(root.glob(f"{MODEL_CACHE_PREFIX}*")):
        try:
            owner = int((folder / MODEL_CACHE_OWNER).read_text())
        except (OSError, ValueError):
            owner = None
        try:
            stale = _gone(owner) if owner else time.time() - folder.stat().st_mtime > STALE_WITHOUT_OWNER_S
        except OSError:  # removed meanwhile by another session
            continue
        if stale:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's live process
        return False
    return False


def _model_cache() -> Path:
    """One folder of tiny base models (and the converted smol model, ~0.5 GB) for the session's process: each
    workspace would otherwise pretrain its own copy. `BINAC_TEST_MODEL_CACHE` names one to keep; else a temporary
    folder with its owner's pid, removed when the process exits, after the stale ones of earlier sessions."""
    if os.environ.get("BINAC_TEST_MODEL_CACHE"):
        return Path(os.environ["BINAC_TEST_MODEL_CACHE"])
    remove_stale_model_caches(Path(tempfile.gettempdir()))
    folder = Path(tempfile.mkdtemp(prefix=MODEL_CACHE_PREFIX))
    (folder / MODEL_CACHE_OWNER).write_text(str(os.getpid()))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


MODEL_CACHE = _model_cache()
ALL_METHODS = ",".join(METHODS)  # every method, from the specs (binac_core/rl/methods.py)


_PREFECT_API: dict[str, str] = {}  # {"url": ...} while the session's Prefect server runs (fixture `prefect_home`)


def binac_env(home: Path, prefect_home: Path) -> dict:
    """Environment for a `binac` subprocess with its own workspace, reporting to the session's Prefect server
    (without one, each process would start an ephemeral server of its own)."""
    env = dict(os.environ)
    env.update(
        BINAC_HOME=str(home),
        PREFECT_HOME=str(prefect_home),
        HF_HUB_OFFLINE="1",
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="90",
        TOKENIZERS_PARALLELISM="false",
        BINAC_MODEL_CACHE=str(MODEL_CACHE),
    )
    env.pop("PREFECT_API_URL", None)
    env.pop("MLFLOW_TRACKING_URI", None)
    if _PREFECT_API:
        env["PREFECT_API_URL"] = _PREFECT_API["url"]
    return env


def run_binac(args: list[str], env: dict, timeout: int = 2700, check: bool = True) -> subprocess.CompletedProcess:
    """`binac ARGS` in a subprocess; `timeout` is a hang guard only, generous because a loaded 2-core machine runs a
    micro comparison (its pretraining on every core) many times slower than an idle one."""
    proc = subprocess.run(
        [sys.executable, "-m", "flows.cli", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"binac {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return proc


def binac_iteration_args(preset: str, *settings: str) -> list[str]:
    """`binac train` arguments for one Bi-NAC iteration on `preset` (seed 0), each of `settings` as a `--set`."""
    args = ["train", "--preset", preset, "--method", "binac", "--steps", "1", "--seed", "0"]
    for item in settings:
        args += ["--set", item]
    return args


MINIMAL_BATCH = (
    "train.batch_problems=2",
    "train.group_size=2",
    "train.critic_group_size=1",
    "train.micro_batch_size=4",
    "task.n_test=2",
)
"""Settings of a minimal batch (2 problems, 2 attempts each, 1 feedback each; 2 held-out problems), for the tests
that train a real model (tests/model/test_smol.py, tests/integration/test_vllm.py)."""
SHORT_GENERATION = ("generation.max_new_tokens=12", "generation.feedback_max_new_tokens=8")
"""Settings of short completions, for the same tests."""

GPU_CHECK_ROWS = (
    "actor T=1",
    "actor T=0.7",
    "actor T=0 (greedy)",
    "critic T=1",
    "actor re-saved (new digest) T=1",
    "no adapter T=1",
    "HFBackend actor T=1 (HF sampler vs trainer)",
)
"""The rows of `scripts/gpu_check.py`'s check of one dtype, in the order it writes them (tests/integration/
test_gpu_check.py with HF standing in for vLLM, tests/integration/test_vllm.py on vLLM)."""


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def until(what: str, check, timeout: float, every: float = 0.5):
    """`check()`'s first truthy value, polled every `every` s; fails naming `what` after `timeout` s (a deadline
    on a condition, never a wait standing in for one)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if got := check():
            return got
        time.sleep(every)
    raise AssertionError(f"not within {timeout:g} s: {what}")


def _healthy(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


@contextlib.contextmanager
def server_process(argv: list[str], health_url: str, log: Path, env: dict | None = None):
    """A server started as `argv` (the leader of its own session, output to `log`), yielded once `health_url`
    answers 200; stopped at the end by its process group, the one started here (never by name): SIGTERM, then
    SIGKILL after 30 s."""
    import signal

    with open(log, "ab") as out:
        server = subprocess.Popen(
            argv,
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        deadline = time.time() + 600  # a hang guard only: a busy machine may take minutes
        while not _healthy(health_url):
            if server.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"{Path(argv[0]).name} did not start; see {log}")
            time.sleep(0.5)
        yield server
    finally:
        with contextlib.suppress(ProcessLookupError):  # a server that died on its own left no group to signal
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


@pytest.fixture(scope="session")
def prefect_home(tmp_path_factory):
    """PREFECT_HOME of the session's one Prefect server (`prefect server start` on a free 127.0.0.1 port), which
    every `binac` subprocess of the tests reports to (`binac_env`): an ephemeral server per process cost ~20 s
    of each run. Stopped at the end by its process group, the one this fixture started (never by name)."""
    home = tmp_path_factory.mktemp("prefect-home")
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update(PREFECT_HOME=str(home), PREFECT_SERVER_ANALYTICS_ENABLED="false")
    prefect = str(Path(sys.executable).parent / "prefect")
    argv = [prefect, "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    with server_process(argv, f"http://127.0.0.1:{port}/api/health", home / "server.log", env):
        _PREFECT_API["url"] = f"http://127.0.0.1:{port}/api"
        try:
            yield home
        finally:
            _PREFECT_API.clear()


STORE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}
"""The credentials the tests give `moto_server`, which accepts any."""


@pytest.fixture(scope="session")
def object_store(tmp_path_factory) -> dict:
    """An S3 endpoint for the session: `moto_server` (moto[server]: S3's protocol, in memory) on a free 127.0.0.1
    port, stopped at the end by its process group. Returns the variables that point a process at it, less
    `BINAC_STORE` (each test names its own bucket): `BINAC_STORE_ENDPOINT` and the credentials."""
    log = tmp_path_factory.mktemp("object-store") / "moto.log"
    port = _free_port()
    moto = str(Path(sys.executable).parent / "moto_server")
    with server_process([moto, "-H", "127.0.0.1", "-p", str(port)], f"http://127.0.0.1:{port}/moto-api/data.json", log):
        yield {"BINAC_STORE_ENDPOINT": f"http://127.0.0.1:{port}", **STORE_CREDENTIALS}


@pytest.fixture(scope="session")
def micro_compare(tmp_path_factory, prefect_home) -> dict:
    """One real `binac compare` of all nine methods on the micro preset (seed 0, a budget of 5 GRPO iterations:
    80 actor training samples, one iteration of every method trained on its second turn (48 each), 5 of grpo and
    critic_only), shared by the tests that inspect a filled store."""
    home = tmp_path_factory.mktemp("binac-home-compare")
    env = binac_env(home, prefect_home)
    proc = run_binac(["compare", "--preset", "micro", "--methods", ALL_METHODS, "--seeds", "0", "--steps", "5"], env)
    return {"home": home, "env": env, "stdout": proc.stdout}


@pytest.fixture(scope="session")
def micro_base(micro_compare) -> Path:
    """The micro base model folder the comparison built (in the session's model cache)."""
    from binac_core.foundation.config import load_config

    folder = MODEL_CACHE / f"base-{load_config('micro').base_digest()}"
    assert (folder / "config.json").exists(), folder
    return folder


# --- Shared by test_sql, test_reliability, test_deployment, test_study ---


def home_with_micro_base(tmp_path_factory, name: str, micro_compare: dict) -> Path:
    """A fresh $BINAC_HOME whose runs skip pretraining: they find the micro base model that `micro_compare` built
    in the shared BINAC_MODEL_CACHE (binac_env), or, where it was built inside its workspace, in a copy here."""
    home = tmp_path_factory.mktemp(name)
    if (micro_compare["home"] / "models").exists():
        shutil.copytree(micro_compare["home"] / "models", home / "models")
    return home


def serve_env(home: Path, micro_compare: dict, **extra: str) -> dict:
    """Environment for `scripts/serve.py start` over the workspace `home` (test_deployment, test_study): free ports
    for its Prefect and MLflow servers, workers that poll every second, no outer server's address, and the model
    cache where `micro_compare` built the micro base model; `extra` adds variables."""
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "MLFLOW_TRACKING_URI")}
    env.update(
        BINAC_HOME=str(home),
        BINAC_PREFECT_PORT="0",
        BINAC_MLFLOW_PORT="0",
        HF_HUB_OFFLINE="1",
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_WORKER_QUERY_SECONDS="1",
        **extra,
    )
    if micro_compare["env"].get("BINAC_MODEL_CACHE"):  # the workers' runs find the micro base model there
        env["BINAC_MODEL_CACHE"] = micro_compare["env"]["BINAC_MODEL_CACHE"]
    return env


def trajectory_rows(home: Path, where: str = "TRUE", exclude: tuple[str, ...] = ("run_id", "created_at")) -> list:
    """The stored trajectory rows of a workspace (those matching `where`) as a sorted list of tuples, without
    the `exclude` columns (a multiset: a duplicated row shows up twice)."""
    import pandas as pd

    from binac_core.foundation.workspace import Workspace
    from binac_core.store import sqlrun
    from binac_core.store.storage import columns

    cols = [c for c in columns() if c not in exclude]
    df = sqlrun.run(Workspace(home), f"SELECT {', '.join(cols)} FROM trajectories WHERE {where}")
    rows = [tuple(None if pd.isna(v) else v for v in row) for row in df.itertuples(index=False)]  # NULL -> None
    return sorted(rows, key=repr)


@pytest.fixture(autouse=True)
def _sandbox_accepts_what_works_here(monkeypatch):
    """In-process tests grade code in whatever isolation works on this machine: where bwrap does not, the process
    accepts the rlimits fallback (as `grading.sandbox: rlimits` would), and the tests that need bwrap skip, saying
    so. Restored after each test, so a flow's `accept` leaks into no other test."""
    from binac_core.grading.sandbox.isolation import ACCEPTED, SandboxError, isolation

    try:
        works = isolation()
    except SandboxError:  # no sandbox interpreter at all: the sandbox tests fail on that, named
        works = "bwrap"
    monkeypatch.setitem(ACCEPTED, "mode", "bwrap" if works == "bwrap" else "rlimits")


@pytest.fixture(autouse=True)
def _prefect_settings_stay_in_their_test():
    """Prefect's settings in the environment (`PREFECT_*`) as they were before each test. An in-process
    `flows.cli.main` (tests/foundation/test_config_reference.py) runs `_env_defaults`, which sets Prefect's result storage
    to `$BINAC_HOME/prefect` (here the repository's `.binac`) with `setdefault`, out of monkeypatch's reach; left
    set, every later test of that pytest process and every subprocess it starts with `dict(os.environ)` shared one
    cache (tests/bench/test_bench.py's pipeline children did, when pytest-xdist ran both files in one worker).
    Only `PREFECT_*`: libraries set other variables at import (KMP_*, TORCHINDUCTOR_CACHE_DIR) and rely on them."""
    before = {k: v for k, v in os.environ.items() if k.startswith("PREFECT_")}
    yield
    for key in [k for k in os.environ if k.startswith("PREFECT_") and k not in before]:
        del os.environ[key]
    os.environ.update(before)


SYSTEM_TOOLS = {
    "bwrap": ("a working bubblewrap", "apt-get install bubblewrap"),
    "chromium": ("Debian's chromium", "apt-get install chromium"),
    "namespaces": (
        "root, with util-linux's unshare making mount, pid and UTS namespaces",
        "sudo; apt-get install util-linux",
    ),
}
"""The system tools some tests need (`@pytest.mark.needs_tool(name)`): what is needed, and its install command."""
REQUIRE_SYSTEM_TOOLS = os.environ.get("BINAC_REQUIRE_SYSTEM_TOOLS") == "1"
"""CI's switch (.ci/run): a missing system tool fails its tests instead of skipping them, so CI runs everything."""


def tool_works(name: str) -> bool:
    """Whether system tool `name` (SYSTEM_TOOLS) works here: bwrap as the sandbox's probe finds it (it can be
    installed and still refused by the kernel), chromium on the PATH, namespaces as `unshare` makes them (the lab
    proof's hosts, tests/integration/lab_hosts.py)."""
    if name == "namespaces":
        argv = ["unshare", "--mount", "--pid", "--uts", "--fork", "--kill-child", "true"]
        try:
            return subprocess.run(argv, capture_output=True, timeout=30).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False
    if name == "bwrap":
        from binac_core.grading.sandbox.isolation import SandboxError, isolation

        try:
            return isolation() == "bwrap"
        except SandboxError:
            return False
    return bool(shutil.which("chromium") or shutil.which("chromium-browser"))


def pytest_runtest_setup(item):
    """A test marked `needs_tool(name)` skips with one line naming the tool and its install command where the
    tool does not work; with BINAC_REQUIRE_SYSTEM_TOOLS=1 it fails instead."""
    for mark in item.iter_markers("needs_tool"):
        name = mark.args[0]
        if not tool_works(name):
            what, install = SYSTEM_TOOLS[name]
            line = f"needs {what} (`{install}`)"
            if REQUIRE_SYSTEM_TOOLS:
                pytest.fail(f"{line}: BINAC_REQUIRE_SYSTEM_TOOLS=1 requires it", pytrace=False)
            pytest.skip(line)


SLOW_FIXTURES = {"prefect_home", "micro_compare", "micro_base", "object_store"}
"""Fixtures that start a real server or run `binac` subprocesses: a test that uses one (directly or through
another fixture) is an integration test wherever it lives."""


def pytest_collection_modifyitems(config, items):
    """Mark `integration` every test in tests/integration/ and every test that uses a slow fixture, so that
    `make test-fast` (`-m "not integration and not vllm"`) leaves out exactly the slow ones."""
    for item in items:
        if "integration" in item.path.parts or SLOW_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.integration)
