"""A lean sampling loop for Llama-architecture models: prefill, then one token per step over a preallocated KV cache.

`HFBackend` (binac_core/model/generation.py) runs this instead of transformers' `generate` when `supports(model)`: at the
`tiny` size (2 layers, hidden 64) a decode step's arithmetic is microseconds, and `generate` spent nearly all its
time in per-step Python (peft's LoRA wrappers around every projection, the cache and mask objects, the logits
processors, the stopping criteria). Here a step is ~30 tensor operations per layer and nothing else.

What it computes is transformers' `LlamaForCausalLM` forward in eval mode (transformers 5.17 `modeling_llama.py`),
restated over plain tensors:
- `LlamaRMSNorm`: x * rsqrt(mean(x^2) + eps) in fp32, times the weight (`_rms_norm`);
- `LlamaAttention`: q/k/v projections, rotary embedding (`apply_rotary_pos_emb`, with the cos/sin table of the
  model's own `rotary_emb` module, so any static RoPE scaling is the model's), softmax(q k^T / sqrt(head_dim) +
  mask) v over the cached keys (`_attend`: the math of SDPA and of `eager_attention_forward`, grouped-query
  attention included), o_proj;
- `LlamaMLP`: down(act(gate(x)) * up(x)), the activation being the config's `hidden_act`;
- the final norm and the LM head, on the last position only.
Left padding: pad keys are masked out, and positions count real tokens only (position = number of real tokens
before it), as `generate` derives `position_ids` from the attention mask; so a row's logits are those of its
unpadded sequence (`binac_core.rl.update.sequence_logprobs`, which runs each sequence from position 0).

The LoRA adapter is merged, per call, into copies of the projection weights (`LinearWeights.of`: base weight +
peft's `get_delta_weight` of each active adapter; nothing added when adapters are disabled). The base weights are
never modified. q/k/v and gate/up are concatenated into one matrix each (one matmul instead of three / two), so a
call holds a copy of the decoder's projection weights (SmolLM2-135M: about 0.4 GB of float32) until it returns. Merged and
unmerged LoRA differ in float rounding only (W x + s B A x vs (W + s B A) x).

Not supported (`supports` says False and the backend uses transformers' `generate`): other architectures, dtypes
other than float32 (a bf16 merge would round the adapter into the weights), dynamic/longrope RoPE (their
frequencies depend on the sequence length), DoRA or merged peft layers, models with a bias on the LM head.

Sampling (`sample`): softmax(logits / T) drawn by inverting its cumulative distribution with one uniform number
per row from the call's own `torch.Generator` (`_draw`; the global RNG is neither read nor moved), T = 0 greedy
argmax; the stored log-prob of each token is the log-softmax of the distribution it was drawn from. A row stops at
its first end-of-turn id; the loop ends when every row has stopped or after `max_new_tokens` steps. Finished rows
keep being computed (their tokens are discarded), so the draws of the other rows, and their random numbers, do not
depend on when a row finished.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F  # noqa: N812

STATIC_ROPE = ("default", "linear", "llama3")
"""RoPE types whose frequencies do not depend on the sequence length (transformers' `dynamic_rope_update` leaves
them alone), so a cos/sin table computed once per call is exactly what the model computes per step."""


@dataclass(frozen=True)
class LinearWeights:
    """A projection's effective weight [out, in] and bias: the base layer plus the active LoRA adapters."""

    weight: torch.Tensor
    bias: torch.Tensor | None

    @staticmethod
    def of(*modules) -> LinearWeights:
        """The effective weights of `modules` (plain `nn.Linear` or peft `LoraLayer`), concatenated along the output
        dimension. A LoRA layer contributes base + sum of `get_delta_weight(a)` over its active adapters, unless
        adapters are disabled (peft's `disable_adapter()`), as peft's `Linear.forward` applies them."""
        weights, biases = [], []
        for m in modules:
            base = getattr(m, "base_layer", m)
            w = base.weight
            if hasattr(m, "lora_A") and not m.disable_adapters:
                for name in m.active_adapters:
                    if name in m.lora_A:
                        w = w + m.get_delta_weight(name)
            weights.append(w)
            biases.append(base.bias)
        bias = (
            None
            if all(b is None for b in biases)
            else torch.cat(
                [b if b is not None else w.new_zeros(w.shape[0]) for b, w in zip(biases, weights, strict=True)]
            )
        )
        return LinearWeights(torch.cat(weights) if len(weights) > 1 else weights[0], bias)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)


@dataclass(frozen=True)
class LayerWeights:
    """One decoder layer (`LlamaDecoderLayer`): norms, fused q/k/v, o, fused gate/up, down."""

    attn_norm: torch.Tensor
    qkv: LinearWeights
    o: LinearWeights
    mlp_norm: torch.Tensor
    gate_up: LinearWeights
    down: LinearWeights


@dataclass(frozen=True)
class LlamaWeights:
    """Everything a decode step reads, with the adapter state of the moment merged in (`llama_weights`)."""

    embed: torch.Tensor
    layers: tuple[LayerWeights, ...]
    norm: torch.Tensor
    head: torch.Tensor
    eps: float
    heads: int
    kv_heads: int
    head_dim: int
    act: object
    rotary: torch.nn.Module


def _base(model):
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def supports(model) -> bool:
    """Whether `sample` computes exactly `model`'s forward (module docstring: what falls back and why)."""
    base = _base(model)
    cfg = base.config
    if getattr(cfg, "model_type", None) != "llama" or getattr(cfg, "pretraining_tp", 1) > 1:
        return False
    if base.lm_head.weight.dtype != torch.float32 or getattr(base.lm_head, "bias", None) is not None:
        return False
    if getattr(base.model.rotary_emb, "rope_type", None) not in STATIC_ROPE:
        return False
    for m in base.modules():
        if hasattr(m, "lora_A") and (getattr(m, "merged", False) or any(getattr(m, "use_dora", {}).values())):
            return False
    return True


def llama_weights(model) -> LlamaWeights:
    """The weights of the model as it runs now (active adapter merged, or none when adapters are disabled)."""
    base = _base(model)
    cfg, inner = base.config, base.model

    def layer(block) -> LayerWeights:
        a, m = block.self_attn, block.mlp
        return LayerWeights(
            block.input_layernorm.weight,
            LinearWeights.of(a.q_proj, a.k_proj, a.v_proj),
            LinearWeights.of(a.o_proj),
            block.post_attention_layernorm.weight,
            LinearWeights.of(m.gate_proj, m.up_proj),
            LinearWeights.of(m.down_proj),
        )

    from transformers.activations import ACT2FN

    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return LlamaWeights(
        embed=getattr(inner.embed_tokens, "base_layer", inner.embed_tokens).weight,
        layers=tuple(layer(b) for b in inner.layers[: cfg.num_hidden_layers]),
        norm=inner.norm.weight,
        head=LinearWeights.of(base.lm_head).weight,
        eps=inner.norm.variance_epsilon,
        heads=cfg.num_attention_heads,
        kv_heads=cfg.num_key_value_heads,
        head_dim=head_dim,
        act=ACT2FN[cfg.hidden_act],
        rotary=inner.rotary_emb,
    )


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """`LlamaRMSNorm.forward` (float32 inputs)."""
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """`apply_rotary_pos_emb` for one tensor [B, heads, L, D] with cos/sin [B, 1, L, D] (`rotate_half` inline)."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


@dataclass(frozen=True)
class KVCache:
    """Keys and values of every layer, [layers, B, kv_heads, capacity, D] each, preallocated for the prompt width
    plus the answer budget; `bias` [B, capacity] is added to the attention scores: 0 where a query may attend,
    -inf on left padding."""

    keys: torch.Tensor
    values: torch.Tensor
    bias: torch.Tensor

    @staticmethod
    def empty(w: LlamaWeights, keep_prompt: torch.Tensor, capacity: int) -> KVCache:
        b, width = keep_prompt.shape
        shape = (len(w.layers), b, w.kv_heads, capacity, w.head_dim)
        bias = w.embed.new_zeros(b, capacity)
        bias[:, :width].masked_fill_(~keep_prompt, float("-inf"))
        return KVCache(w.embed.new_empty(shape), w.embed.new_empty(shape), bias)


def _attend(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, bias: torch.Tensor, scale: float):
    """softmax(q k^T x scale + bias) v, the math of `F.scaled_dot_product_attention` and of transformers'
    `eager_attention_forward`, for q [B, h, L, D], keys/values [B, kv_heads, n, D], bias [B, 1, L, n]. Grouped-query
    attention without `repeat_kv`'s copies: query head j reads key/value head j // (h / kv_heads), as there.
    One query position (a decode step): explicit, where SDPA's dispatch costs more than these three matmul-sized
    ops; several (the prefill): SDPA, whose fused kernel never holds the [B, h, L, n] scores (six times faster
    on a `testbed` prefill of 64 prompts of 200 tokens)."""
    b, h, n_q, d = q.shape
    if n_q > 1:
        return F.scaled_dot_product_attention(
            q, keys, values, attn_mask=bias, scale=scale, enable_gqa=keys.shape[1] != h
        )
    kvh, n = keys.shape[1], keys.shape[2]
    scores = torch.matmul(q.reshape(b, kvh, -1, d), keys.transpose(-1, -2)).view(b, kvh, h // kvh, n_q, n)
    weights = torch.softmax(scores * scale + bias[:, :, None], dim=-1)
    return torch.matmul(weights.view(b, kvh, -1, n), values).view(b, h, n_q, d)


def _attention(
    w: LlamaWeights, i: int, x: torch.Tensor, rope: tuple, cache: KVCache, start: int, bias: torch.Tensor
) -> torch.Tensor:
    """`LlamaAttention.forward` for the L new positions `start .. start + L - 1` of x [B, L, hidden]: their keys
    and values are written into the cache, and each query attends to the cached keys with `bias` [B, 1, L,
    start + L] (`_attend`)."""
    b, n, _ = x.shape
    h, kvh, d = w.heads, w.kv_heads, w.head_dim
    qkv = w.layers[i].qkv(x).view(b, n, h + 2 * kvh, d).transpose(1, 2)
    qk = _rotate(qkv[:, : h + kvh], *rope)  # q and k rotated together: the same elementwise operations
    end = start + n
    cache.keys[i, :, :, start:end] = qk[:, h:]
    cache.values[i, :, :, start:end] = qkv[:, h + kvh :]
    out = _attend(qk[:, :h], cache.keys[i, :, :, :end], cache.values[i, :, :, :end], bias, d**-0.5)
    return w.layers[i].o(out.transpose(1, 2).reshape(b, n, h * d))


def forward(
    w: LlamaWeights, ids: torch.Tensor, rope: tuple, cache: KVCache, start: int, bias: torch.Tensor
) -> torch.Tensor:
    """Logits [B, V] of the last of the positions `start ..` holding `ids` [B, L] (`LlamaForCausalLM.forward`
    with `logits_to_keep=1`); the cache receives their keys and values."""
    x = F.embedding(ids, w.embed)
    for i, lw in enumerate(w.layers):
        x = x + _attention(w, i, _rms_norm(x, lw.attn_norm, w.eps), rope, cache, start, bias)
        gate, up = lw.gate_up(_rms_norm(x, lw.mlp_norm, w.eps)).chunk(2, dim=-1)
        x = x + lw.down(w.act(gate) * up)
    return F.linear(_rms_norm(x[:, -1], w.norm, w.eps), w.head)


def _rope_table(w: LlamaWeights, length: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [length, D] of positions 0 .. length - 1, from the model's own rotary module (a static RoPE's
    value at a position does not depend on the other positions computed with it)."""
    cos, sin = w.rotary(w.embed, torch.arange(length, device=device)[None])
    return cos[0], sin[0]


def _prefill_bias(bias: torch.Tensor) -> torch.Tensor:
    """[B, 1, P, P] attention bias of the prompt block from the cache's [B, P]: causal, pad keys masked; a pad
    query sees itself (its output is never used, and a row with no key allowed would give NaN)."""
    p = bias.shape[1]
    future = torch.ones(p, p, dtype=torch.bool, device=bias.device).triu(1)
    out = bias[:, None, :].masked_fill(future, float("-inf"))
    out.diagonal(dim1=1, dim2=2).zero_()
    return out[:, None]


def _prefill(
    w: LlamaWeights, input_ids: torch.Tensor, keep: torch.Tensor, table: tuple, pos: torch.Tensor, cache: KVCache
) -> torch.Tensor:
    """The prompt block's forward: logits [B, V] at each row's last position, its keys and values written into
    `cache`. Rows holding the same prompt (the critic's K feedbacks on one attempt, GRPO's G attempts at one
    problem) are computed once, and their keys, values and logits copied to each of those rows."""
    cos, sin = table
    b, p = input_ids.shape
    rows, inverse = torch.unique(torch.cat([input_ids, keep.long()], dim=1), dim=0, return_inverse=True)
    if rows.shape[0] == b:  # no prompt twice
        return forward(w, input_ids, (cos[pos][:, None], sin[pos][:, None]), cache, 0, _prefill_bias(cache.bias[:, :p]))
    first = torch.full((rows.shape[0],), b, dtype=torch.long, device=inverse.device)
    first = first.scatter_reduce(0, inverse, torch.arange(b, device=inverse.device), reduce="amin")
    once, at = KVCache.empty(w, keep[first], p), pos[first]
    logits = forward(w, input_ids[first], (cos[at][:, None], sin[at][:, None]), once, 0, _prefill_bias(once.bias))
    cache.keys[:, :, :, :p] = once.keys[:, inverse]
    cache.values[:, :, :, :p] = once.values[:, inverse]
    return logits[inverse]


@dataclass(frozen=True)
class Sampled:
    """Tokens and their log-probs [B, steps]; entries after a row's end-of-turn token are meaningless."""

    tokens: torch.Tensor
    logprobs: torch.Tensor


def _draw(logits: torch.Tensor, temperature: float, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row from softmax(logits / T) (T = 0: argmax of the logits) and its log-prob under that
    distribution (T = 0: under softmax(logits), as `_SampledLogprobs` records it).

    Drawn by inverting the cumulative distribution: the first token whose float64 running sum of probabilities
    exceeds u x (the total), u ~ U[0, 1) from `gen`, one number per row. A token of probability 0 never has a
    running sum above its predecessor's, so it is never drawn. (`torch.multinomial` draws one exponential per
    vocabulary entry instead, the exponential race: the same distribution, ten times slower at batch 64.)"""
    logp = torch.log_softmax(logits / temperature if temperature > 0 else logits, dim=-1)
    if temperature > 0:
        cdf = logp.exp().double().cumsum(-1)
        u = torch.rand(cdf.shape[0], 1, generator=gen, dtype=torch.float64, device=cdf.device)
        tok = torch.searchsorted(cdf, u * cdf[:, -1:], right=True).clamp_(max=cdf.shape[1] - 1).squeeze(-1)
    else:
        tok = logits.argmax(-1)
    return tok, logp.gather(-1, tok[:, None]).squeeze(-1)


@torch.no_grad()
def sample(
    model,
    input_ids: torch.Tensor,
    keep: torch.Tensor,
    max_new_tokens: int,
    temperature: float,
    eos_ids: list[int],
    gen: torch.Generator,
) -> Sampled:
    """Sample up to `max_new_tokens` tokens after each left-padded prompt row of `input_ids` [B, P] (`keep`: its
    attention mask), from the model with its adapter state of the moment (module docstring)."""
    w = llama_weights(model)
    b, p = input_ids.shape
    device = input_ids.device
    cache = KVCache.empty(w, keep.bool(), p + max_new_tokens)
    cos, sin = _rope_table(w, p + max_new_tokens, device)
    pos = (keep.long().cumsum(-1) - 1).clamp(min=0)  # real tokens before each position
    logits = _prefill(w, input_ids, keep.bool(), (cos, sin), pos, cache)
    nxt = pos[:, -1:] + 1
    eos = torch.tensor(eos_ids, device=device)
    tokens = torch.zeros(b, max_new_tokens, dtype=torch.long, device=device)
    logprobs = torch.zeros(b, max_new_tokens, device=device)
    done = torch.zeros(b, dtype=torch.bool, device=device)
    steps = 0
    for t in range(max_new_tokens):
        tok, lp = _draw(logits.float(), temperature, gen)
        tokens[:, t], logprobs[:, t] = tok, lp
        steps = t + 1
        done |= torch.isin(tok, eos)
        if t + 1 == max_new_tokens or bool(done.all()):
            break
        rope = (cos[nxt][:, None], sin[nxt][:, None])
        logits = forward(w, tok[:, None], rope, cache, p + t, cache.bias[:, None, None, : p + t + 1])
        nxt = nxt + 1
    return Sampled(tokens[:, :steps], logprobs[:, :steps])
