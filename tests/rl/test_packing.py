"""Shared-prefix packing (`binac_core.rl.packing`): which samples share a row, the packed row of a hand-made batch
(ids, positions, mask, the positions that predict each completion token), the micro-batches' order, and on a tiny
model the packed forward's log-probs and gradients against one right-padded row per sample."""

import pytest
import torch
from tiny_checkpoint import build_checkpoint

from binac_core.foundation.config import load_config
from binac_core.rl.packing import Group, RowCost, group_samples, micro_batches, pack
from binac_core.rl.update import Sample, sequence_logprobs
from binac_core.rl.update import micro_batches as update_micro_batches

LINEAR = RowCost(1.0, 0.0)
"""A cost without attention: sharing any prefix pays."""


def test_samples_sharing_a_prefix_share_a_row_and_the_prefix_is_common_to_all():
    prompts = [[1, 2, 3], [9, 9], [1, 2, 4], [1, 2, 3]]
    lengths = [5, 4, 6, 4]
    groups = group_samples(prompts, lengths, LINEAR, max_members=8)
    # sorted by prompt: [1,2,3] (0), [1,2,3] (3), [1,2,4] (2), then [9,9] (1) alone
    assert groups == [Group((0, 3, 2), 2), Group((1,), 2)]
    assert groups[0].length(lengths) == 2 + 3 + 2 + 4


def test_a_group_stops_growing_at_max_members_and_where_attention_outweighs_the_prefix():
    prompts = [[1, 2, 3]] * 3
    assert group_samples(prompts, [4, 4, 4], LINEAR, max_members=2) == [Group((0, 1), 3), Group((2,), 3)]
    # one token of prefix saved, but one row of 7 costs 49 in attention against 2 x 16 for two rows of 4
    quadratic = RowCost(0.0, 1.0)
    assert group_samples([[1, 5], [1, 6]], [4, 4], quadratic, 8) == [Group((0,), 2), Group((1,), 2)]


def test_the_packed_row_holds_the_prefix_once_and_each_segment_sees_the_prefix_and_itself():
    rows = pack([[1, 2, 3], [1, 2, 4]], [[5, 6], [7]], [Group((0, 1), 2)], pad_id=0)
    assert rows.ids.tolist() == [[1, 2, 3, 5, 6, 4, 7]]
    assert rows.positions.tolist() == [[0, 1, 2, 3, 4, 2, 3]]
    attend = rows.attend[0, 0].int().tolist()
    assert attend[1] == [1, 1, 0, 0, 0, 0, 0]  # prefix: causal
    assert attend[4] == [1, 1, 1, 1, 1, 0, 0]  # sample 0's last token: prefix and its own segment
    assert attend[5] == [1, 1, 0, 0, 0, 1, 0]  # sample 1's first rest token: the prefix and itself only
    assert attend[6] == [1, 1, 0, 0, 0, 1, 1]
    # sample 0's tokens 5, 6 sit at columns 3, 4 and are predicted from 2, 3; sample 1's 7 at 6 from 5
    assert rows.col.tolist() == [2, 3, 5] and rows.target.tolist() == [5, 6, 7]
    assert rows.owner.tolist() == [0, 0, 1] and rows.index.tolist() == [0, 1, 0]


def test_a_wholly_shared_prompt_predicts_each_first_token_from_the_prefix_and_rows_are_padded():
    rows = pack([[1, 2], [1, 2], [8]], [[3], [4, 5], [9]], [Group((0, 1), 2), Group((2,), 1)], pad_id=0)
    assert rows.ids.tolist() == [[1, 2, 3, 4, 5], [8, 9, 0, 0, 0]]
    assert rows.col.tolist() == [1, 1, 3, 0] and rows.row.tolist() == [0, 0, 0, 1]
    assert rows.target.tolist() == [3, 4, 5, 9]
    assert rows.attend[1, 0, 1].int().tolist() == [1, 1, 0, 0, 0]  # no real token sees padding
    assert bool(rows.attend[1, 0, 3, 3])  # a padding query sees itself at least (no empty softmax row)


def test_a_sample_in_no_group_is_refused():
    with pytest.raises(ValueError, match="exactly one group"):
        pack([[1], [2]], [[3], [4]], [Group((0,), 1)], pad_id=0)


def test_micro_batches_order_groups_longest_first_and_keep_each_whole():
    groups = [Group((0,), 1), Group((1, 2), 1), Group((3,), 1)]
    lengths = [2, 5, 5, 12]
    assert micro_batches(groups, lengths, max_samples=2) == [[Group((3,), 1)], [Group((1, 2), 1)], [Group((0,), 1)]]
    assert micro_batches(groups, lengths, max_samples=3) == [[Group((3,), 1), Group((1, 2), 1)], [Group((0,), 1)]]


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    from binac_core.model.policy import Policy

    base = build_checkpoint(tmp_path_factory.mktemp("packing") / "model", hostile=False, eos_logit=2.0)
    return Policy(base, load_config("micro"), seed=0)


def _batch() -> list[Sample]:
    """Three prompts, each with completions of different lengths: a group of shared prompts, a group sharing part
    of a prompt, a sample alone."""
    g = torch.Generator().manual_seed(0)

    def ids(n):
        return torch.randint(3, 100, (n,), generator=g).tolist()

    shared, partial = ids(12), ids(9)
    prompts = [shared, shared, shared, partial + ids(4), partial + ids(6), ids(7)]
    return [Sample(p, ids(3 + 2 * i), [0.0] * (3 + 2 * i), 1.0) for i, p in enumerate(prompts)]


def test_packed_log_probs_and_gradients_are_the_right_padded_ones(policy):
    batch = _batch()
    params = policy.params("actor")
    for p in params:
        p.requires_grad_(True)
        with torch.no_grad():
            p.add_(0.05 * torch.randn_like(p))  # LoRA B starts at 0: give the adapter an effect
    policy.model.set_adapter("actor")
    pad = policy.tokenizer.pad_token_id
    out = {}
    for packed in (False, True):
        for p in params:
            p.grad = None
        logp, mask = sequence_logprobs(policy.model, batch, pad, 0.7, pack=packed)
        (logp * mask).sum().backward()
        out[packed] = (logp.detach(), [p.grad.clone() for p in params])
    for p in params:
        p.requires_grad_(False)
    assert torch.allclose(out[True][0], out[False][0], atol=1e-5)
    for a, b in zip(out[True][1], out[False][1], strict=True):
        assert torch.allclose(a, b, atol=1e-4, rtol=1e-4)
    groups = [g for _, gs in update_micro_batches(policy.model, batch, 8) for g in gs]
    assert sorted(len(g.members) for g in groups)[-1] >= 2  # the shared prompts did share a row
