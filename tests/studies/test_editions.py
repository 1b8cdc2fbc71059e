"""Study editions (binac_core/studies/editions.py): a study file names its edition, a module beside it or in
studies/editions/, whose `section` the report prints; a new edition adds files only; an unknown name stops
`load_study` with one line; the default edition leaves the study's key as it was."""

import pytest
import yaml

from binac_core.errors import BinacError
from binac_core.studies import editions
from binac_core.studies.study import load_study
from binac_core.studies.study_report import build_study_report
from tests.studies.test_study_report import MEASURED, SIZES, _run

EDITION = '''"""A test edition: one line."""

from binac_core.studies.verdicts import NO_DATA


def section(st, done, totals):
    return ["## Hypotheses", "", f"Test edition: {len(done)} finished runs of {st.name}; {NO_DATA}.", ""]
'''


def _write(folder, hypotheses=None, name="edition-test"):
    raw = {
        "name": name,
        "preset": "micro",
        "iterations": 2,
        "eval_every": 1,
        "methods": ["grpo"],
        "seeds": [0],
        "regimes": {"sparse": {"difficulty": 2}},
        "overrides": SIZES,
    }
    if hypotheses is not None:
        raw["hypotheses"] = hypotheses
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_a_new_edition_beside_the_study_file_writes_the_reports_hypotheses(tmp_path):
    (tmp_path / "editions").mkdir()
    (tmp_path / "editions" / "tenth_edition.py").write_text(EDITION)
    st = load_study(_write(tmp_path, "tenth_edition"))
    assert st.hypotheses == "tenth_edition"
    runs = [_run("grpo", 0, "sparse")]
    text = build_study_report(st, MEASURED, {"sparse": 2}, [], runs, tmp_path / "out")["text"]
    assert "Test edition: 1 finished runs of edition-test; inconclusive (no data)." in text.splitlines()


def test_the_repositorys_editions_are_found_from_any_folder(tmp_path):
    for name in ("second_edition", "third_edition", "fourth_edition"):
        assert load_study(_write(tmp_path, name)).hypotheses == name
    assert {"second_edition", "third_edition", "fourth_edition"} <= set(editions.known(tmp_path))


def test_an_edition_beside_the_study_file_comes_before_the_repositorys(tmp_path):
    (tmp_path / "editions").mkdir()
    (tmp_path / "editions" / "third_edition.py").write_text(EDITION)
    st = load_study(_write(tmp_path, "third_edition"))
    assert editions.section(st, [], {})[2].startswith("Test edition")


def test_an_unknown_edition_stops_load_study_naming_the_folders_searched(tmp_path):
    with pytest.raises(BinacError, match="hypotheses: no edition 'ninth_edition'") as e:
        load_study(_write(tmp_path, "ninth_edition"))
    assert str(tmp_path / "editions") in str(e.value) and str(editions.REPO_EDITIONS) in str(e.value)
    assert "\n" not in str(e.value) and "known: fourth_edition, second_edition, third_edition" in str(e.value)
    with pytest.raises(BinacError, match="no edition '../second_edition'"):
        load_study(_write(tmp_path, "../second_edition"))


def test_an_edition_without_a_section_stops_load_study(tmp_path):
    (tmp_path / "editions").mkdir()
    (tmp_path / "editions" / "empty_edition.py").write_text('"""No section."""\n')
    with pytest.raises(BinacError, match="empty_edition.py: defines no section"):
        load_study(_write(tmp_path, "empty_edition"))


def test_the_default_edition_is_the_second_and_leaves_the_key_as_without_the_key(tmp_path):
    plain = load_study(_write(tmp_path))
    assert plain.hypotheses == editions.DEFAULT == "second_edition"
    assert load_study(_write(tmp_path, "second_edition")).key() == plain.key()
    assert load_study(_write(tmp_path, "third_edition")).key() != plain.key()


@pytest.mark.parametrize("edition", ["second_edition", "third_edition"])
def test_an_exploration_tests_no_hypothesis_in_the_editions_without_variants(tmp_path, edition):
    path = _write(tmp_path, edition)
    raw = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**raw, "variants": {"grpo": {"a": {"train.actor_lr": 0.001}}}}))
    lines = editions.section(load_study(path), [], {})
    assert lines[2] == "Not tested: an exploration (variants without a selection metric, and no hypotheses of its own)."
