"""The update's merged LoRA forward (`binac_core.model.fused_lora`) against peft's own: the same log-probs and the same
gradients on every LoRA matrix (float rounding only), peft's forward wherever merging does not apply (adapters
disabled, active dropout, a weight larger than the LoRA branch's activation), and peft's forward again after the
block. One update with each gives the same adapter."""

import pytest
import torch
from tiny_checkpoint import build_checkpoint

from binac_core.foundation.config import load_config
from binac_core.model import fused_lora
from binac_core.rl.update import Sample, UpdateSettings, policy_update, sequence_logprobs

TOL = 1e-5
GRAD_RTOL = 1e-4
"""Largest gradient difference allowed, relative to the largest gradient entry (float rounding is ~1e-6; a merge
that dropped the scaling or a factor would be off by order 1)."""


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    from binac_core.model.policy import Policy

    base = build_checkpoint(tmp_path_factory.mktemp("fused") / "model")
    pol = Policy(base, load_config("micro"), seed=0)
    with torch.no_grad():  # both LoRA factors away from the identity start, so the merge has something to merge
        for n, p in pol.model.named_parameters():
            if ".actor." in n and "lora_" in n:
                p.normal_(0.0, 0.2, generator=torch.Generator().manual_seed(p.numel()))
    return pol


def _samples(n=24):
    gen = torch.Generator().manual_seed(3)
    return [
        Sample(
            torch.randint(3, 60, (int(5 + k % 4),), generator=gen).tolist(),
            torch.randint(3, 60, (int(3 + k % 6),), generator=gen).tolist(),
            [-1.0] * int(3 + k % 6),
            1.0 if k % 2 else -1.0,
        )
        for k in range(n)
    ]


def _logp_and_grads(policy, merged: bool):
    policy.model.zero_grad(set_to_none=True)
    policy.model.set_adapter("actor")
    lora = {n: p for n, p in policy.model.named_parameters() if ".actor." in n and "lora_" in n}
    for p in lora.values():
        p.requires_grad_(True)
    policy.model.eval()
    samples = _samples()
    block = fused_lora.merged_lora_forward(policy.model) if merged else torch.enable_grad()
    with block:
        logp, mask = sequence_logprobs(policy.model, samples, policy.tokenizer.pad_token_id, 1.0)
        (logp * mask).sum().backward()
    grads = {n: p.grad.detach().clone() for n, p in lora.items()}
    for p in lora.values():
        p.requires_grad_(False)
        p.grad = None
    return logp.detach(), grads


def test_merged_forward_gives_peft_log_probs_and_gradients(policy, monkeypatch):
    used = []
    real = fused_lora.mergeable
    monkeypatch.setattr(fused_lora, "mergeable", lambda layer, x: used.append(real(layer, x)) or used[-1])
    logp, grads = _logp_and_grads(policy, merged=False)
    assert not used  # outside the block: peft's forward
    merged_logp, merged_grads = _logp_and_grads(policy, merged=True)
    assert True in used  # the attention projections merge at this batch (wider layers may not: both then run)
    assert torch.allclose(merged_logp, logp, atol=TOL, rtol=0)
    assert grads.keys() == merged_grads.keys() and len(grads) > 0
    for n in grads:
        assert grads[n].abs().max() > 0, n
        scale = grads[n].abs().max()  # float32 sums over every token: compare relative to the gradient's size
        assert (merged_grads[n] - grads[n]).abs().max() <= GRAD_RTOL * scale, n


def test_merging_applies_only_where_it_is_the_same_and_cheaper(policy):
    layer = next(m for m in policy.model.modules() if isinstance(m, fused_lora.LoraLinear))
    a = layer.lora_A["actor"].weight
    policy.model.set_adapter("actor")
    policy.model.eval()
    many = torch.zeros(1, layer.base_layer.weight.numel() // a.shape[0], layer.in_features)
    few = torch.zeros(1, 1, layer.in_features)
    assert fused_lora.mergeable(layer, many)
    assert not fused_lora.mergeable(layer, few)  # the merged weight would outweigh the branch
    assert not fused_lora.mergeable(layer, many.double())
    with policy.model.disable_adapter():
        assert not fused_lora.mergeable(layer, many)
    dropout = layer.lora_dropout["actor"]
    layer.lora_dropout["actor"] = torch.nn.Dropout(0.5)
    try:
        layer.train()
        assert not fused_lora.mergeable(layer, many)  # active dropout: the branch is not x · Aᵀ
        layer.eval()
        assert fused_lora.mergeable(layer, many)
    finally:
        layer.lora_dropout["actor"] = dropout
        policy.model.eval()


def test_the_block_restores_peft_forward(policy):
    layers = [m for m in policy.model.modules() if isinstance(m, fused_lora.LoraLinear)]
    with fused_lora.merged_lora_forward(policy.model) as n:
        assert n == len(layers) > 0 and all("forward" in m.__dict__ for m in layers)
    assert not any("forward" in m.__dict__ for m in layers)


def test_an_update_with_merged_layers_gives_the_adapter_peft_gives(policy, monkeypatch):
    start = {n: p.detach().clone() for n, p in policy.model.named_parameters() if ".actor." in n}
    samples = _samples()

    def update():
        with torch.no_grad():
            for n, p in policy.model.named_parameters():
                if n in start:
                    p.copy_(start[n])
        policy.optimizers.pop("actor", None)  # a fresh optimizer each time
        policy_update(policy, "actor", samples, UpdateSettings.of(policy.cfg, "actor", passes=2, kl_coef=0.05))
        return {n: p.detach().clone() for n, p in policy.model.named_parameters() if n in start}

    merged = update()
    monkeypatch.setattr(fused_lora, "mergeable", lambda layer, x: False)
    plain = update()
    assert any(not torch.equal(merged[n], start[n]) for n in start)
    for n in start:
        assert torch.allclose(merged[n], plain[n], atol=TOL, rtol=0), n
