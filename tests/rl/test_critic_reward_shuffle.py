"""The negative control `train.critic_reward_shuffle` on a hand-made batch: the critic rewards are permuted across
the batch (same multiset, another assignment), deterministically in (run seed, step), and left as they are when
it is off (the default). Both the library function and the pipeline's `critic-reward` stage."""

import pytest

from binac_core.rl.critic_reward import critic_reward, shuffle_seed_of, shuffled
from binac_core.rl.kinds import CriticRewardForm

# Eight feedbacks (4 attempts × K = 2), r1 under θ only (`binac_lam0`'s form, r1 itself): all distinct values, so
# any change of assignment shows.
R1 = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]


def _rewards(shuffle: bool, seed: int = 0, step: int = 1) -> list[float]:
    return critic_reward(
        CriticRewardForm.R1, R1, None, lam=0.5, alpha=1.0, shuffle_seed=shuffle_seed_of(shuffle, seed, step)
    )


def test_the_switch_is_off_by_default_and_off_leaves_the_rewards_untouched():
    from binac_core.foundation.config import load_config

    assert load_config("micro").train.critic_reward_shuffle is False
    assert shuffle_seed_of(False, 0, 1) is None
    assert _rewards(False) == R1


def test_shuffled_rewards_keep_their_multiset_and_change_their_assignment():
    got = _rewards(True)
    assert sorted(got) == R1
    assert got != R1


def test_the_permutation_is_deterministic_in_seed_and_step_and_differs_between_them():
    assert _rewards(True, seed=3, step=7) == _rewards(True, seed=3, step=7)
    others = {tuple(_rewards(True, seed=s, step=t)) for s, t in ((3, 7), (3, 8), (4, 7))}
    assert len(others) == 3, "another step or another run seed draws another permutation"
    assert shuffled(R1, 11) == shuffled(R1, 11) and shuffled([], 11) == []


def test_the_verdict_bonus_is_shuffled_with_the_reward_it_belongs_to(tmp_path):
    """The composed reward (form + verdict bonus) moves as one value: penalty form with λ = 0.5, α = 1 and the
    bonus at w = 0.5 give [1.5, 0, 2.5, 1] unshuffled (tests/benchmarks/test_verdict.py works it out by hand); shuffled,
    the stage returns a permutation of exactly these values, the same one on a rerun."""
    from verdict_case import verdict_case

    from binac_core.foundation.files import read_json
    from tasks.critic_update import critic_reward_task as stage

    cfg_d, files = verdict_case(tmp_path, critic_reward_shuffle=True)

    def reward(folder: str, **at) -> list[float]:
        (tmp_path / folder).mkdir()
        return read_json(
            stage.fn(
                cfg_d, out_dir=str(tmp_path / folder), form=CriticRewardForm.PENALTY, verdict_weight=0.5, **files, **at
            )
        )

    first = reward("a", seed=0, step=2)
    assert sorted(first) == pytest.approx(sorted([1.5, 0.0, 2.5, 1.0]))
    assert first == reward("b", seed=0, step=2)
    assert first == pytest.approx(shuffled([1.5, 0.0, 2.5, 1.0], shuffle_seed_of(True, 0, 2)))
