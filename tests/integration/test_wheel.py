"""The package as users get it: a wheel built from the repository, installed into a fresh venv, runs `binac`.

The wheel is built without its dependencies (`pip wheel --no-deps`) and installed `--no-deps` into a new venv
whose only other path is the project venv's site-packages (a `.pth` line: the pinned torch, transformers, prefect...
without downloading them again). Nothing of the checkout is importable there: the commands run from a temporary
folder, and the project venv's editable install of binac is not active (`.pth` files of a folder added by a `.pth`
line are not processed), so `binac_core` can only come from the wheel; the test checks that it does. A module, a
subpackage or a data file (presets, SQL) missing from the wheel fails here: the schema and the queries live in the
repository's top-level `sql/` and ship inside the package as `binac_core/sql/` (setup.py).
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from conftest import REPO, binac_env

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("wheel")
    src, wheels = work / "src", work / "wheels"  # built from a copy: a build leaves build/ and *.egg-info behind
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(".venv", ".git", ".binac", "build", "*.egg-info"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels), str(src)],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    purelib = subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    deps = [p for p in {sysconfig.get_paths()["purelib"], *site.getsitepackages()} if Path(p).is_dir()]
    (Path(purelib) / "binac-deps.pth").write_text("\n".join(deps) + "\n")
    (whl,) = wheels.glob("binac-*.whl")
    subprocess.run(
        [py, "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(whl)],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return venv


def _run(venv: Path, args: list[str], env: dict, cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [str(venv / "bin" / args[0]), *args[1:]], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_the_wheel_holds_every_subpackage_and_data_file(wheel_venv, tmp_path):
    code = (
        "import binac_core, binac_core.benchmarks, binac_core.foundation.config as c, binac_core.store.sqlrun as s;"
        "from binac_core.store import storage as st;"
        "print(binac_core.__file__); print(len(c.preset_names())); print(st.SCHEMA_SQL, st.SCHEMA_SQL.is_file());"
        "print(','.join(sorted(p.name for p in s.QUERY_DIR.glob('*.sql'))))"
    )
    proc = _run(wheel_venv, ["python", "-c", code], dict(os.environ), tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    where, presets, schema, schema_found, queries = proc.stdout.split()
    assert str(wheel_venv) in where and str(REPO) not in where  # from the wheel, not the checkout
    assert int(presets) == len(list((REPO / "binac_core" / "presets").glob("*.yaml")))
    assert schema_found == "True" and str(wheel_venv) in schema and schema.endswith("binac_core/sql/schema.sql")
    assert queries == ",".join(sorted(p.name for p in (REPO / "sql").glob("*.sql")))  # every file of sql/


def test_binac_help_and_one_micro_iteration_from_the_wheel(wheel_venv, tmp_path, prefect_home):
    env = binac_env(tmp_path / "home", prefect_home)
    proc = _run(wheel_venv, ["binac", "--help"], env, tmp_path)
    assert proc.returncode == 0 and "train" in proc.stdout, proc.stderr[-2000:]
    proc = _run(wheel_venv, ["binac", "train", "--preset", "micro", "--steps", "1"], env, tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "iteration 1/1" in proc.stdout + proc.stderr
    out = _run(wheel_venv, ["binac", "sql", "method_summary.sql"], env, tmp_path)  # a packaged query, by name
    assert out.returncode == 0 and "grpo" in out.stdout, out.stderr[-2000:]
    out = _run(wheel_venv, ["binac", "sql", "feedback_search.sql", "--param", "query=answer"], env, tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
