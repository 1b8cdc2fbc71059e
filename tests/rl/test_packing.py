"""Prefix-tree packing (`binac_core.rl.packing`): the tree of a hand-made batch (ids, positions, attention blocks,
the positions that predict each completion token, shared tokens scored once), the micro-batches' order, and on a
tiny model the packed forward's log-probs and gradients against one right-padded row per sample."""

import pytest
import torch
from tiny_checkpoint import build_checkpoint

from binac_core.foundation.config import load_config
from binac_core.model.block_attention import Block
from binac_core.rl.packing import micro_batches, pack
from binac_core.rl.update import Sample, sequence_logprobs
from binac_core.rl.update import micro_batches as update_micro_batches


def test_the_tree_holds_a_shared_prefix_once_and_each_branch_sees_it_and_itself():
    tree = pack([[1, 2, 3], [1, 2, 4]], [[5, 6], [7]])
    assert tree.ids.tolist() == [[1, 2, 3, 5, 6, 4, 7]]
    assert tree.positions.tolist() == [[0, 1, 2, 3, 4, 2, 3]]
    assert tree.blocks == (Block(0, 2), Block(2, 3, ((0, 2),)), Block(5, 2, ((0, 2),)))
    # sample 0's tokens 5, 6 sit at flat 3, 4 and are predicted from 2, 3; sample 1's 7 at 6 from 5
    assert tree.at.tolist() == [2, 3, 5] and tree.target.tolist() == [5, 6, 7]
    assert tree.scored.tolist() == [0, 1, 2]
    assert tree.owner.tolist() == [0, 0, 1] and tree.index.tolist() == [0, 1, 0]


def test_a_token_shared_by_samples_is_scored_once_and_a_chain_runs_until_it_branches():
    tree = pack([[1, 2], [1, 2], [8], [1, 2]], [[3], [3, 5], [9], [4]])
    assert tree.ids.tolist() == [[1, 2, 3, 5, 4, 8, 9]]
    assert tree.positions.tolist() == [[0, 1, 2, 3, 2, 0, 1]]
    # 1 2 branches into 3 (then 5) and 4; 8 9 is a tree of its own
    assert tree.blocks == (Block(0, 2), Block(2, 2, ((0, 2),)), Block(4, 1, ((0, 2),)), Block(5, 2))
    assert tree.target.tolist() == [3, 5, 9, 4] and tree.at.tolist() == [1, 2, 5, 1]
    assert tree.scored.tolist() == [0, 0, 1, 2, 3]  # sample 1's first token is sample 0's
    assert tree.owner.tolist() == [0, 1, 1, 2, 3] and tree.index.tolist() == [0, 0, 1, 0, 0]


def test_nested_branches_see_every_chain_above_them():
    tree = pack([[1], [1], [1]], [[2, 3], [2, 4], [5]])
    assert tree.ids.tolist() == [[1, 2, 3, 4, 5]]
    assert tree.blocks == (
        Block(0, 1),
        Block(1, 1, ((0, 1),)),
        Block(2, 1, ((0, 1), (1, 1))),
        Block(3, 1, ((0, 1), (1, 1))),
        Block(4, 1, ((0, 1),)),
    )


def test_a_sample_without_prompt_is_refused():
    with pytest.raises(ValueError, match="prompt"):
        pack([[], [2]], [[3], [4]])


def test_micro_batches_hold_neighbouring_sequences():
    seqs = [[5, 1], [1, 2], [5, 0], [1, 3]]
    assert micro_batches(seqs, 2) == [[1, 3], [2, 0]]
    assert micro_batches(seqs, 3) == [[1, 3, 2], [0]]


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    from binac_core.model.policy import Policy

    base = build_checkpoint(tmp_path_factory.mktemp("packing") / "model", hostile=False, eos_logit=2.0)
    return Policy(base, load_config("micro"), seed=0)


def _batch() -> list[Sample]:
    """Prompts shared whole, shared in part and alone; completions of different lengths, two identical and two
    sharing their beginning (one a prefix of the other)."""
    g = torch.Generator().manual_seed(0)

    def ids(n):
        return torch.randint(3, 100, (n,), generator=g).tolist()

    shared, partial = ids(12), ids(9)
    prompts = [shared, shared, shared, partial + ids(4), partial + ids(6), ids(7), shared, shared]
    completions = [ids(3 + 2 * i) for i in range(6)]
    completions += [list(completions[1]), completions[2][:3] + ids(2)]
    return [
        Sample(p, c, [0.0] * len(c), 1.0 + 0.1 * i) for i, (p, c) in enumerate(zip(prompts, completions, strict=True))
    ]


def test_packed_log_probs_entropy_and_gradients_are_the_right_padded_ones(policy):
    batch = _batch()
    params = policy.params("actor")
    for p in params:
        p.requires_grad_(True)
        with torch.no_grad():
            p.add_(0.05 * torch.randn_like(p))  # LoRA B starts at 0: give the adapter an effect
    policy.model.set_adapter("actor")
    pad = policy.tokenizer.pad_token_id
    weights = torch.tensor([s.advantage for s in batch])[:, None]
    out = {}
    for packed in (False, True):
        for p in params:
            p.grad = None
        logp, mask, entropy = sequence_logprobs(policy.model, batch, pad, 0.7, entropy="differentiable", pack=packed)
        (weights * (logp + 0.3 * entropy) * mask).sum().backward()
        out[packed] = (logp.detach(), entropy.detach(), [p.grad.clone() for p in params])
    for p in params:
        p.requires_grad_(False)
    assert torch.allclose(out[True][0], out[False][0], atol=1e-5)
    assert torch.allclose(out[True][1], out[False][1], atol=1e-5)
    for a, b in zip(out[True][2], out[False][2], strict=True):
        assert torch.allclose(a, b, atol=1e-4, rtol=1e-4)
    trees = [p.tree for _, p in update_micro_batches(batch, 8)]
    assert trees[0].ids.shape[1] < sum(len(s.prompt_ids) + len(s.token_ids) for s in batch)  # prefixes shared
    assert len(trees[0].target) < sum(len(s.token_ids) for s in batch)  # the identical completions scored once
