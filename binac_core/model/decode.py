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
unpadded sequence (`binac_core.rl.update.sequence_logprobs`, which runs right-padded from position 0).

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
its first end-of-turn id; the loop ends when every row has stopped or after `max_new_tokens` steps. Every step draws
one uniform number per row of the batch, finished or not, so the random numbers of a row do not depend on when the
others finished.

What is computed, and what is not (`sample`):
- the prefill runs the projections and the MLP on the prompts' real positions only (`_last_hidden`'s `real`); the
  padding enters the attention as zero keys and values, masked out, so a real position's outputs are unchanged;
  it runs a few prompts at a time (`prefill`), so that their activations stay in the cache;
- a finished row stops being computed: once the unfinished rows are at most `COMPACT_AT` of the rows computed, the
  others are dropped from the step's inputs and from the KV cache (`KVCache.rows`), keeping at least `MIN_ROWS`;
- the merged weights can be computed once for several calls (`sample`'s `weights`).
None of this changes a computed number: every operation of a step is row-wise except the matmuls, and a row of a
matmul does not depend on the other rows as long as there are at least `MIN_ROWS` of them (`MIN_ROWS`). So the
tokens and log-probs of a row are bitwise those of the batch computed whole, on the CPU (measured with MKL; a GPU's
BLAS may pick another kernel for another number of rows, which changes roundings, not the distribution).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F  # noqa: N812

STATIC_ROPE = ("default", "linear", "llama3")
"""RoPE types whose frequencies do not depend on the sequence length (transformers' `dynamic_rope_update` leaves
them alone), so a cos/sin table computed once per call is exactly what the model computes per step."""

MIN_ROWS = 4
"""The fewest rows a matmul runs on once the loop leaves the batch's own shape (packed prompts, compacted rows). An
output row of `F.linear` is bitwise the same whatever the other rows of the input, for every number of rows from 4
up (measured on torch 2.13's MKL sgemm, 1 thread, at the shapes of smol, micro, tiny and testbed: every subset of
4 to 3,200 rows against the whole); 1 to 3 rows take another kernel, whose roundings differ."""

CACHE_STEP = 32
"""The KV cache grows by this many positions at a time (`KVCache.grown`): a decode step attends over the cache's
whole capacity, a contiguous block (a slice of a larger buffer would make its matmuls read a strided batch, about
1.5x slower at testbed sizes, bench/results.md), with the positions not yet written masked; growing in steps keeps
the masked positions few."""
ATTEND_CHUNK = 1 << 17
"""Attention scores computed at once (`_attend`): 512 KiB of float32, so that a chunk and the softmax's output fit
in a core's 1-2 MiB L2 cache."""

PREFILL_POSITIONS = 512
"""Prompt positions a prefill chunk holds at most (`prefill`), unless one prompt is longer: at smol's sizes its
widest activation (gate/up, 512 x 3072 floats, 6 MiB) and a layer's weights (14 MB) fit in a 32 MiB L3 cache."""

COMPACT_AT = 0.75
"""Finished rows are dropped from the computation (`_kept_rows`) once the unfinished ones are at most this share of
the rows computed: each compaction copies the KV cache's remaining rows, so it waits until it saves a quarter."""


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
    """Keys and values of every layer, [layers, B, kv_heads, capacity, D] each: the prompt width plus up to
    `CACHE_STEP` answer positions, grown as the answers grow (`grown`); `bias` [B, capacity] is added to the
    attention scores: 0 where a query may attend, -inf on left padding and on positions not yet written (`open`)."""

    keys: torch.Tensor
    values: torch.Tensor
    bias: torch.Tensor

    @staticmethod
    def empty(w: LlamaWeights, keep_prompt: torch.Tensor, capacity: int) -> KVCache:
        b, width = keep_prompt.shape
        shape = (len(w.layers), b, w.kv_heads, capacity, w.head_dim)
        bias = w.embed.new_zeros(b, capacity)
        bias[:, :width].masked_fill_(~keep_prompt, float("-inf"))
        bias[:, width:] = float("-inf")  # not yet written (`open`)
        return KVCache(w.embed.new_zeros(shape), w.embed.new_zeros(shape), bias)

    def grown(self, capacity: int) -> KVCache:
        """A copy with room for `capacity` positions, the new ones zero and masked."""
        old = self.keys.shape[3]
        keys = self.keys.new_zeros((*self.keys.shape[:3], capacity, self.keys.shape[4]))
        values = torch.zeros_like(keys)
        keys[:, :, :, :old], values[:, :, :, :old] = self.keys, self.values
        bias = self.bias.new_full((self.bias.shape[0], capacity), float("-inf"))
        bias[:, :old] = self.bias
        return KVCache(keys, values, bias)

    def open(self, position: int) -> None:
        """Let queries attend to `position` (a generated token's, written by the step that computes it)."""
        self.bias[:, position] = 0.0

    def part(self, rows: slice) -> KVCache:
        """The cache of the batch rows `rows`: views of this cache's buffers."""
        return KVCache(self.keys[:, rows], self.values[:, rows], self.bias[rows])

    def rows(self, index: torch.Tensor, end: int) -> KVCache:
        """The cache of the batch rows `index` (ascending) alone, their first `end` positions moved in place to the
        buffers' first rows (a row is only ever moved to a lower one, after the rows below it have been read); the
        result's keys and values are views of this cache's buffers, whose other rows it overwrites."""
        for j, r in enumerate(index.tolist()):
            if j != r:
                self.keys[:, j, :, :end] = self.keys[:, r, :, :end]
                self.values[:, j, :, :end] = self.values[:, r, :, :end]
        m = index.numel()
        return KVCache(self.keys[:, :m], self.values[:, :m], self.bias[index])


def _attend(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, bias: torch.Tensor, scale: float):
    """softmax(q k^T x scale + bias) v, the math of `F.scaled_dot_product_attention` and of transformers'
    `eager_attention_forward`, for q [B, h, L, D], keys/values [B, kv_heads, n, D], bias [B, 1, L, n]
    (`_attend_rows`), computed `ATTEND_CHUNK` scores at a time: a few batch rows per chunk, whose scores stay in
    the core's cache between the five operations that pass over them (the prompt's block at the prefill; a decode
    step's scores are one chunk). The batch rows are independent, so the chunks change no number."""
    b, h, n_q, _ = q.shape
    step = max(1, ATTEND_CHUNK // (h * n_q * keys.shape[2]))
    if step >= b:
        return _attend_rows(q, keys, values, bias, scale)
    chunks = range(0, b, step)
    return torch.cat([_attend_rows(*(t[i : i + step] for t in (q, keys, values, bias)), scale) for i in chunks])


def _attend_rows(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, bias: torch.Tensor, scale: float):
    """`_attend` in one piece. Grouped-query attention without `repeat_kv`'s copies: query head j reads key/value
    head j // (h / kv_heads), as there. (Explicit rather than SDPA: at decode sizes SDPA's dispatch costs more
    than these few matmul-sized ops.) Scaled and biased in place: the same roundings as `scores * scale + bias`."""
    b, h, n_q, d = q.shape
    kvh, n = keys.shape[1], keys.shape[2]
    scores = torch.matmul(q.reshape(b, kvh, -1, d), keys.transpose(-1, -2)).view(b, kvh, h // kvh, n_q, n)
    weights = torch.softmax(scores.mul_(scale).add_(bias[:, :, None]), dim=-1)
    return torch.matmul(weights.view(b, kvh, -1, n), values).view(b, h, n_q, d)


class Positions:
    """Which of the positions of a [B, L] block are computed: all (`real` None), or the flat indices `real` into
    B x L (row-major) of those that are, the others being left padding (`_packed_prompt`)."""

    def __init__(self, b: int, n: int, real: torch.Tensor | None = None):
        self.b, self.n, self.real = b, n, real
        self._full: torch.Tensor | None = None

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        """[B, L, C] of the computed rows x [N, C] (x itself when all are), zeros at the others. A view of one
        buffer per width C, zeroed once and rewritten at the computed rows on each call: it holds the last call's
        values only."""
        if self.real is None:
            return x
        if self._full is None or self._full.shape[1] != x.shape[-1]:
            self._full = x.new_zeros(self.b * self.n, x.shape[-1])
        return self._full.index_copy_(0, self.real, x).view(self.b, self.n, -1)

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """The computed rows [N, C] of x [B, L, C] (x itself when all are)."""
        return x if self.real is None else x.reshape(self.b * self.n, -1).index_select(0, self.real)

    def last(self, x: torch.Tensor) -> torch.Tensor:
        """[B, C]: each row's last position, of x [B, L, C] or of the computed rows x [N, C] (a row's last position
        is computed: the padding is on the left)."""
        if self.real is None:
            return x[:, -1]
        return x[torch.bincount(self.real // self.n, minlength=self.b).cumsum(0) - 1]


def _attention(
    w: LlamaWeights, i: int, x: torch.Tensor, rope: tuple, cache: KVCache, start: int, bias: torch.Tensor, at: Positions
) -> torch.Tensor:
    """`LlamaAttention.forward` for the L new positions `start .. start + L - 1` of x ([B, L, hidden], or the
    computed positions of `at` [N, hidden]): their keys and values are written into the cache (zeros at positions
    not computed), and each query attends to the cached keys with `bias` [B, 1, L, start + L] (`_attend`)."""
    b, n = at.b, at.n
    h, kvh, d = w.heads, w.kv_heads, w.head_dim
    qkv = at.unpack(w.layers[i].qkv(x)).view(b, n, h + 2 * kvh, d).transpose(1, 2)
    qk = _rotate(qkv[:, : h + kvh], *rope)  # q and k rotated together: the same elementwise operations
    end = start + n
    cache.keys[i, :, :, start:end] = qk[:, h:]
    cache.values[i, :, :, start:end] = qkv[:, h + kvh :]
    seen = bias.shape[-1]  # the cached positions attended to: `end`, or the whole capacity at a decode step
    out = _attend(qk[:, :h], cache.keys[i, :, :, :seen], cache.values[i, :, :, :seen], bias, d**-0.5)
    return w.layers[i].o(at.pack(out.transpose(1, 2).reshape(b, n, h * d)))


def forward(
    w: LlamaWeights,
    ids: torch.Tensor,
    rope: tuple,
    cache: KVCache,
    start: int,
    bias: torch.Tensor,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Logits [B, V] of the last of the positions `start ..` holding `ids` [B, L] (`LlamaForCausalLM.forward`
    with `logits_to_keep=1`), written into `out` if given; the cache receives their keys and values."""
    return _logits(w, _last_hidden(w, ids, rope, cache, start, bias), out)


def _logits(w: LlamaWeights, hidden: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """The final norm and the LM head of last positions' hidden states [B, hidden] (`F.linear`'s matmul, into
    `out` if given)."""
    return torch.matmul(_rms_norm(hidden, w.norm, w.eps), w.head.t(), out=out)


def _last_hidden(
    w: LlamaWeights,
    ids: torch.Tensor,
    rope: tuple,
    cache: KVCache,
    start: int,
    bias: torch.Tensor,
    real: torch.Tensor | None = None,
) -> torch.Tensor:
    """`forward` up to the final norm: the last position's hidden state [B, hidden]. With `real` (flat indices
    into B x L of the real positions, every row's last one among them), the projections and the MLP run on those
    positions only and the others enter the attention as zeros: the prefill of left-padded prompts
    (`_packed_prompt`)."""
    at = Positions(*ids.shape, real)
    x = F.embedding(ids if real is None else ids.reshape(-1)[real], w.embed)
    for i, lw in enumerate(w.layers):
        x = x + _attention(w, i, _rms_norm(x, lw.attn_norm, w.eps), rope, cache, start, bias, at)
        gate, up = lw.gate_up(_rms_norm(x, lw.mlp_norm, w.eps)).chunk(2, dim=-1)
        x = x + lw.down(w.act(gate) * up)
    return at.last(x)


def prefill(
    w: LlamaWeights, ids: torch.Tensor, keep: torch.Tensor, rope: tuple, cache: KVCache, out: torch.Tensor | None = None
) -> torch.Tensor:
    """`forward` of the left-padded prompt block `ids` [B, P] (`keep`: its attention mask) from position 0, in
    chunks of prompt rows (`_prompt_chunks`), each packed (`_packed_prompt`), the final norm and the LM head once
    over all rows. A chunk's activations and a layer's weights stay in the last-level cache between the layer's
    operations, where the whole block's would not (smol, 32 prompts of ~100 tokens: 28 MB per activation)."""
    p = ids.shape[1]
    hidden = [
        _last_hidden(
            w,
            ids[c],
            tuple(t[c] for t in rope),
            cache.part(c),
            0,
            _prefill_bias(cache.bias[c, :p]),
            _packed_prompt(keep[c]),
        )
        for c in _prompt_chunks(keep)
    ]
    return _logits(w, torch.cat(hidden), out)


def prefill_distinct(
    w: LlamaWeights, ids: torch.Tensor, keep: torch.Tensor, rope: tuple, cache: KVCache, out: torch.Tensor | None = None
) -> torch.Tensor:
    """`prefill`, each distinct prompt once: rows holding the same prompt (the critic's K feedbacks on one attempt,
    GRPO's G attempts at one problem) get the keys, values and logits of its first row, copied. Done only where
    there are at least `MIN_ROWS` distinct prompts, so each row's numbers are bitwise those of the whole block."""
    b, p = ids.shape
    rows, inverse = torch.unique(torch.cat([ids, keep.long()], dim=1), dim=0, return_inverse=True)
    if rows.shape[0] == b or rows.shape[0] < MIN_ROWS:
        return prefill(w, ids, keep, rope, cache, out)
    first = torch.full((rows.shape[0],), b, dtype=torch.long, device=ids.device)
    first = first.scatter_reduce(0, inverse, torch.arange(b, device=ids.device), reduce="amin")
    once = KVCache.empty(w, keep[first], p)
    logits = prefill(w, ids[first], keep[first], tuple(t[first] for t in rope), once)
    cache.keys[:, :, :, :p] = once.keys[:, inverse]
    cache.values[:, :, :, :p] = once.values[:, inverse]
    return torch.index_select(logits, 0, inverse, out=out) if out is not None else logits[inverse]


def _prompt_chunks(keep: torch.Tensor) -> list[slice]:
    """Consecutive rows of the prompt block (`keep` [B, P]) of about `PREFILL_POSITIONS` positions each; the whole
    block as one chunk if a chunk would compute fewer than `MIN_ROWS` positions (its matmuls' kernel would
    change)."""
    b, p = keep.shape
    rows = max(1, PREFILL_POSITIONS // p)
    chunks = [slice(i, min(i + rows, b)) for i in range(0, b, rows)]
    computed = [keep[c].numel() if _packed_prompt(keep[c]) is None else int(keep[c].sum()) for c in chunks]
    return chunks if min(computed) >= MIN_ROWS else [slice(0, b)]


def _packed_prompt(keep: torch.Tensor) -> torch.Tensor | None:
    """Flat indices of the real positions of the left-padded prompt block (`keep` [B, P], its attention mask), or
    None where there is no padding or fewer than `MIN_ROWS` real positions (packing would change a matmul's
    kernel)."""
    flat = keep.reshape(-1)
    if bool(flat.all()):
        return None
    real = flat.nonzero().squeeze(1)
    return real if real.numel() >= MIN_ROWS else None


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


@dataclass(frozen=True)
class Sampled:
    """Tokens and their log-probs [B, steps]; entries after a row's end-of-turn token are meaningless."""

    tokens: torch.Tensor
    logprobs: torch.Tensor


@dataclass(frozen=True)
class Scratch:
    """One call's buffers for a step's [rows, vocabulary] tensors: logits, log-probs, probabilities (or scaled
    logits before them) and float64 cumulative sums. Tensors of this size (MiBs) made afresh at every step would
    each be mapped and faulted in anew (`binac_core.model.memory.map_large_blocks`): half of `_draw`'s time at
    smol's batch 32. A step of M rows uses the buffers' first M rows (`rows`)."""

    logits: torch.Tensor
    logp: torch.Tensor
    probs: torch.Tensor
    cdf: torch.Tensor

    @staticmethod
    def empty(rows: int, vocab: int, like: torch.Tensor) -> Scratch:
        f32 = like.new_empty(rows, vocab, dtype=torch.float32)
        f64 = like.new_empty(rows, vocab, dtype=torch.float64)
        return Scratch(f32, torch.empty_like(f32), torch.empty_like(f32), f64)

    def rows(self, m: int) -> Scratch:
        return Scratch(self.logits[:m], self.logp[:m], self.probs[:m], self.cdf[:m])


def _draw(
    logits: torch.Tensor,
    temperature: float,
    gen: torch.Generator,
    rows: torch.Tensor,
    batch: int,
    scratch: Scratch | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row from softmax(logits / T) (T = 0: argmax of the logits) and its log-prob under that
    distribution (T = 0: under softmax(logits), as `_SampledLogprobs` records it). `logits` [M, V] are those of
    the batch rows `rows` [M] of a batch of `batch` rows; the intermediate [M, V] tensors go into `scratch`'s
    buffers (fresh ones without).

    Drawn by inverting the cumulative distribution: the first token whose float64 running sum of probabilities
    exceeds u x (the total), u ~ U[0, 1) from `gen`, one number per row of the batch (`batch` of them, whichever
    rows are computed; row r uses the r-th). A token of probability 0 never has a running sum above its
    predecessor's, so it is never drawn. (`torch.multinomial` draws one exponential per vocabulary entry instead,
    the exponential race: the same distribution, ten times slower at batch 64.) T = 1 divides by nothing: x / 1
    is x."""
    s = scratch or Scratch.empty(*logits.shape, logits)
    scaled = torch.div(logits, temperature, out=s.probs) if temperature > 0 and temperature != 1 else logits
    logp = torch.log_softmax(scaled, -1, out=s.logp)
    if temperature > 0:
        cdf = s.cdf.copy_(torch.exp(logp, out=s.probs)).cumsum_(-1)  # float64 sums (the cast is exact)
        u = torch.rand(batch, 1, generator=gen, dtype=torch.float64, device=cdf.device)
        u = u if rows.numel() == batch else u[rows]
        tok = torch.searchsorted(cdf, u * cdf[:, -1:], right=True).clamp_(max=cdf.shape[1] - 1).squeeze(-1)
    else:
        tok = logits.argmax(-1)
    return tok, logp.gather(-1, tok[:, None]).squeeze(-1)


def _kept_rows(unfinished: torch.Tensor, count: int, batch: int) -> torch.Tensor | None:
    """Which of the rows computed to keep computing (indices into them, in order), given which are unfinished
    [M] and how many (`count`), or None to keep them all: the unfinished ones once they are at most `COMPACT_AT`
    of the M, topped up with the first finished ones to `MIN_ROWS` (fewer rows would change the matmuls'
    kernel); never fewer than `batch` rows when the batch itself has fewer than `MIN_ROWS`."""
    m = unfinished.numel()
    floor = min(MIN_ROWS, batch)
    if m <= floor or count > COMPACT_AT * m:
        return None
    keep = unfinished
    if count < floor:
        keep = unfinished.clone()
        keep[(~unfinished).nonzero().squeeze(1)[: floor - count]] = True
    return keep.nonzero().squeeze(1)


@torch.no_grad()
def sample(
    model,
    input_ids: torch.Tensor,
    keep: torch.Tensor,
    max_new_tokens: int,
    temperature: float,
    eos_ids: list[int],
    gen: torch.Generator,
    weights: LlamaWeights | None = None,
) -> Sampled:
    """Sample up to `max_new_tokens` tokens after each left-padded prompt row of `input_ids` [B, P] (`keep`: its
    attention mask), from the model with its adapter state of the moment (module docstring); `weights`: that
    state's `llama_weights(model)` when the caller has it already (several batches of one adapter state)."""
    w = weights or llama_weights(model)
    b, p = input_ids.shape
    device = input_ids.device
    cache = KVCache.empty(w, keep.bool(), p + min(max_new_tokens, CACHE_STEP))
    cos, sin = _rope_table(w, p + max_new_tokens, device)
    pos = (keep.long().cumsum(-1) - 1).clamp(min=0)  # real tokens before each position
    scratch = Scratch.empty(b, w.head.shape[0], w.head)
    logits = prefill_distinct(w, input_ids, keep.bool(), (cos[pos][:, None], sin[pos][:, None]), cache, scratch.logits)
    nxt = pos[:, -1:] + 1
    eos = torch.tensor(eos_ids, device=device)
    tokens = torch.zeros(b, max_new_tokens, dtype=torch.long, device=device)
    logprobs = torch.zeros(b, max_new_tokens, device=device)
    rows = torch.arange(b, device=device)  # the batch rows computed
    unfinished = torch.ones(b, dtype=torch.bool, device=device)  # of those rows
    steps = 0
    for t in range(max_new_tokens):
        tok, lp = _draw(logits, temperature, gen, rows, b, scratch.rows(rows.numel()))
        tokens[rows, t], logprobs[rows, t] = tok, lp
        steps = t + 1
        unfinished &= ~torch.isin(tok, eos)
        count = int(unfinished.sum())
        if t + 1 == max_new_tokens or count == 0:
            break
        kept = _kept_rows(unfinished, count, b)
        if kept is not None:
            cache = cache.rows(kept, p + t)
            rows, tok, nxt, unfinished = (x[kept] for x in (rows, tok, nxt, unfinished))
        rope = (cos[nxt][:, None], sin[nxt][:, None])
        out = scratch.logits[: rows.numel()]
        if p + t == cache.keys.shape[3]:
            cache = cache.grown(min(p + max_new_tokens, p + t + CACHE_STEP))
        cache.open(p + t)
        logits = forward(w, tok[:, None], rope, cache, p + t, cache.bias[:, None, None, :], out)
        nxt = nxt + 1
    return Sampled(tokens[:, :steps], logprobs[:, :steps])
