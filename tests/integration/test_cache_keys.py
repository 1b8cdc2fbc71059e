"""Cached stages never outlive the code that computed them: an edit to `binac_core` recomputes the stages of the
next run (a real `binac train` on micro, in a temporary copy of the project), `--fresh` recomputes without an
edit, and the library digests change exactly when the files they cover do. No cache record points at a deleted
base model folder: the next run builds it again."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, binac_env, home_with_micro_base, run_binac

from binac_core.foundation.provenance import module_closure
from binac_core.foundation.workspace import Workspace
from binac_core.store import tracking

pytestmark = pytest.mark.integration
ARGS = ["train", "--preset", "micro", "--method", "grpo", "--steps", "1", "--seed", "0"]


def copy_project(dest: Path) -> Path:
    for folder in ("binac_core", "tasks", "flows", "sql"):
        shutil.copytree(REPO / folder, dest / folder, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def binac_in(project: Path, args: list[str], env: dict) -> subprocess.CompletedProcess:
    """`binac` run from `project` (its own packages first on sys.path, ahead of the installed checkout)."""
    proc = subprocess.run(
        [sys.executable, "-m", "flows.cli", *args], cwd=project, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def mtimes(home: Path) -> dict[str, int]:
    """Modification time of every stage output and data file of the workspace."""
    files = [*(home / "runs").rglob("*.json"), *(home / "data").rglob("*.json")]
    return {str(p.relative_to(home)): p.stat().st_mtime_ns for p in files}


def runs_of(home: Path):
    ws = Workspace(home)
    c = tracking.client(ws)
    return sorted(c.search_runs([tracking.experiment_id(c, ws)]), key=lambda r: r.info.start_time)


def digest_in(project: Path, expr: str) -> str:
    code = f"from binac_core.foundation import provenance as p; print({expr})"
    return subprocess.run(
        [sys.executable, "-c", code], cwd=project, capture_output=True, text=True, check=True
    ).stdout.strip()


def test_a_library_edit_recomputes_every_stage_and_fresh_recomputes_without_one(
    tmp_path, tmp_path_factory, prefect_home, micro_compare
):
    project = copy_project(tmp_path / "project")
    home = home_with_micro_base(tmp_path_factory, "binac-home-cache", micro_compare)
    env = binac_env(home, prefect_home)
    env.pop("PYTHONPATH", None)

    binac_in(
        project, ARGS, env
    )  # (that the same command again is served from the cache: tests/integration/test_train.py)
    first = mtimes(home)
    assert len(runs_of(home)) == 1

    move_a_function_between_subpackages(project)  # a library change no task's source shows
    binac_in(project, ARGS, env)
    after_edit = mtimes(home)
    assert all(after_edit[f] == t for f, t in first.items() if f.startswith("runs/")), "old results kept"
    data = [f for f in first if f.startswith("data/")]
    assert data and all(after_edit[f] != first[f] for f in data), "prepare-data recomputed (same inputs)"
    new = [f for f in after_edit if f not in first]
    assert any("/step-00001/attempts.json" in f for f in new), "the new run generated its rollouts again"
    runs = runs_of(home)
    assert (
        len(runs) == 2
        and runs[0].data.params["code.stage_code_digest"] != runs[1].data.params["code.stage_code_digest"]
    )

    binac_in(project, [*ARGS, "--fresh"], env)  # no edit: --fresh recomputes anyway
    fresh = mtimes(home)
    assert any("/step-00001/attempts.json" in f for f in set(fresh) - set(after_edit))
    assert all(fresh[f] != after_edit[f] for f in data)
    assert len(runs_of(home)) == 3


def test_a_deleted_base_model_folder_is_built_again_by_the_next_run(tmp_path, prefect_home):
    """A user cleans `$BINAC_HOME/models` between two runs of the micro preset in one home (one set of Prefect
    cache records): the second run, whose actor and critic start from the base model (another seed), builds the
    base folder again instead of being handed the deleted path by a cache record."""
    home = tmp_path / "home"
    env = binac_env(home, prefect_home)
    env.pop("BINAC_MODEL_CACHE")  # the base model inside this home, where a user would delete it
    run_binac(ARGS, env)
    (base,) = (home / "models").glob("base-*")
    assert (base / "config.json").is_file()
    shutil.rmtree(home / "models")
    proc = run_binac([*ARGS[:-1], "1"], env)  # seed 1: init-adapters loads the base model
    assert "iteration 1/1" in proc.stdout + proc.stderr
    assert (base / "config.json").is_file(), "the base model folder was built again"


def move_a_function_between_subpackages(project: Path) -> None:
    """Move `k3_kl` (the KL estimate the actor update uses) from `binac_core/rl/losses.py` into a new module of
    another subpackage, `binac_core/reports/kl.py`, which `losses.py` then imports it from: the same code, in a
    file no stage imported before."""
    losses = project / "binac_core" / "rl" / "losses.py"
    text = losses.read_text()
    start = text.index("def k3_kl(")
    end = text.index("\ndef ", start + 1)
    function = text[start:end].rstrip() + "\n"
    (project / "binac_core" / "reports" / "kl.py").write_text(
        '"""The k3 KL estimate (moved here by a test)."""\n\nimport torch  # noqa: F401\n\n\n' + function
    )
    text = text[:start] + text[end + 1 :].lstrip("\n")
    losses.write_text(text.replace("import torch\n", "import torch\n\nfrom binac_core.reports.kl import k3_kl\n", 1))


def test_a_function_moved_between_subpackages_changes_the_stage_code_digest(tmp_path):
    project = copy_project(tmp_path / "project")
    before = digest_in(project, "p.stage_code_digest()")
    assert "binac_core.reports.kl" not in digest_in(project, "sorted(p.module_closure('binac_core.rl.losses'))")
    move_a_function_between_subpackages(project)
    assert "binac_core.reports.kl" in digest_in(project, "sorted(p.module_closure('binac_core.rl.losses'))")
    assert digest_in(project, "p.stage_code_digest()") != before
    moved = digest_in(project, "p.stage_code_digest()")
    kl = project / "binac_core" / "reports" / "kl.py"  # the moved function's new file is followed: editing it
    kl.write_text(kl.read_text() + "\n# edited\n")  # changes the digest again
    assert digest_in(project, "p.stage_code_digest()") != moved


def test_stage_code_digests_follow_the_files_they_cover(tmp_path):
    project = copy_project(tmp_path / "project")
    before = json.loads(
        digest_in(
            project, "__import__('json').dumps([p.stage_code_digest(), p.module_digest('binac_core.model.pretrain')])"
        )
    )
    losses = project / "binac_core" / "rl" / "losses.py"
    losses.write_text(losses.read_text() + "\n# edited\n")
    after_loss = json.loads(
        digest_in(
            project, "__import__('json').dumps([p.stage_code_digest(), p.module_digest('binac_core.model.pretrain')])"
        )
    )
    assert after_loss[0] != before[0], "an edit to a module a stage imports changes the stage code digest"
    assert after_loss[1] == before[1], "a loss is not part of pretraining: the base model is kept"
    report = project / "binac_core" / "studies" / "study_report.py"  # imported by flows only: computes no stage
    report.write_text(report.read_text() + "\n# edited\n")
    assert digest_in(project, "p.stage_code_digest()") == after_loss[0]
    helpers = project / "tasks" / "_common.py"  # the stages' own helpers count, not only the task sources
    helpers.write_text(helpers.read_text() + "\n# edited\n")
    assert digest_in(project, "p.stage_code_digest()") != after_loss[0]
    tok = project / "binac_core" / "model" / "tokenizer.py"
    tok.write_text(tok.read_text() + "\n# edited\n")
    assert digest_in(project, "p.module_digest('binac_core.model.pretrain')") != after_loss[1]


def test_module_closure_follows_imports_transitively():
    closure = module_closure("binac_core.model.pretrain")
    assert {
        "binac_core.model.pretrain",
        "binac_core.model.tokenizer",
        "binac_core.foundation.config",
        "binac_core.errors",
    } <= closure
    assert "binac_core.rl.losses" not in closure and "binac_core.rl.update" not in closure
    assert module_closure("binac_core.errors") == {"binac_core", "binac_core.errors"}


KEY_OF_A_STAGE = """
from types import SimpleNamespace
from binac_core.foundation.config import load_config
from binac_core.foundation.files import StageFile
from binac_core.foundation.provenance import LIBRARY
from binac_core.foundation.workspace import workspace
from binac_core.model.stage_io import AdapterRef, AdapterRole
from tasks.rollout import rollout_task
ws = workspace()
inputs = dict(
    cfg_d=load_config("micro").model_dump(mode="json"),
    base=StageFile(str(LIBRARY / "presets" / "bases" / "testbed"), "3ba757d6"),
    train=StageFile(str(ws.problems_dir("synthetic", "d1") / "train.json"), "77aa77aa77aa77aa"),
    actor=AdapterRef(AdapterRole.ACTOR, str(ws.run_dir("init-k-s0") / "actor"), "c0ffee00c0ffee00"),
    seed=0,
    step=1,
    out_dir=str(ws.run_dir("grpo-s0-k") / "step-00001"),
)
print(LIBRARY, rollout_task.cache_policy.compute_key(task_ctx=SimpleNamespace(task=rollout_task), inputs=inputs, flow_parameters={}))
"""


def test_the_same_stage_from_two_checkouts_under_two_homes_has_one_cache_key(tmp_path):
    """Two copies of the code at two paths, each with its own `$BINAC_HOME` (and a base the package ships, found
    under each checkout): one cache key, the stage code digest and the task's source included."""
    seen = []
    for name in ("host-a/src/binac", "host-b/checkout"):
        project = copy_project(tmp_path / name)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "BINAC_MODEL_CACHE")}
        env["BINAC_HOME"] = str(tmp_path / name / "home")
        out = subprocess.run(
            [sys.executable, "-c", KEY_OF_A_STAGE], cwd=project, env=env, capture_output=True, text=True, check=True
        )
        library, key = out.stdout.split()
        assert library == str(project / "binac_core"), "each copy ran its own code"
        seen.append(key)
    assert seen[0] != "None" and seen[0] == seen[1]
