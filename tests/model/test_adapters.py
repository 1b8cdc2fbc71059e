"""What each update touches, at the library level, on a tiny model built in the test: only the trained adapter
changes, the other one stays bit-identical, save/sync round-trips exactly (resume depends on it), and the first
pass of a real update is on-policy (ratio 1, nothing clipped) with LoRA dropout configured on."""

import pytest
import torch
from tiny_checkpoint import build_checkpoint

from binac_core.foundation.config import load_config
from binac_core.model.generation import HFBackend, SamplingParams
from binac_core.rl import update as upd
from binac_core.rl.update import Sample, UpdateSettings, policy_update

RATIO_TOL = 1e-5
"""First-pass |log ratio| allowed: KV-cached, left-padded generation vs whole-sequence training differ in float
rounding only."""


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    from binac_core.model.policy import Policy

    base = build_checkpoint(tmp_path_factory.mktemp("adapters") / "model", hostile=True, eos_logit=2.0)
    return Policy(base, load_config("micro", {"lora.dropout": 0.2}), seed=0)


def _samples(policy, name, folder):
    """Completions sampled from adapter `name` as it is now (saved to `folder` and served from there), with
    mixed advantages: the on-policy batch of an update of `name`."""
    ref = policy.save(name, folder / f"{name}-sampled")
    backend = HFBackend(policy, 8)
    msgs = [[{"role": "user", "content": f"Solve: {d} +3 *2"}] for d in range(4)]
    gens = backend.generate(msgs, ref, SamplingParams(8, 1.0, 1.0, seed=1))
    return [
        Sample(g.prompt_ids, g.token_ids, g.logprobs, adv) for g, adv in zip(gens, [1.0, -1.0, 0.5, -0.5], strict=True)
    ]


@pytest.mark.parametrize("updated, other, passes, kl_coef", [("actor", "critic", 1, 0.1), ("critic", "actor", 2, 0.0)])
def test_an_update_changes_only_its_adapter(policy, tmp_path, updated, other, passes, kl_coef):
    before = {n: policy.adapter_state(n) for n in ("actor", "critic")}
    policy_update(
        policy,
        updated,
        _samples(policy, updated, tmp_path),
        UpdateSettings.of(policy.cfg, updated, passes=passes, kl_coef=kl_coef),
    )
    after = {n: policy.adapter_state(n) for n in ("actor", "critic")}
    assert any(not torch.equal(before[updated][k], after[updated][k]) for k in before[updated])
    assert all(torch.equal(before[other][k], after[other][k]) for k in before[other])


def test_save_then_sync_restores_weights_and_optimizer_exactly(policy, tmp_path):
    policy_update(
        policy,
        "actor",
        _samples(policy, "actor", tmp_path),
        UpdateSettings.of(policy.cfg, "actor", passes=1, kl_coef=0.0),
    )
    ref = policy.save("actor", tmp_path / "actor")
    saved = policy.adapter_state("actor")
    opt_state = {k: v.clone() for k, v in policy.optimizers["actor"].state_dict()["state"][0].items()}
    policy_update(
        policy,
        "actor",
        _samples(policy, "actor", tmp_path / "later"),
        UpdateSettings.of(policy.cfg, "actor", passes=1, kl_coef=0.0),
    )  # drift
    policy.loaded.pop("actor")
    policy.sync(ref)
    assert all(torch.equal(saved[k], v) for k, v in policy.adapter_state("actor").items())
    assert "actor" not in policy.optimizers  # read back, created by the next update at its learning rate
    restored = policy.optimizer("actor", policy.cfg.train.actor_lr).state_dict()["state"][0]
    assert all(torch.equal(opt_state[k], restored[k]) for k in opt_state)


@pytest.mark.parametrize("name", ["actor", "critic"])
def test_first_pass_is_on_policy(policy, tmp_path, monkeypatch, name):
    """The real update recomputes exactly the sampling log-probs (ratio 1), so nothing is clipped on pass one,
    even with LoRA dropout configured and an adapter that is not the identity any more."""
    assert policy.cfg.lora.dropout > 0
    policy_update(
        policy,
        name,
        _samples(policy, name, tmp_path / "warm"),
        UpdateSettings.of(policy.cfg, name, passes=1, kl_coef=0.0),
    )
    with torch.no_grad():  # move the adapter well away from LoRA's identity start, so dropout would matter
        for p in policy.params(name):
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())) * 0.05)
    samples = _samples(policy, name, tmp_path)
    assert sum(len(s.token_ids) for s in samples) > 0
    seen = []
    real = upd.clipped_policy_loss

    def capture(logp, old, adv, mask, *a, **k):
        seen.append(((logp.detach() - old).abs() * mask).max().item())
        return real(logp, old, adv, mask, *a, **k)

    monkeypatch.setattr(upd, "clipped_policy_loss", capture)
    stats = policy_update(policy, name, samples, UpdateSettings.of(policy.cfg, name, passes=1, kl_coef=0.1))
    assert stats["clip_frac"] == 0.0
    assert seen and max(seen) <= RATIO_TOL, f"first-pass |log ratio| up to {max(seen)}"
