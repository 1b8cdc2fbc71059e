"""A comparison at equal iterations (`binac demo`): every method plans `steps` iterations whatever its actor
training samples, its key differs from the equal-budget comparison's, and the equal-budget key is the one it always
was (existing comparisons keep their runs)."""

from __future__ import annotations

import hashlib

import pytest

from binac_core.errors import BinacError
from binac_core.foundation.config import load_config
from binac_core.runs.plans import compare_key, plan, plan_compare

METHODS = ["grpo", "fixed_critic", "binac"]


def test_every_method_runs_the_same_iterations():
    cfg, budget = plan_compare("demo", METHODS, [0], 15, None, "iterations")
    assert budget == 15 * cfg.train.batch_problems * cfg.train.group_size  # GRPO's, for the record
    for m in METHODS:
        assert plan("demo", m, 15, 0, None, None)[2] == 15
    with pytest.raises(BinacError, match="unknown comparison axis 'steps'"):
        plan_compare("demo", METHODS, [0], 15, None, "steps")


def test_the_axis_is_part_of_the_key_and_the_old_keys_stay():
    cfg = load_config("micro")
    old = hashlib.sha256(f"{cfg.digest()}|{METHODS}|{[0]}|5|code|".encode()).hexdigest()[:12]
    assert compare_key(cfg, METHODS, [0], 5, "code", "") == old
    assert compare_key(cfg, METHODS, [0], 5, "code", "", "iterations") != old
