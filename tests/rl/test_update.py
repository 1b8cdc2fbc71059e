"""The update's handling of its signal, on a tiny model built in the test: a batch whose advantages are all zero
(and no KL or entropy term) takes no optimizer step, so the adapter and its AdamW state stay bit-identical, while a
batch with a signal, or with a KL or entropy term, steps; the entropy the update logs and differentiates is the
full next-token distribution's, the same cut into LM-head chunks."""

import math

import pytest
import torch
from tiny_checkpoint import build_checkpoint

from binac_core.foundation.config import load_config
from binac_core.model.generation import HFBackend, SamplingParams
from binac_core.rl.update import (
    Sample,
    UpdateSettings,
    chunked_token_logprobs,
    policy_update,
    token_entropy,
    zero_signal,
)

MIXED = [1.0, -1.0, 0.5, -0.5]
ZERO = [0.0, 0.0, 0.0, 0.0]


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    from binac_core.model.policy import Policy

    base = build_checkpoint(tmp_path_factory.mktemp("update") / "model", hostile=False, eos_logit=2.0)
    return Policy(base, load_config("micro"), seed=0)


def _samples(policy, folder, advantages: list[float]) -> list[Sample]:
    """Completions the actor samples now, with the given advantages (an on-policy batch)."""
    ref = policy.save("actor", folder / "sampled")
    msgs = [[{"role": "user", "content": f"Solve: {d} +3 *2"}] for d in range(len(advantages))]
    gens = HFBackend(policy, 8).generate(msgs, ref, SamplingParams(8, 1.0, 1.0, seed=1))
    return [Sample(g.prompt_ids, g.token_ids, g.logprobs, a) for g, a in zip(gens, advantages, strict=True)]


def _actor_update(policy, folder, advantages: list[float], **settings) -> dict:
    """One actor update on a batch the actor samples now (`_samples`), under `micro`'s settings with `settings`."""
    batch = _samples(policy, folder, advantages)
    return policy_update(policy, "actor", batch, UpdateSettings.of(policy.cfg, "actor", **settings))


def _snapshot(policy) -> tuple[dict, dict]:
    """The actor's weights and its optimizer's per-parameter state (moments and step count), copied."""
    state = policy.optimizers["actor"].state_dict()["state"]
    return policy.adapter_state("actor"), {i: {k: v.clone() for k, v in s.items()} for i, s in state.items()}


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        _same(a[k], b[k]) if isinstance(a[k], dict) else torch.equal(a[k], b[k]) for k in a
    )


def _steps(policy) -> float:
    return float(next(iter(policy.optimizers["actor"].state_dict()["state"].values()))["step"])


def test_zero_signal_needs_every_advantage_exactly_zero_and_no_kl_or_entropy_term():
    zero, tiny = [Sample([1], [2], [0.0], 0.0)] * 2, [Sample([1], [2], [0.0], 0.0), Sample([1], [2], [0.0], 1e-9)]
    assert zero_signal(zero, 0.0, 0.0)
    assert not zero_signal(tiny, 0.0, 0.0)
    assert not zero_signal(zero, 0.1, 0.0) and not zero_signal(zero, 0.0, 0.1)


def test_a_zero_advantage_batch_leaves_the_adapter_and_its_optimizer_bit_identical(policy, tmp_path):
    _actor_update(policy, tmp_path / "a", MIXED, passes=1, kl_coef=0.0)  # momentum
    weights, moments = _snapshot(policy)
    stats = _actor_update(policy, tmp_path / "b", ZERO, passes=2, kl_coef=0.0)
    assert stats["skipped_steps"] == 2 and stats["loss"] == 0.0 and stats["tokens"] > 0
    assert stats["entropy"] > 0, "the skipped batch is still measured"
    after_weights, after_moments = _snapshot(policy)
    assert _same(weights, after_weights) and _same(moments, after_moments)
    # the premise: AdamW's step on the same exactly-zero gradient would have moved the adapter (its momentum)
    for p in policy.params("actor"):
        p.grad = torch.zeros_like(p)
    policy.optimizers["actor"].step()
    policy.optimizers["actor"].zero_grad(set_to_none=True)
    assert not _same(weights, policy.adapter_state("actor"))


def test_a_batch_with_a_signal_moves_the_adapter(policy, tmp_path):
    _actor_update(policy, tmp_path / "a", MIXED, passes=1, kl_coef=0.0)
    weights, _ = _snapshot(policy)
    steps = _steps(policy)
    stats = _actor_update(policy, tmp_path / "b", MIXED, passes=2, kl_coef=0.0)
    assert stats["skipped_steps"] == 0 and _steps(policy) == steps + 2
    assert not _same(weights, policy.adapter_state("actor"))


@pytest.mark.parametrize("kl_coef, entropy_coef", [(0.1, 0.0), (0.0, 0.1)])
def test_a_kl_or_entropy_term_gives_a_zero_advantage_batch_a_step(policy, tmp_path, kl_coef, entropy_coef):
    """The actor already moved off the base (the KL reference) in the tests above; the entropy's gradient is never
    zero on a non-uniform distribution."""
    _actor_update(policy, tmp_path / "a", MIXED, passes=1, kl_coef=0.0)
    weights, _ = _snapshot(policy)
    steps = _steps(policy)
    stats = _actor_update(policy, tmp_path / "b", ZERO, passes=1, kl_coef=kl_coef, entropy_coef=entropy_coef)
    assert stats["skipped_steps"] == 0 and _steps(policy) == steps + 1
    assert not _same(weights, policy.adapter_state("actor"))


def test_the_entropy_bonus_raises_the_entropy_of_a_zero_advantage_batch(policy, tmp_path):
    """With every advantage 0 the loss is −c·H alone: AdamW's first step on it (the critic's, no momentum yet: a
    small step against the gradient's sign) raises the batch's mean entropy under that adapter."""
    batch = _samples(policy, tmp_path, ZERO)
    assert "critic" not in policy.optimizers
    before = policy_update(
        policy, "critic", batch, UpdateSettings.of(policy.cfg, "critic", passes=1, kl_coef=0.0, entropy_coef=0.05)
    )["entropy"]
    after = policy_update(
        policy, "critic", batch, UpdateSettings.of(policy.cfg, "critic", passes=1, kl_coef=0.0)
    )  # skipped: measures only
    assert after["skipped_steps"] == 1 and after["entropy"] > before


def test_chunked_entropy_is_the_whole_rows_and_has_a_gradient_only_when_asked():
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(7, 5, generator=gen, requires_grad=True)
    targets = torch.randint(0, 5, (7,), generator=gen)
    whole = token_entropy(hidden.detach(), 0.7)
    logp, ent = chunked_token_logprobs(hidden, torch.nn.Identity(), targets, 0.7, chunk=3, entropy="value")
    assert torch.allclose(ent, whole, atol=1e-6) and not ent.requires_grad and logp.requires_grad
    logp2 = chunked_token_logprobs(hidden, torch.nn.Identity(), targets, 0.7, chunk=3)
    assert torch.equal(logp, logp2), "asking for the entropy leaves the log-probs as they were"
    _, ent = chunked_token_logprobs(hidden, torch.nn.Identity(), targets, 0.7, chunk=3, entropy="differentiable")
    assert ent.requires_grad
    ent.sum().backward()
    assert hidden.grad is not None and bool(torch.isfinite(hidden.grad).all())
    assert math.isclose(float(token_entropy(torch.zeros(1, 5))[0]), math.log(5), rel_tol=1e-6)
