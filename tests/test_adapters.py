"""What each update touches, at the library level, on a tiny model built in the test: only the trained adapter
changes, the other one stays bit-identical, and save/sync round-trips exactly (resume depends on it)."""

import pytest
import torch

from binac_core.config import load_config
from binac_core.generation import HFBackend, SamplingParams
from binac_core.update import Sample, policy_update


@pytest.fixture(scope="module")
def policy(micro_base):
    from binac_core.policy import Policy

    return Policy(micro_base, load_config("micro"), seed=0)


def _samples(policy, name):
    backend = HFBackend(policy, 8)
    from binac_core.generation import AdapterRef  # noqa: F401  (policy.using accepts None for the base)

    msgs = [[{"role": "user", "content": f"Solve: {d} +3 *2"}] for d in range(4)]
    gens = backend.generate(msgs, None, SamplingParams(8, 1.0, 1.0, seed=1))
    return [Sample(g.prompt_ids, g.token_ids, g.logprobs, adv) for g, adv in zip(gens, [1.0, -1.0, 0.5, -0.5],
                                                                               strict=True)]


@pytest.mark.parametrize("updated, other, passes, kl_coef", [("actor", "critic", 1, 0.1), ("critic", "actor", 2, 0.0)])
def test_an_update_changes_only_its_adapter(policy, updated, other, passes, kl_coef):
    before = {n: policy.adapter_state(n) for n in ("actor", "critic")}
    policy_update(policy, updated, _samples(policy, updated), passes=passes, kl_coef=kl_coef)
    after = {n: policy.adapter_state(n) for n in ("actor", "critic")}
    assert any(not torch.equal(before[updated][k], after[updated][k]) for k in before[updated])
    assert all(torch.equal(before[other][k], after[other][k]) for k in before[other])


def test_save_then_sync_restores_weights_and_optimizer_exactly(policy, tmp_path):
    policy_update(policy, "actor", _samples(policy, "actor"), passes=1, kl_coef=0.0)
    ref = policy.save("actor", tmp_path / "actor")
    saved = policy.adapter_state("actor")
    opt_state = {k: v.clone() for k, v in policy.optimizers["actor"].state_dict()["state"][0].items()}
    policy_update(policy, "actor", _samples(policy, "actor"), passes=1, kl_coef=0.0)  # drift away
    policy.loaded.pop("actor")
    policy.sync(ref)
    assert all(torch.equal(saved[k], v) for k, v in policy.adapter_state("actor").items())
    restored = policy.optimizers["actor"].state_dict()["state"][0]
    assert all(torch.equal(opt_state[k], restored[k]) for k in opt_state)


def test_first_pass_is_on_policy(policy):
    """The loss recomputes exactly the sampling log-probs (ratio 1), so nothing is clipped on pass one."""
    from binac_core.update import sequence_logprobs

    samples = _samples(policy, "actor")
    with torch.no_grad(), policy.model.disable_adapter():
        logp, mask = sequence_logprobs(policy.model, samples, policy.tokenizer.pad_token_id, 1.0)
    for i, s in enumerate(samples):
        assert torch.allclose(logp[i, : len(s.token_ids)], torch.tensor(s.logprobs), atol=1e-4)
