"""The update's settings are built from the config for the adapter's role, and the optimizer runs at their
learning rate; the loop's phases are timed into `perf/<phase>_s`."""

import pytest

from binac_core.foundation.config import load_config
from binac_core.foundation.timing import PHASES, phase_metrics, timed
from binac_core.rl.update import UpdateSettings


def test_each_role_reads_its_own_fields_and_the_shared_ones():
    cfg = load_config(
        "micro",
        {
            "train.actor_lr": 0.1,
            "train.critic_lr": 0.2,
            "train.t_low": 3,
            "train.t_high": 4,
            "train.kl_coef": 0.5,
            "train.critic_kl_coef": 0.6,
            "train.entropy_coef": 0.7,
            "train.critic_entropy_coef": 0.8,
            "train.clip_eps": 0.3,
            "train.max_grad_norm": 2.0,
            "train.micro_batch_size": 5,
            "train.activation_checkpointing": True,
            "generation.temperature": 0.9,
        },
    )
    shared = {
        "clip_eps": 0.3,
        "max_grad_norm": 2.0,
        "micro_batch_size": 5,
        "activation_checkpointing": True,
        "temperature": 0.9,
    }
    assert UpdateSettings.of(cfg, "actor") == UpdateSettings(lr=0.1, passes=3, kl_coef=0.5, entropy_coef=0.7, **shared)
    assert UpdateSettings.of(cfg, "critic") == UpdateSettings(lr=0.2, passes=4, kl_coef=0.6, entropy_coef=0.8, **shared)
    assert UpdateSettings.of(cfg, "critic", passes=1).passes == 1
    with pytest.raises(ValueError, match="no update settings"):
        UpdateSettings.of(cfg, "judge")


def test_the_optimizer_runs_at_the_settings_learning_rate(tmp_path):
    from tiny_checkpoint import build_checkpoint

    from binac_core.model.policy import Policy

    policy = Policy(build_checkpoint(tmp_path / "m", hostile=False), load_config("micro"), seed=0)
    assert [g["lr"] for g in policy.train_mode("actor", 0.25).param_groups] == [0.25]
    assert [g["lr"] for g in policy.train_mode("actor", 0.5).param_groups] == [0.5]


def test_phases_add_up_and_every_phase_is_logged():
    timings = {}
    for _ in range(2):
        with timed("score", timings):
            pass
    assert set(timings) == {"score"} and timings["score"] >= 0
    metrics = phase_metrics(timings)
    assert list(metrics) == [f"perf/{p}_s" for p in PHASES] and metrics["perf/sample_s"] == 0.0
    with pytest.raises(ValueError, match="unknown phase"):
        with timed("thinking", timings):
            pass
