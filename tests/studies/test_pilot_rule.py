"""The third edition's pilot rule (binac_core/studies/pilot_rule.py) on hand-computed cases (the pilot table it
makes: tests/studies/test_study_report.py)."""

import math

import pytest

from binac_core.studies.pilot_rule import changed_fields, choose_paired, curve_area, edges


def test_curve_area_is_the_trapezoid_mean_over_the_given_steps():
    # (10·(0.1+0.3)/2 + 10·(0.3+0.3)/2) / 20 = (2 + 3) / 20
    assert curve_area({0: 0.1, 10: 0.3, 20: 0.3}, [0, 10, 20]) == pytest.approx(0.25)
    assert curve_area({0: 0.4, 10: 0.4}, [0, 10]) == pytest.approx(0.4), "a flat curve's area is its value"
    # an extra point off the grid (an equal-budget evaluation at 12) does not enter
    assert curve_area({0: 0.1, 10: 0.3, 12: 0.9, 20: 0.3}, [0, 10, 20]) == pytest.approx(0.25)
    assert curve_area({0: 0.1, 20: 0.3}, [0, 10, 20]) is None, "a missing evaluation: no area"
    assert curve_area({0: 0.1}, [0]) is None


def test_changed_fields_counts_values_that_differ_from_the_defaults():
    defaults = {"train.critic_lr": 0.002, "train.t_high": 1}
    assert changed_fields({"train.critic_lr": 0.002}, defaults) == 0, "the default's value is no change"
    assert changed_fields({"train.critic_lr": 0.005, "train.t_high": 1}, defaults) == 1
    assert changed_fields({"train.critic_lr": 0.005, "train.t_high": 2}, defaults) == 2


def test_choose_paired_takes_the_fewest_changes_among_the_leader_and_its_paired_ties():
    # A − B per seed: +0.05, −0.02, +0.04: mean 0.0233, sd 0.0379, t(0.975, 2)·sd/√3 = 0.094: contains 0, a tie.
    # A − C per seed: +0.30, +0.39, +0.51: mean 0.40, half-width 0.26: no tie.
    values = {"A": {0: 0.50, 1: 0.60, 2: 0.70}, "B": {0: 0.45, 1: 0.62, 2: 0.66}, "C": {0: 0.20, 1: 0.21, 2: 0.19}}
    choice = choose_paired(values, {"A": 1, "B": 0, "C": 0})
    assert choice.leader == "A" and choice.ties == ("B",) and choice.chosen == "B"
    mean, half, n = choice.differences["B"]
    assert (mean, n) == (pytest.approx(0.02333, abs=1e-5), 3) and half == pytest.approx(0.0941, abs=1e-4)
    assert choose_paired(values, {"A": 0, "B": 1, "C": 0}).chosen == "A", "the leader itself changes least"
    # equal changes among the tied: the higher mean
    assert choose_paired(values, {"A": 1, "B": 1, "C": 0}).chosen == "A"
    # C is no tie, so however few its changes it is not chosen
    assert choose_paired(values, {"A": 2, "B": 2, "C": 0}).chosen == "A"


def test_choose_paired_without_data_or_with_one_common_seed():
    assert choose_paired({"A": {}, "B": {}}, {"A": 0, "B": 0}).chosen is None
    one = choose_paired({"A": {0: 0.9}, "B": {0: 0.1}}, {"A": 1, "B": 0})
    assert one.leader == "A" and one.ties == ("B",) and one.chosen == "B", "one seed cannot separate them"
    assert math.isnan(one.differences["B"][1])


def test_edges_name_a_changed_field_at_the_grids_extreme():
    grid = {
        "lr1": {"train.critic_lr": 0.001},
        "lr2": {"train.critic_lr": 0.002},
        "lr5": {"train.critic_lr": 0.005},
        "kl": {"train.critic_kl_coef": 0.1},
    }
    defaults = {"train.critic_lr": 0.002, "train.critic_kl_coef": 0.0}
    assert edges("lr5", grid, defaults) == [("train.critic_lr", "highest")]
    assert edges("lr1", grid, defaults) == [("train.critic_lr", "lowest")]
    assert edges("lr2", grid, defaults) == [], "the defaults' variant changes nothing"
    assert edges("kl", grid, defaults) == [("train.critic_kl_coef", "highest")], "the others keep the default 0"
    inner = {**grid, "lr10": {"train.critic_lr": 0.01}}
    assert edges("lr5", inner, defaults) == []
