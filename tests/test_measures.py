"""The study's per-iteration measures on hand-built groups and hand-labelled feedback (binac_core/measures.py),
the critic's three reward forms, and the evaluation schedule's equal-samples point."""

import math

import pytest
import torch

from binac_core.benchmarks.synthetic import first_wrong_step
from binac_core.losses import critic_reward_of
from binac_core.measures import critic_error_measures, critic_signal_frac, zero_adv_frac
from binac_core.plans import evaluation_steps
from binac_core.records import trajectory_rows
from binac_core.stage_io import Attempt, Feedback, Refinement, ScoredBatch


def test_zero_adv_frac_counts_groups_whose_rewards_are_all_equal():
    # p1: all wrong (collapsed), p2: mixed, p3: all right (collapsed), p4: a group of one (no advantage either)
    keys = ["p1"] * 3 + ["p2"] * 3 + ["p3"] * 2 + ["p4"]
    rewards = [0, 0, 0, 1, 0, 0, 1, 1, 1]
    assert zero_adv_frac(keys, rewards) == 3 / 4
    assert zero_adv_frac([], []) is None
    # shaped second-turn rewards: equal r1 but different r0 give different shaped values, hence signal
    assert zero_adv_frac(["p"] * 2, [0.0 + 1.0 * (0 - 1), 0.0 + 1.0 * (0 - 0)]) == 0.0


def test_critic_signal_frac_is_the_share_of_feedback_groups_with_unequal_rewards():
    keys = [("p1", 0)] * 4 + [("p1", 1)] * 4 + [("p2", 0)] * 4
    rewards = [1, 0, 0, 0] + [0, 0, 0, 0] + [1.5, 1.5, 1.5, 1.5]
    assert critic_signal_frac(keys, rewards) == pytest.approx(1 / 3)


# question 7+5-3+4: correct steps 7+5=2 2-3=9 9+4=3, answer 3
Q = "7+5-3+4"
RIGHT = "7+5=2 2-3=9 9+4=3 A: 3"
WRONG_AT_2 = "7+5=2 2-3=8 8+4=2 A: 2"
WRONG_AT_1 = "7+5=1 1-3=8 8+4=2 A: 2"
STEPS_RIGHT_ANSWER_WRONG = "7+5=2 2-3=9 9+4=3 A: 5"


def test_first_wrong_step_by_hand():
    assert first_wrong_step(Q, RIGHT) is None
    assert first_wrong_step(Q, WRONG_AT_2) == 2
    assert first_wrong_step(Q, WRONG_AT_1) == 1
    assert first_wrong_step(Q, "7+5=2 junk") == 2  # a malformed step counts as wrong
    assert first_wrong_step(Q, "7+5=2") == 2  # so does a missing one
    assert first_wrong_step(Q, STEPS_RIGHT_ANSWER_WRONG) is None


def test_critic_error_measures_on_hand_labelled_feedback():
    rows = [  # (attempt, r0, feedback, hand label)
        (WRONG_AT_2, 0.0, "Step 2 is wrong.", "hit"),
        (WRONG_AT_2, 0.0, "Step 3 is wrong.", "miss: a later step"),
        (WRONG_AT_2, 0.0, "Check your work.", "miss: names no step"),
        (WRONG_AT_1, 0.0, "Step 1 is wrong.", "hit"),
        (WRONG_AT_1, 0.0, "Looks correct.", "miss"),
        (STEPS_RIGHT_ANSWER_WRONG, 0.0, "Step 1 is wrong.", "not counted: no wrong step"),
        (RIGHT, 1.0, "Looks correct.", "no alarm"),
        (RIGHT, 1.0, "Step 2 is wrong.", "alarm"),
        (RIGHT, 1.0, "Check your work.", "no alarm: names no step"),
        (RIGHT, 1.0, "Step 1 is wrong. Looks correct.", "alarm"),
    ]
    m = critic_error_measures(stored_rows(rows))
    assert m["critic_hits_first_error"] == pytest.approx(2 / 5)
    assert m["critic_false_alarm"] == pytest.approx(2 / 4)
    none = critic_error_measures(stored_rows([(RIGHT, 1.0, "Looks correct.", "no alarm")]))
    assert none == {"critic_hits_first_error": None, "critic_false_alarm": 0.0}


def stored_rows(labelled):
    """The rows the store writes for these (attempt, r0, feedback) triples (binac_core/records.py)."""
    meta = {"run_id": "r", "method": "m", "preset": "p", "seed": 0, "benchmark": "synthetic"}
    out = []
    for i, (attempt, r0, feedback, _) in enumerate(labelled):
        a = Attempt("q", i, "", [], attempt, [], [])
        f = Feedback("q", i, 0, feedback, [], [], [])
        scored = ScoredBatch([a], [r0], [f], [Refinement("q", i, 0, [], "", [], [])], [0.0])
        out += trajectory_rows(meta, 1, scored, split="train", protocol="train", questions={"q": Q})
    return out


def test_the_three_critic_reward_forms():
    r1, ahead = torch.tensor([1.0, 0.0, 1.0, 0.0]), torch.tensor([1.0, 1.0, 0.0, 0.0])
    # penalty, λ = 0.5, α = 1: μ = 1, so 2·r1 − r1⁺
    assert critic_reward_of("penalty", r1, ahead, 0.5, 1.0).tolist() == [1.0, -1.0, 2.0, 0.0]
    assert critic_reward_of("penalty", r1, None, 0.5, 1.0).tolist() == r1.tolist()  # θ⁺ = θ
    assert critic_reward_of("r1", r1, ahead, 0.5, 1.0).tolist() == r1.tolist()
    assert critic_reward_of("after", r1, ahead, 0.5, 1.0).tolist() == ahead.tolist()
    with pytest.raises(ValueError, match="look-ahead"):
        critic_reward_of("after", r1, None, 0.5, 1.0)
    with pytest.raises(ValueError, match="unknown"):
        critic_reward_of("lam", r1, ahead, 0.5, 1.0)


def test_evaluation_steps_add_the_equal_samples_point():
    # every 8 of 40, and the first iteration whose samples reach 2560 at 576 per iteration: ceil(4.44) = 5
    assert evaluation_steps(40, 8, None, 576, 2560) == {5, 8, 16, 24, 32, 40}
    assert evaluation_steps(40, 8, None, 64, 2560) == {8, 16, 24, 32, 40}  # grpo reaches it at its end
    assert evaluation_steps(3, 8, None, 64, 2560) == {3}  # never reached within the run
    assert math.ceil(2560 / 320) in evaluation_steps(40, 8, None, 320, 2560)
