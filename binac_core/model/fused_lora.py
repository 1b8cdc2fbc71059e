"""LoRA layers computed through one merged weight during an update, where that is the cheaper way.

peft's `lora.Linear.forward` computes base(x) + B(A(dropout(x))) · s: three matrix products over every token, and
per-module Python around them. With dropout inactive (the update's forward runs in eval mode,
`binac_core.rl.update`), that is x (W + s · B A)ᵀ + bias: one product with a weight merged per forward. Autograd
carries the gradients to A and B through the merge: the same values up to float rounding
(tests/model/test_fused_lora.py). Where the merged weight (out × in) is no larger than the LoRA branch's activation
(tokens × rank), merging costs less time and no more memory than the branch; that holds for small models on big
batches (the tiny preset: a policy update ~17 % faster; docs/results-tiny.md), not for a 135 M model on a CPU batch (`smol`),
which keeps peft's forward. So does every module with another layout (fan-in-fan-out weights), a LoRA variant
(DoRA...), several active adapters, adapters disabled (the KL reference pass) or another dtype.

The merge is the decode loop's (`decode.LinearWeights.of`: the base weight plus peft's `get_delta_weight`); there
it runs once per batch without gradients, here once per forward with them.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator

import torch
from peft.tuners.lora.layer import Linear as LoraLinear

from binac_core.model.decode import LinearWeights


@contextlib.contextmanager
def merged_lora_forward(model: torch.nn.Module) -> Iterator[int]:
    """Within the block, every peft LoRA `Linear` of `model` runs `merged_forward`; yields how many. Afterwards the
    modules run peft's own forward again (the instance attribute is removed)."""
    patched = [m for m in model.modules() if isinstance(m, LoraLinear)]
    for m in patched:
        m.forward = types.MethodType(merged_forward, m)
    try:
        yield len(patched)
    finally:
        for m in patched:
            m.__dict__.pop("forward", None)


def merged_forward(self: LoraLinear, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    """x (W + s · B A)ᵀ + bias for the one active adapter, when `mergeable`; else peft's forward."""
    if args or kwargs or not mergeable(self, x):
        return LoraLinear.forward(self, x, *args, **kwargs)
    return LinearWeights.of(self)(x)  # base + peft's `get_delta_weight`: the merge the decode loop makes


def mergeable(layer: LoraLinear, x: torch.Tensor) -> bool:
    """One plain LoRA adapter active, its dropout inactive, one dtype throughout, and the merged weight no
    larger than the LoRA branch's activation (tokens × rank)."""
    if layer.disable_adapters or layer.merged or layer.fan_in_fan_out or len(layer.active_adapters) != 1:
        return False
    name = layer.active_adapters[0]
    if name not in layer.lora_A or name in layer.lora_variant:
        return False
    dropout = layer.lora_dropout[name]
    if layer.training and not isinstance(dropout, torch.nn.Identity) and dropout.p > 0:
        return False
    a, b, w = layer.lora_A[name].weight, layer.lora_B[name].weight, layer.base_layer.weight
    if not (x.dtype == a.dtype == b.dtype == w.dtype):
        return False
    tokens = x.numel() // x.shape[-1]
    return w.numel() <= tokens * a.shape[0]
