"""The two-timescale schedule in the in-memory loop (`binac_core.rl.loop.iteration`), on the micro preset's
settings and problems with a tiny model built in the test: `train.critic_every` = 2 updates the critic at
iterations 2 and 4 only, leaving its adapter bit-identical at 1 and 3, while every iteration still samples feedback
and trains the actor on the refinements it leads to."""

import pytest
import torch
from tiny_checkpoint import build_checkpoint

from binac_core.benchmarks.problems import load_problems
from binac_core.foundation.config import load_config
from binac_core.model.generation import HFBackend
from binac_core.rl.loop import iteration
from binac_core.rl.methods import method_spec


@pytest.fixture(scope="module")
def schedule(tmp_path_factory):
    """Four binac iterations with `critic_every` 2, and the critic's weights before and after each. The tiny
    model writes noise, so its rewards may carry no signal (all advantages 0: no step); the critic's entropy term
    gives its update a gradient whatever they are (`critic_entropy_coef`), so an update that runs changes it."""
    from binac_core.model.policy import Policy

    base = build_checkpoint(tmp_path_factory.mktemp("schedule") / "model", hostile=False, eos_logit=2.0)
    cfg = load_config("micro", {"train.critic_every": 2, "train.critic_entropy_coef": 0.05})
    policy = Policy(base, cfg, seed=0)
    backend, rows = HFBackend(policy, 16), load_problems(cfg, "train")
    actor, critic = policy.hold("actor"), policy.hold("critic")
    results, critics = [], [policy.adapter_state("critic")]
    for step in range(1, 5):
        res = iteration(policy, backend, cfg, method_spec("binac"), rows, 0, step, actor, critic)
        actor, critic = res.actor, res.critic
        results.append(res)
        critics.append(policy.adapter_state("critic"))
    return results, critics


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_the_critic_is_updated_at_every_second_iteration_only(schedule):
    results, critics = schedule
    assert [res.critic_update is not None for res in results] == [False, True, False, True]
    assert [not _same(critics[i], critics[i + 1]) for i in range(4)] == [False, True, False, True]


def test_a_skipped_iteration_still_samples_feedback_and_trains_the_actor_on_refinements(schedule):
    results, _ = schedule
    for res in results:
        assert res.feedback and res.refined and res.critic_rewards is not None
        assert res.actor_update is not None
        attempt_tokens = sum(len(a.token_ids) for a in res.attempts)
        assert res.actor_update.tokens == attempt_tokens + sum(len(y.token_ids) for y in res.refined)


def test_critic_every_is_a_config_field_of_at_least_one():
    from binac_core.errors import BinacError

    assert load_config("micro").train.critic_every == 1
    assert method_spec("binac").trains_critic_at(load_config("micro"), 3)
    assert not method_spec("fixed_critic").trains_critic_at(load_config("micro"), 2), "no critic to train"
    with pytest.raises(BinacError, match="critic_every"):
        load_config("micro", {"train.critic_every": 0})
