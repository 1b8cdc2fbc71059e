"""Block attention (`binac_core.model.block_attention`) on hand-made layouts: outputs and gradients equal a dense
attention under the equivalent boolean mask, blocks are bucketed by size, and a layout must cover every position."""

import pytest
import torch

from binac_core.model.block_attention import Block, attention, bucket_blocks, layout


def _dense(q, k, v, blocks, n, scale):
    """Reference: one [N, N] mask (a query sees its block's context and, causally, its own block), plain softmax."""
    see = torch.zeros(n, n, dtype=torch.bool)
    for b in blocks:
        for i in range(b.start, b.start + b.length):
            for s, m in b.context:
                see[i, s : s + m] = True
            see[i, b.start : i + 1] = True
    if k.shape[1] != q.shape[1]:
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    scores = (q @ k.transpose(-1, -2)) * scale
    return torch.softmax(scores.masked_fill(~see, float("-inf")), dim=-1) @ v  # [1, H, N, d]


TREE = (
    Block(0, 3),  # a prefix
    Block(3, 4, ((0, 3),)),  # a branch under it
    Block(7, 1, ((0, 3), (3, 4))),  # nested: sees both chains above it
    Block(8, 2, ((0, 3), (3, 4))),
    Block(10, 5, ((0, 3),)),
    Block(15, 2),  # a tree of its own
    Block(17, 6),
)


@pytest.mark.parametrize("kv_heads", [4, 2])
@pytest.mark.parametrize("fill", [0.0, 0.6, 1.0])
def test_outputs_and_gradients_are_the_dense_masked_ones(kv_heads, fill):
    g = torch.Generator().manual_seed(0)
    n, heads, d, scale = 23, 4, 8, 8**-0.5
    q = torch.randn(1, heads, n, d, generator=g, requires_grad=True)
    k = torch.randn(1, kv_heads, n, d, generator=g, requires_grad=True)
    v = torch.randn(1, kv_heads, n, d, generator=g, requires_grad=True)
    weight = torch.randn(1, n, heads, d, generator=g)
    grads = []
    for packed in (True, False):
        if packed:
            out, _ = attention(None, q, k, v, scaling=scale, block_layout=layout(TREE, n, fill).ready("cpu", q.dtype))
        else:
            out = _dense(q, k, v, TREE, n, scale).transpose(1, 2)
        (out * weight).sum().backward()
        grads.append((out.detach(), *(t.grad.clone() for t in (q, k, v))))
        for t in (q, k, v):
            t.grad = None
    for a, b in zip(*grads, strict=True):
        assert torch.allclose(a, b, atol=1e-5)


def test_blocks_are_bucketed_by_kind_and_size():
    blocks = [Block(0, 10), Block(10, 9), Block(19, 2), Block(21, 3, ((0, 10),)), Block(24, 3, ((19, 2),))]
    # with context first: 3 x 13 and 3 x 5 fill 54 of 2 x 3 x 13 = 78 (0.69); without: 10² + 9² fill 181 of 200,
    # a third block of 2² would leave 185 of 300
    buckets = bucket_blocks(blocks, fill=0.8)
    assert buckets == [[blocks[3]], [blocks[4]], [blocks[0], blocks[1]], [blocks[2]]]
    assert bucket_blocks(blocks, fill=0.6)[0] == [blocks[3], blocks[4]]
    assert len(bucket_blocks(blocks, fill=0.0)) == 2


def test_the_layout_covers_every_position_exactly_once():
    with pytest.raises(ValueError, match="exactly one block"):
        layout([Block(0, 2)], 3)
    with pytest.raises(ValueError, match="exactly one block"):
        layout([Block(0, 2), Block(1, 2)], 3)
