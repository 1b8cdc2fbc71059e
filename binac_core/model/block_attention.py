"""Attention over a flat, unpadded batch of blocks: each block of queries sees its context and, causally, itself.

A packed training batch (`binac_core.rl.packing.pack`) is one sequence of N positions without padding: the prefix
tree of a micro-batch's sequences, each unbranched chain of tree nodes contiguous. Attention is block-sparse: a node
sees its ancestors and itself. A `Block` is such a chain of queries with its context (the chains above it, in
order), which it sees whole, and itself, which it sees causally. One dense, masked L x L attention per packed row
(this module's predecessor: `packing` packed rows with a boolean [R, 1, L, L] mask) computes every pair of a row's
positions, most of them masked out, pads every row to the longest, and has SDPA turn the boolean mask into a float
one in every layer; here each block's queries meet only the keys they may see: [context, own keys].

Blocks of similar sizes are gathered into `Bucket`s, each one batched call of torch's
`scaled_dot_product_attention` on [blocks, heads, queries, keys], padded to the bucket's largest block, the padding
masked out by a float mask built once per forward and shared by its layers (`Layout.ready`), not once per layer
and call. A bucket of blocks without context is plain causal attention (the kernel's `is_causal`, no mask: right
padding lies after every real query). The outputs return to the flat order with one index. The values are those of a dense masked attention up to float rounding
(tests/model/test_block_attention.py); the work is the blocks' queries x keys (padded within a bucket) instead of
rows x L².

The decoder runs it as a transformers attention function (`AttentionInterface`) while `block_attention(model)` is
active; the layout reaches each layer as the keyword argument `block_layout`, which the decoder hands down to its
attention modules unchanged (transformers' `TransformersKwargs`). This is the varlen attention of FlashAttention's
`flash_attn_varlen_func` (cu_seqlens) extended by a context per block: the tree attention of SpecInfer (arXiv
2305.09781) and the shared-prefix layout of Prefix Grouper (arXiv 2506.05433), computed bucket by bucket.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

ATTENTION = "binac_blocks"
"""The name the block attention is registered under in transformers' `AttentionInterface`."""

BUCKET_FILL = 0.9
"""The least share of a bucket's padded [queries x keys] area that its blocks' own areas must fill: a block whose
joining would drop the bucket below it starts a new bucket. Measured on a testbed update (CPU seconds, medians of 3,
actor / critic, 2026-12-07, load about 9): 0.3 gave 1.12 / 0.88 s, 0.6 0.76 / 0.82 s, 0.8-1.0 0.66-0.83 s alike
(within the noise): padding costs more than the calls that fewer, larger buckets save."""


@dataclass(frozen=True)
class Block:
    """Queries at flat positions start .. start+length-1; they see the keys of the `context` ranges ((start,
    length) each, in order: the context's positions in their sequence) and, causally, their own."""

    start: int
    length: int
    context: tuple[tuple[int, int], ...] = ()

    @property
    def context_length(self) -> int:
        return sum(n for _, n in self.context)

    @property
    def keys(self) -> int:
        return self.context_length + self.length


@dataclass(frozen=True)
class Bucket:
    """Blocks computed in one attention call, padded to `blocks` x `queries` queries and `keys` keys. `last`
    [blocks, queries, 1]: the last key each query sees (its context and its own block up to itself; every key for a
    padding query), None for causal blocks without context; `mask` [blocks, 1, queries, keys]: the additive float
    mask it stands for (0 up to `last`, -inf after), built for a forward (`Layout.ready`), not kept."""

    blocks: int
    queries: int
    keys: int
    last: torch.Tensor | None
    mask: torch.Tensor | None = None


@dataclass(frozen=True)
class Layout:
    """A flat batch's attention: its buckets; `queries` and `keys`: the flat positions gathered as the buckets'
    queries and keys (each bucket's [blocks x queries] and [blocks x keys], flattened, one bucket after another;
    padding repeats position 0); `order` [N]: for each flat position, its row in the buckets' outputs so
    concatenated."""

    buckets: tuple[Bucket, ...]
    queries: torch.Tensor
    keys: torch.Tensor
    order: torch.Tensor

    def ready(self, device, dtype) -> Layout:
        """The layout on `device` with its masks built in `dtype` (the queries'; CUDA's kernels want it): for one
        forward, shared by its layers. A kept layout holds only `last` (8 bytes per query, not 4 per pair)."""

        def mask(b: Bucket) -> torch.Tensor | None:
            if b.last is None:
                return None
            last = b.last.to(device)
            return torch.where(torch.arange(b.keys, device=device) <= last, 0.0, float("-inf")).to(dtype)[:, None]

        buckets = tuple(Bucket(b.blocks, b.queries, b.keys, b.last, mask(b)) for b in self.buckets)
        return Layout(buckets, self.queries.to(device), self.keys.to(device), self.order.to(device))


def bucket_blocks(blocks: Sequence[Block], fill: float = BUCKET_FILL) -> list[list[Block]]:
    """Blocks into buckets: those with context and those without apart (the latter run causal, unmasked), each
    kind ordered by keys then queries (largest first) and cut greedily wherever the next block would bring the
    bucket's filled share of its padded area below `fill`."""
    out: list[list[Block]] = []
    for kind in (True, False):
        part = sorted(
            (b for b in blocks if (b.context_length > 0) == kind and b.length > 0),
            key=lambda b: (-b.keys, -b.length, b.start),
        )
        bucket: list[Block] = []
        area = q_max = k_max = 0
        for b in part:
            q, k = max(q_max, b.length), max(k_max, b.keys)
            if bucket and area + b.length * b.keys < fill * (len(bucket) + 1) * q * k:
                out.append(bucket)
                bucket, area, q, k = [], 0, b.length, b.keys
            bucket.append(b)
            area, q_max, k_max = area + b.length * b.keys, q, k
        if bucket:
            out.append(bucket)
    return out


def _ranges(starts: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The ranges starts[i] .. starts[i] + lengths[i] - 1, concatenated (one tensor op, no loop)."""
    offsets = torch.repeat_interleave(starts - (torch.cumsum(lengths, 0) - lengths), lengths)
    return torch.arange(int(lengths.sum())) + offsets


def layout(blocks: Sequence[Block], n: int, fill: float = BUCKET_FILL) -> Layout:
    """The `Layout` of a flat batch of `n` positions whose every position is a query of exactly one block."""
    buckets, queries, keys, rows, real = [], [], [], [], []
    done = 0  # padded query rows of the buckets before
    for part in bucket_blocks(blocks, fill):
        q_len = max(b.length for b in part)
        k_len = max(b.keys for b in part)
        lengths = torch.tensor([b.length for b in part])
        context = torch.tensor([b.context_length for b in part])
        starts = torch.tensor([b.start for b in part])
        slot = torch.arange(q_len)[None, :]
        valid = slot < lengths[:, None]  # [U, Q]
        q = torch.where(valid, starts[:, None] + slot, 0)  # padding: position 0
        spans = [r for b in part for r in (*b.context, (b.start, b.length))]  # every block's keys, in order
        span_starts, span_lengths = (torch.tensor(x) for x in zip(*spans, strict=True))
        k = torch.zeros(len(part), k_len, dtype=torch.long)
        k[torch.arange(k_len)[None, :] < (context + lengths)[:, None]] = _ranges(span_starts, span_lengths)
        queries.append(q.flatten())
        keys.append(k.flatten())
        real.append(q[valid])
        rows.append(done + valid.flatten().nonzero().squeeze(1))
        done += q.numel()
        last = None
        if bool((context > 0).any()):
            # query i of a block sees key j (after its context of c) where j - c <= i: the context, causally itself;
            # a padding query sees every key (no empty softmax row)
            last = torch.where(valid, slot + context[:, None], k_len)[:, :, None]
        buckets.append(Bucket(len(part), q_len, k_len, last))
    real_q = torch.cat(real) if real else torch.zeros(0, dtype=torch.long)
    if real_q.numel() != n or not torch.equal(torch.bincount(real_q, minlength=n), torch.ones(n, dtype=torch.long)):
        raise ValueError("block attention: every position must be the query of exactly one block")
    order = torch.empty(n, dtype=torch.long)
    order[real_q] = torch.cat(rows)

    def cat(x):
        return torch.cat(x) if x else torch.zeros(0, dtype=torch.long)

    return Layout(tuple(buckets), cat(queries), cat(keys), order)


def attention(module, query, key, value, attention_mask=None, dropout=0.0, scaling=None, block_layout=None, **kwargs):
    """A transformers attention function: query [1, H, N, d], key and value [1, H_kv, N, d] of a flat batch ->
    (output [1, N, H, d], None), each bucket of `block_layout` (`Layout`) one `scaled_dot_product_attention` call.
    `attention_mask` is ignored (the layout is the mask; `PLACEHOLDER_MASK` keeps transformers from building one)."""
    if query.shape[0] != 1 or dropout:
        raise ValueError("block attention needs a flat batch (one row) and no dropout")
    if any(b.last is not None and b.mask is None for b in block_layout.buckets):
        raise ValueError("block attention: a layout's masks are built for a forward (`Layout.ready`)")
    heads = query.shape[1]
    q = query[0].transpose(0, 1)  # [N, H, d]
    k = key[0].transpose(0, 1)
    v = value[0].transpose(0, 1)
    if k.shape[1] != heads:  # grouped-query attention: each key/value head serves heads / H_kv query heads
        k = k.repeat_interleave(heads // k.shape[1], dim=1)
        v = v.repeat_interleave(heads // v.shape[1], dim=1)

    every_q = q.index_select(0, block_layout.queries).split([b.blocks * b.queries for b in block_layout.buckets])
    every_k = k.index_select(0, block_layout.keys).split([b.blocks * b.keys for b in block_layout.buckets])
    every_v = v.index_select(0, block_layout.keys).split([b.blocks * b.keys for b in block_layout.buckets])
    outs = []
    for b, qb, kb, vb in zip(block_layout.buckets, every_q, every_k, every_v, strict=True):
        o = torch.nn.functional.scaled_dot_product_attention(
            qb.view(b.blocks, b.queries, heads, -1).transpose(1, 2),
            kb.view(b.blocks, b.keys, heads, -1).transpose(1, 2),
            vb.view(b.blocks, b.keys, heads, -1).transpose(1, 2),
            attn_mask=b.mask if b.mask is None or b.mask.dtype == q.dtype else b.mask.to(q.dtype),
            is_causal=b.last is None,
            scale=scaling,
        )  # [blocks, heads, queries, d]
        outs.append(o.transpose(1, 2).reshape(b.blocks * b.queries, heads, -1))
    out = torch.cat(outs).index_select(0, block_layout.order)
    return out.unsqueeze(0), None


PLACEHOLDER_MASK = torch.ones(1, 1, 1, 1, dtype=torch.bool)
"""The `attention_mask` a block forward passes: a 4D mask, which transformers hands to the attention unchanged
(`masking_utils._preprocess_mask_arguments`) instead of building an N x N one (from tree positions it would see
packed sequences); `attention` ignores it."""


def _dispatch(fallback: str):
    """An attention function: `attention` where the call carries a `block_layout`, else `fallback`'s."""
    from transformers import AttentionInterface
    from transformers.models.llama.modeling_llama import eager_attention_forward

    def forward(module, query, key, value, attention_mask, block_layout=None, **kwargs):
        if block_layout is not None:
            return attention(module, query, key, value, attention_mask, block_layout=block_layout, **kwargs)
        other = AttentionInterface().get_interface(fallback, eager_attention_forward)
        return other(module, query, key, value, attention_mask, **kwargs)

    return forward


@contextlib.contextmanager
def block_attention(model) -> Iterator[None]:
    """Within the block, `model`'s decoder attends through `attention` in every forward given a `block_layout`
    (with `PLACEHOLDER_MASK`; the layout `Layout.ready`), and as before in every other: its config's attention implementation is set to
    `ATTENTION`:<the one before>, which dispatches on `block_layout` and builds masks as the one before did;
    restored afterwards. Nested blocks leave it as the outer one set it."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = base.config
    before = config._attn_implementation
    if before is None or before.startswith(ATTENTION):
        yield
        return
    name = f"{ATTENTION}:{before}"
    AttentionInterface.register(name, _dispatch(before))
    if before in ALL_MASK_ATTENTION_FUNCTIONS._global_mapping:
        AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS._global_mapping[before])
    config._attn_implementation = name
    try:
        yield
    finally:
        config._attn_implementation = before
