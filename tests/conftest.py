"""Shared test setup. BINAC_DATA_DIR defaults to ../shared/data beside the repository, as in the Makefile."""

import os
from pathlib import Path

os.environ.setdefault("BINAC_DATA_DIR", str(Path(__file__).resolve().parents[2] / "shared" / "data"))

import subprocess  # noqa: E402
import sys  # noqa: E402

import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ALL_METHODS = "grpo,fixed_critic,binac,critic_only,self_correct"


def binac_env(home: Path, prefect_home: Path) -> dict:
    """Environment for a `binac` subprocess with its own workspace."""
    env = dict(os.environ)
    env.update(BINAC_HOME=str(home), PREFECT_HOME=str(prefect_home), HF_HUB_OFFLINE="1",
               PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="90",
               TOKENIZERS_PARALLELISM="false")
    env.pop("PREFECT_API_URL", None)
    env.pop("MLFLOW_TRACKING_URI", None)
    return env


def run_binac(args: list[str], env: dict, timeout: int = 600, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "flows.cli", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"binac {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n"
                             f"{proc.stderr[-3000:]}")
    return proc


@pytest.fixture(scope="session")
def prefect_home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("prefect-home")


@pytest.fixture(scope="session")
def micro_compare(tmp_path_factory, prefect_home) -> dict:
    """One real `binac compare` of all five methods on the micro preset (seed 0, 2 GRPO iterations of budget),
    shared by the tests that inspect a filled store."""
    home = tmp_path_factory.mktemp("binac-home-compare")
    env = binac_env(home, prefect_home)
    proc = run_binac(["compare", "--preset", "micro", "--methods", ALL_METHODS, "--seeds", "0", "--steps", "2"], env)
    return {"home": home, "env": env, "stdout": proc.stdout}
