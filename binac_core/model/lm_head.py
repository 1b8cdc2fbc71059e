"""The LM head's logits in float32 for a model whose weights are in a lower precision (bfloat16, float16).

A bf16 head rounds its logits to 8 bits of mantissa: logits of size 16-32 land on a grid of 0.125, so two computations
of one distribution (the sampler's and the trainer's) round the same logit apart by up to that much, and the first
PPO ratio is not 1. Here the head's product runs in float32 on the decoder's (low-precision) hidden states upcast:
what remains between two computations is the hidden states' own difference, not the head's rounding. The
MiniMax-M1 report (arXiv 2506.13585) traced its training/inference probability mismatch to the LM head's precision
and fixed it the same way (the head's output in FP32).

`float32_logits(head)` is the head as a function of its float32 logits, used by the update's log-probs
(`binac_core.rl.update.chunked_token_logprobs`) and, through `float32_lm_head`, by transformers' `generate`
(`generation.HFBackend`). Cost: a float32 copy of the head's weight while it is used (vocabulary × hidden × 4 bytes:
1.0 GiB at Llama-3.2-1B, 2.0 GiB at Qwen2.5-7B; `scripts/gpu_memory.py` counts it). A float32 head is returned as it
is: its computation does not change by a bit. vLLM computes its logits in the model's dtype (docs/gpu.md says what
the first GPU session measures of that).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch


def float32_logits(head: torch.nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """`head` itself when its weight is float32 (or it has none: an identity); else a function giving x Wᵀ + b in
    float32 from a float32 copy of the weight (made here, once) and `x` upcast, differentiable in `x`. Only a plain
    `torch.nn.Linear` head is upcast; another module in a low precision is refused (its product is not known
    here)."""
    weight = getattr(head, "weight", None)
    if weight is None or weight.dtype == torch.float32:
        return head
    if type(head) is not torch.nn.Linear:
        raise NotImplementedError(f"float32 logits of a {type(head).__name__} LM head in {weight.dtype}")
    w32 = weight.detach().float() if not weight.requires_grad else weight.float()
    b32 = None if head.bias is None else head.bias.float()

    def logits(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x.float(), w32, b32)

    return logits


@contextlib.contextmanager
def float32_lm_head(model) -> Iterator[bool]:
    """Within the block, `model`'s output embedding (through a peft wrapper) computes float32 logits
    (`float32_logits`); yields whether it was changed (False for a float32 head, left as it is)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    head = base.get_output_embeddings()
    fn = float32_logits(head)
    if fn is head:
        yield False
        return
    head.forward = fn
    try:
        yield True
    finally:
        head.__dict__.pop("forward", None)
