"""The test session cleans up after itself: a pytest process removes the temporary model cache it made (the smol
model's conversion alone is ~0.5 GB) when it exits, and a passing test's tmp_path is removed when the test ends
while a failing one's is kept (pyproject.toml's `tmp_path_retention_policy`)."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import REPO

PRINT_CACHE = "import conftest, sys; (conftest.MODEL_CACHE / 'base').mkdir(); print(conftest.MODEL_CACHE)"


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "BINAC_TEST_MODEL_CACHE"}
    return env | {"PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")])} | extra


def test_a_process_removes_its_temporary_model_cache_on_exit():
    out = subprocess.run([sys.executable, "-c", PRINT_CACHE], env=_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    folder = out.stdout.strip()
    assert "binac-models-" in folder and not os.path.exists(folder)


def test_a_named_model_cache_is_kept(tmp_path):
    named = tmp_path / "models"
    named.mkdir()
    env = _env(BINAC_TEST_MODEL_CACHE=str(named))
    out = subprocess.run([sys.executable, "-c", PRINT_CACHE], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == str(named) and (named / "base").is_dir()


def test_a_passing_tests_tmp_path_goes_and_a_failing_ones_stays(tmp_path):
    """Two tests under the repository's pytest settings: the passing one's folder is gone after the session, the
    failing one's is there."""
    (tmp_path / "test_two.py").write_text(
        "def test_passes(tmp_path):\n    (tmp_path / 'f').write_text('x')\n\n"
        "def test_fails(tmp_path):\n    (tmp_path / 'f').write_text('x')\n    assert False\n"
    )
    base = tmp_path / "base"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(REPO / "pyproject.toml")]
    cmd += ["--rootdir", str(tmp_path), "--basetemp", str(base), str(tmp_path / "test_two.py")]
    out = subprocess.run(cmd, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert "1 failed, 1 passed" in out.stdout, out.stdout[-2000:]
    assert sorted(p.name for p in base.iterdir() if not p.is_symlink()) == ["test_fails0"]
