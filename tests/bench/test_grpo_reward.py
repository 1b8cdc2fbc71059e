"""The GRPO comparison's rewards (`bench.grpo.Reward`): the parity reward on hand-computed texts, and both loops
given it on a shrunken micro preset, where it must give binac's update signal (no skipped optimizer step) and the
rewards binac's score stage returns must be the parity of its own answers. No timing assertions."""

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # `bench` is a folder of the repository, not an installed package
    sys.path.insert(0, str(REPO))

from bench import grpo  # noqa: E402
from bench.common import grpo_rows  # noqa: E402
from binac_core.foundation.config import load_config  # noqa: E402
from binac_core.model.pretrain import build_base_model  # noqa: E402
from binac_core.rl import stage_functions  # noqa: E402

SMALL = {
    "model.pretrain_steps": 2,
    "model.pretrain_examples": 64,
    "task.n_train": 16,
    "train.batch_problems": 2,
    "train.group_size": 4,
    "generation.max_new_tokens": 8,
}


def test_parity_reward_hand_computed():
    # sha256("") = e3b0c442...: first byte 0xe3 = 227, odd; sha256("a") = ca978112...: 0xca = 202, even
    assert grpo.parity_reward("") == 0.0
    assert grpo.parity_reward("a") == 1.0
    assert grpo.trl_parity_reward([[{"content": "a"}], [{"content": ""}]]) == [1.0, 0.0]


def test_rows_name_the_reward_and_the_skipped_steps():
    g = {
        "binac": [1.0, 1.0],
        "trl": [2.0, 2.0],
        "trl_error": None,
        "binac_tokens": [5.0],
        "trl_tokens": [5.0],
        "binac_skipped": [1.0, 0.0],
        "save": [0.1],
        "layout_note": "",
        "reward": "parity",
    }
    rows, notes = grpo_rows(g, load_config("micro"))
    assert "binac skipped the optimizer step in 1 of 2 measured iterations" in rows[0].note
    assert any("parity_reward" in n for n in notes)
    rows, notes = grpo_rows({**g, "binac_skipped": [0.0, 0.0], "reward": "verifier"}, load_config("micro"))
    assert "skipped" not in rows[0].note and not any("parity_reward" in n for n in notes)


@pytest.mark.integration
def test_parity_gives_both_loops_signal(tmp_path):
    cfg = load_config("micro", SMALL)
    build_base_model(cfg, tmp_path / "base", log=lambda msg: None)
    real_score = stage_functions.score_stage
    g = grpo.compare(cfg, tmp_path / "base", tmp_path / "work", 2, 1, log=lambda msg: None, reward=grpo.Reward.PARITY)
    assert stage_functions.score_stage is real_score  # the parity scorer is patched in for binac's iterations only
    assert g["trl_error"] is None and len(g["trl"]) == 2
    assert g["reward"] == "parity" and g["binac_skipped"] == [0.0, 0.0]
    last = g["binac_obj"].last
    assert last.first_rewards.rewards == [grpo.parity_reward(a.text) for a in last.attempts]
