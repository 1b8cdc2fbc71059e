"""Activation checkpointing in the update (`update.checkpointed_layers`, `train.activation_checkpointing`): the same
log-probs and LoRA gradients as without it (float rounding only), far fewer saved activations during the forward
(counted with autograd's saved-tensor hooks, not timed), dropout still off, and the layers back as they were."""

import pytest
import torch
from tiny_checkpoint import build_checkpoint

from binac_core.foundation.config import load_config
from binac_core.model.fused_lora import merged_lora_forward
from binac_core.rl.update import Sample, checkpointed_layers, sequence_logprobs


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    from binac_core.model.policy import Policy

    base = build_checkpoint(tmp_path_factory.mktemp("ckpt") / "model")
    pol = Policy(base, load_config("micro", {"lora.dropout": 0.5}), seed=0)
    with torch.no_grad():  # the adapter away from its zero start, so its gradients are not trivially equal
        for n, p in pol.model.named_parameters():
            if ".actor." in n and "lora_" in n:
                p.normal_(0.0, 0.2, generator=torch.Generator().manual_seed(p.numel()))
    return pol


def _samples():
    gen = torch.Generator().manual_seed(5)
    return [
        Sample(
            torch.randint(3, 60, (6 + k % 3,), generator=gen).tolist(),
            torch.randint(3, 60, (20 + k,), generator=gen).tolist(),
            [],
            1.0,
        )
        for k in range(8)
    ]


def _run(policy, on: bool):
    """(log-probs, {name: grad}, saved bytes during the forward, layers checkpointed)."""
    policy.model.set_adapter("actor")
    lora = {n: p for n, p in policy.model.named_parameters() if ".actor." in n and "lora_" in n}
    for p in lora.values():
        p.requires_grad_(True)
        p.grad = None
    policy.model.eval()
    saved = {}

    def pack(t):
        saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with merged_lora_forward(policy.model), checkpointed_layers(policy.model, on) as n:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            logp, mask = sequence_logprobs(policy.model, _samples(), policy.tokenizer.pad_token_id, 1.0)
        (logp * mask).sum().backward()
    grads = {k: p.grad.detach().clone() for k, p in lora.items()}
    weights = {p.untyped_storage().data_ptr() for p in policy.model.parameters()}
    for p in lora.values():
        p.requires_grad_(False)
        p.grad = None
    return logp.detach(), grads, sum(v for k, v in saved.items() if k not in weights), n


def test_checkpointing_gives_the_same_gradients_with_fewer_saved_activations(policy):
    plain_logp, plain_grads, plain_saved, none = _run(policy, on=False)
    ckpt_logp, ckpt_grads, ckpt_saved, layers = _run(policy, on=True)
    assert none == 0 and layers == policy.cfg.model.num_layers == 2
    assert torch.allclose(plain_logp, ckpt_logp, atol=1e-6)  # dropout 0.5 stayed off (eval mode) in both
    scale = max(g.abs().max() for g in plain_grads.values())
    assert scale > 0
    for k, g in plain_grads.items():
        assert (g - ckpt_grads[k]).abs().max() <= 1e-5 * scale, k
    assert ckpt_saved < plain_saved / 2, (ckpt_saved, plain_saved)


def test_the_layers_are_left_as_they_were(policy):
    from transformers.modeling_layers import GradientCheckpointingLayer

    layers = [m for m in policy.model.modules() if isinstance(m, GradientCheckpointingLayer)]
    policy.model.eval()
    with checkpointed_layers(policy.model, True):
        assert all(m.training and m.gradient_checkpointing for m in layers)
        assert not any(d.training for d in policy.model.modules() if isinstance(d, torch.nn.Dropout))
    assert not any(m.training or m.gradient_checkpointing for m in layers)
