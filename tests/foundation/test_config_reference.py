"""The configuration reference (binac_core/foundation/config_reference.py): `binac config`, `binac train --help-config`
and docs/config.md, all read from the typed config."""

from conftest import REPO

from binac_core.foundation.config import load_config
from binac_core.foundation.config_reference import markdown, rows, sections, terminal
from flows.cli import main


def test_docs_config_md_is_the_generated_reference():
    assert (REPO / "docs" / "config.md").read_text() == markdown(), (
        "regenerate: binac config --markdown > docs/config.md"
    )


def test_every_field_of_every_section_is_in_the_reference_with_its_docstring():
    fields = [(s, n) for s, kind in sections().items() for n in kind.model_fields]
    listed = rows()
    assert [(s, n) for s, n, *_ in listed] == fields and len(fields) > 60
    assert all(doc for *_, doc in listed), "every field has a docstring"
    page = markdown()
    assert all(f"| `{s}.{n}` |" in page for s, n in fields) and "## `train`" in page


def test_a_presets_values_and_overrides_are_shown_beside_the_defaults(capsys):
    assert main(["config", "--preset", "micro", "--set", "train.actor_lr=0.01"]) == 0
    out = capsys.readouterr().out
    assert "  train.actor_lr = 0.01   (default 0.002)" in out
    assert "  task.difficulty = 2   (default 4)" in out and "      AdamW learning rate of the actor adapter." in out
    assert out == terminal(load_config("micro", {"train.actor_lr": 0.01}))


def test_train_help_config_prints_the_reference_and_runs_nothing(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("BINAC_HOME", str(tmp_path / "home"))
    assert main(["train", "--preset", "testbed", "--help-config"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("config of preset 'testbed'") and "task.carry_error_rate = 0.6   (default 0.0)" in out
    home = tmp_path / "home"
    assert not (home / "models").exists() and not (home / "runs").exists() and not (home / "mlflow.db").exists()


def test_a_bad_preset_or_field_is_one_line(capsys):
    assert main(["config", "--preset", "nope"]) == 2
    assert main(["config", "--set", "train.nope=1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "unknown preset 'nope'" in err[0] and "train.nope" in err[1]
