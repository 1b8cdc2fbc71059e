"""A run keeps its base's weights (`binac_core/runs/bases.py`): a resumed run, a study whose runs recorded other
base weights (in the store or its archive), or a restore onto another base refuses in one line naming both hashes,
and `binac train`, `binac compare` and `binac study` say so before any compute. No model is built or trained here:
the bases are folders of hand-written bytes whose hashes are known (sha256 of b"abc" and of nothing)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from binac_core.errors import BinacError
from binac_core.foundation.config import load_config
from binac_core.foundation.provenance import stage_code_digest
from binac_core.foundation.workspace import Workspace
from binac_core.model import weights
from binac_core.model.base_model import ARCHITECTURE
from binac_core.runs import bases
from binac_core.runs.plans import compare_key, train_run_key
from binac_core.store import archive, tracking
from binac_core.studies.study import load_study
from flows import cli

REPO = Path(__file__).resolve().parents[2]
ABC = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
"""sha256 of b"abc"."""
EMPTY = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
"""sha256 of no bytes."""


@pytest.fixture
def ws(tmp_path, monkeypatch) -> Workspace:
    home = tmp_path / "home"
    home.mkdir()
    for name in ("MLFLOW_TRACKING_URI", "BINAC_MODEL_CACHE", weights.SEARCH_PATH_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("BINAC_HOME", str(home))
    monkeypatch.setattr(weights, "_MEMO", {})
    return Workspace(home)


@pytest.fixture
def binac(monkeypatch, capsys):
    """`binac ARGS` in this process, (exit status, stdout, stderr); any flow it reached fails the test."""
    import flows.compare
    import flows.study
    import flows.train

    monkeypatch.setattr(cli, "_env_defaults", lambda: None)

    def no_compute(*args, **kwargs):
        raise AssertionError("a flow started: the check did not come before compute")

    for module, name in ((flows.train, "train"), (flows.compare, "compare"), (flows.study, "study")):
        monkeypatch.setattr(module, name, no_compute)

    def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()  # what the test's own setup printed (MLflow creating its store) is not the command's
        rc = cli.main(list(argv))
        out = capsys.readouterr()
        return rc, out.out, out.err

    return run


def _base(folder: Path, cfg, data: bytes) -> Path:
    """A base folder holding `data` as its weights, its config.json describing `cfg`'s model section."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.safetensors").write_bytes(data)
    (folder / "config.json").write_text(json.dumps({k: getattr(cfg.model, f) for f, k in ARCHITECTURE.items()}))
    return folder


def _run(ws: Workspace, key: str, digest: str | None) -> str:
    params = {"seed": "0", **({weights.PARAM: digest} if digest else {})}
    return tracking.find_or_create_run(ws, key, f"run-{key}", {}, params)


def test_a_run_that_recorded_other_weights_refuses_naming_both(ws):
    _run(ws, "k1", EMPTY)
    _run(ws, "k2", None)  # ran before runs recorded their base: not checked
    bases.check_run(ws, "k1", EMPTY, "run a")
    bases.check_run(ws, "k2", ABC, "run b")
    bases.check_run(ws, "k3", ABC, "run c")  # no such run: nothing to resume
    with pytest.raises(BinacError) as err:
        bases.check_run(ws, "k1", ABC, "run a (k1)")
    line = str(err.value)
    assert "\n" not in line
    assert line.startswith(f"run a (k1) ran on base weights sha256 {EMPTY}, but this base's weights are {ABC}; ")
    assert "--fresh" in line


def test_reading_the_records_creates_no_store(ws):
    assert tracking.recorded_params(ws, ["k1"], weights.PARAM) == {}
    assert not (ws.home / "mlflow.db").exists()


def test_a_study_refuses_when_any_run_in_the_store_or_the_archive_ran_on_other_weights(ws, tmp_path):
    _run(ws, "k1", ABC)
    folder = tmp_path / "archive"
    for key, digest in (("k2", EMPTY), ("k3", EMPTY), ("k4", ABC)):
        (archive.run_folder(folder, key)).mkdir(parents=True)
        (archive.run_folder(folder, key) / "run.json").write_text(json.dumps({"params": {weights.PARAM: digest}}))
    names = {"k1": "grpo-s0", "k2": "binac-s0", "k3": "binac-s1", "k4": "grpo-s1"}
    bases.check_runs(ws, ["k1", "k4"], names, ABC, folder)
    bases.check_runs(ws, ["k1", "k2"], names, ABC, None)  # without the archive, k2 is no run of the study's yet
    with pytest.raises(BinacError) as err:
        bases.check_runs(ws, list(names), names, ABC, folder)
    line = str(err.value)
    assert line.startswith(
        f"run binac-s0 (k2) (and 1 more run(s)) ran on base weights sha256 {EMPTY}, but this base's weights are {ABC}"
    )
    assert "\n" not in line


def test_binac_train_refuses_a_resume_on_other_base_weights_in_one_line_before_any_compute(ws, binac):
    cfg = load_config("micro")
    _base(ws.base_model_dir(cfg.base_digest()), cfg, b"abc")  # the base there now (rebuilt, another machine)
    key = train_run_key(cfg, "grpo", 0, 1, "", stage_code_digest(), "")
    _run(ws, key, EMPTY)  # the run started on other weights
    rc, out, err = binac("train", "--preset", "micro", "--method", "grpo", "--steps", "1")
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(
        f"error: run grpo-micro-s0 ({key}) ran on base weights sha256 {EMPTY}, but this base's weights are {ABC}; "
    ), err


def test_binac_compare_checks_every_run_it_would_resume(ws, binac):
    cfg = load_config("micro")
    _base(ws.base_model_dir(cfg.base_digest()), cfg, b"abc")
    methods, seeds = ["grpo", "binac"], [0, 1]
    key = compare_key(cfg, methods, seeds, 6, stage_code_digest(), "")
    binac_iterations = 2  # a budget of 6 grpo iterations (96 actor training samples) fits 2 of binac's (48 each)
    run = train_run_key(cfg, "binac", 1, binac_iterations, key, stage_code_digest(), "")
    _run(ws, run, EMPTY)
    rc, _, err = binac("compare", "--preset", "micro", "--methods", "grpo,binac", "--seeds", "0,1", "--steps", "6")
    assert rc == 2 and f"error: run binac-micro-s1 ({run}) ran on base weights sha256 {EMPTY}" in err, err


def test_a_base_named_by_weights_that_is_nowhere_is_one_line_before_any_compute(ws, binac):
    rc, out, err = binac("train", "--preset", "micro", "--steps", "1", "--set", "model.base_weights=deadbeef")
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert err.startswith(f"error: no base model with weights sha256 deadbeef in {ws.models_root}"), err


def test_binac_study_refuses_an_archive_whose_base_the_store_holds_with_other_weights(ws, binac, tmp_path):
    st = load_study(REPO / "studies" / "micro-smoke.yaml")
    cfg, folder = st.config(), tmp_path / "archive"
    name = f"base-{cfg.base_digest()}"
    archive.export_model(folder, _base(tmp_path / "elsewhere" / name, cfg, b"abc"), ABC)
    _base(ws.models_root / name, cfg, b"")
    rc, out, err = binac("study", str(st.path), "--report-only", "--archive", str(folder))
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert f"its base {name} has weights sha256 {ABC}, but the store's" in err and f"has {EMPTY}" in err, err


def test_binac_study_refuses_a_base_other_than_its_parent_runs(ws, binac):
    st = load_study(REPO / "studies" / "micro-smoke.yaml")
    cfg = st.config()
    _base(ws.base_model_dir(cfg.base_digest()), cfg, b"abc")
    _run(ws, f"study-{st.key()}", EMPTY)
    rc, _, err = binac("study", str(st.path), "--report-only")
    assert rc == 2 and err.startswith(
        f"error: study micro-smoke (study-{st.key()}) ran on base weights sha256 {EMPTY}, but this base's weights "
        f"are {ABC}; a study's runs share one base"
    ), err


def test_a_digest_of_digits_stays_text_on_the_command_line_and_a_bare_one_in_yaml_is_named():
    assert cli._overrides(["model.base_weights=00000012", "model.hub_id=null", "task.data_seed=7"]) == {
        "model.base_weights": "00000012",
        "model.hub_id": None,
        "task.data_seed": 7,
    }
    with pytest.raises(BinacError, match=r"model\.base_weights: .*quote it in YAML \(a bare 12 reads as a number\)"):
        load_config("micro", {"model.base_weights": 12})
