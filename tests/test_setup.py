"""The test session cleans up after itself: a pytest process removes the temporary model cache it made (the smol
model's conversion alone is ~0.5 GB) when it exits, and those earlier sessions left behind when it starts; a
passing test's tmp_path is removed when the test ends while a failing one's is kept (pyproject.toml's
`tmp_path_retention_policy`)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from conftest import MODEL_CACHE_OWNER, MODEL_CACHE_PREFIX, REPO, remove_stale_model_caches

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


def test_the_caches_of_earlier_sessions_are_removed_and_live_ones_kept(tmp_path):
    """Removed: one whose owner process has exited, one with no owner untouched for two days. Kept: this process's,
    one with no owner touched now (a session between making it and recording its owner), another kind of folder."""
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    owners = {"dead": finished.stdout.strip(), "live": str(os.getpid()), "old": None, "new": None}
    for name, owner in owners.items():
        folder = tmp_path / f"{MODEL_CACHE_PREFIX}{name}"
        (folder / "base-x").mkdir(parents=True)
        if owner:
            (folder / MODEL_CACHE_OWNER).write_text(owner)
    two_days_ago = time.time() - 2 * 24 * 3600
    os.utime(tmp_path / f"{MODEL_CACHE_PREFIX}old", (two_days_ago, two_days_ago))
    (tmp_path / "other-old").mkdir()
    os.utime(tmp_path / "other-old", (two_days_ago, two_days_ago))
    removed = remove_stale_model_caches(tmp_path)
    assert [p.name for p in removed] == [f"{MODEL_CACHE_PREFIX}dead", f"{MODEL_CACHE_PREFIX}old"]
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == [f"{MODEL_CACHE_PREFIX}live", f"{MODEL_CACHE_PREFIX}new", "other-old"]


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
