"""The critic's curves in a study report (binac_core/studies/critic_curves.py) on hand-made runs: the bank tables
read the study's evaluation split, the frozen critic is one row over every run's seeds, reward information is
binned by iterations (a bin's value per run the mean of its iterations that have one), and a report without
either kind of metric gets no section. No model, no MLflow: run dicts as flows/study.py's `collect` returns."""

import math

import yaml
from PIL import Image

from binac_core.studies import critic_curves
from binac_core.studies.study import load_study


def _study(tmp_path, split="val"):
    raw = {
        "name": "curves-test",
        "preset": "micro",
        "iterations": 20,
        "eval_every": 10,
        "equal_samples_method": "binac",
        "methods": ["binac"],
        "seeds": [0, 1],
        "regimes": {"sparse": {"difficulty": 2}},
        "rule_measure": {"group_size": 8, "seed": 0},
        "overrides": {"task.eval_split": split},
        "variants": {"binac": {"reference": {}, "anchor": {"train.critic_kl_coef": 0.1}}},
    }
    path = tmp_path / "curves-test.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_study(path)


def _run(variant, seed, hits, frozen=0.2, spread=None):
    metrics = {
        "bank_val/critic_hits_first_error": {s: h for s, h in zip((0, 10, 20), hits, strict=True)},
        "bank_val/frozen_critic_hits_first_error": {s: frozen for s in (0, 10, 20)},
        "bank_eval/critic_hits_first_error": {s: 0.99 for s in (0, 10, 20)},
    }
    if spread is not None:
        metrics["train/critic_reward_spread"] = spread
    return {"method": "binac", "variant": variant, "seed": seed, "metrics": metrics, "finished": True}


def test_binned_means_each_bin_over_iterations_that_have_a_value():
    run = {"metrics": {"train/hint_value": {1: 0.2, 2: 0.4, 10: math.nan, 11: 0.1, 25: 0.5, 0: 9.0}}}
    assert critic_curves.binned(run, "hint_value") == {1: 0.30000000000000004, 11: 0.1, 21: 0.5}
    assert critic_curves.binned(run, "hint_value", size=5) == {1: 0.30000000000000004, 11: 0.1, 21: 0.5}
    assert critic_curves.binned(run, "absent") == {}


def test_bank_rows_per_arm_and_one_frozen_row_on_the_study_split(tmp_path):
    st = _study(tmp_path)
    rr = [
        _run("reference", 0, (0.2, 0.3, 0.1)),
        _run("reference", 1, (0.2, 0.5, 0.3)),
        _run("anchor", 0, (0.2, 0.4, 0.4)),
    ]
    rows = dict(
        critic_curves.bank_rows(st, rr, [("binac", "reference"), ("binac", "anchor")], "val", "hits_first_error")
    )
    assert rows["binac [reference]"] == {0: {0: 0.2, 1: 0.2}, 10: {0: 0.3, 1: 0.5}, 20: {0: 0.1, 1: 0.3}}
    assert rows["binac [anchor]"] == {0: {0: 0.2}, 10: {0: 0.4}, 20: {0: 0.4}}
    assert rows[critic_curves.FROZEN] == {0: {0: 0.2, 1: 0.2}, 10: {0: 0.2, 1: 0.2}, 20: {0: 0.2, 1: 0.2}}


def test_section_tables_and_plot(tmp_path):
    st = _study(tmp_path)
    spread = {1: 0.5, 2: 0.3, 11: 0.1, 12: 0.3}
    rr = [_run("reference", 0, (0.2, 0.3, 0.1), spread=spread), _run("reference", 1, (0.2, 0.5, 0.3), spread=spread)]
    lines, files = critic_curves.section(st, rr, [("binac", "reference"), ("binac", "anchor")], tmp_path, "sparse")
    text = "\n".join(lines)
    assert "(`val` split)" in text
    # iteration 10: seeds 0.3 and 0.5: mean 40.0, t half-width t(0.975, 1) x sd / sqrt(2) = 12.706 x 0.1 = 127.1
    # points; the seeds' values shown, as they span 20 points
    row = (
        "| binac [reference] | 20.0 ± 0.0 | 40.0 ± 127.1 (per seed: 30.0, 50.0) | 20.0 ± 127.1 (per seed: 10.0, 30.0) |"
    )
    assert row in text
    assert f"| {critic_curves.FROZEN} | 20.0 ± 0.0 | 20.0 ± 0.0 | 20.0 ± 0.0 |" in text
    # reward spread: bin 1 = mean(0.5, 0.3) = 0.4, bin 11 = mean(0.1, 0.3) = 0.2, the same on both seeds
    assert "| binac [reference] | 40.0 ± 0.0 | 20.0 ± 0.0 |" in text
    assert "anchor" not in text  # an arm without runs gets no row
    (png,) = files
    assert Image.open(png).size[0] > 1000


def test_no_section_without_bank_or_reward_information(tmp_path):
    st = _study(tmp_path)
    run = {"method": "binac", "variant": "reference", "seed": 0, "metrics": {"eval/acc_single": {0: 0.1}}}
    assert critic_curves.section(st, [run], [("binac", "reference")], tmp_path, "sparse") == ([], [])
