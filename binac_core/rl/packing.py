"""Shared-prefix packing: samples whose prompts begin alike computed in one row, the common prefix once.

A training batch repeats long prompt prefixes: GRPO's G attempts at a problem share its prompt, the critic's K
feedbacks on an attempt share the whole prompt (problem and attempt), and the K refinements after them share the
problem and the attempt. A `Group` is a set of samples packed into one row: their longest common prompt prefix
once, then each sample's rest (the rest of its prompt, then its completion) as a segment of its own. The row's
attention mask lets a segment see the prefix and, causally, itself, and nothing else, and each position keeps the
position it has in its own sequence; so every completion token is predicted from exactly its own sequence, as in
the unpacked, right-padded forward (`binac_core.rl.update.sequence_logprobs(pack=False)`), the same values up to
float rounding, with the prefix's tokens computed once for the group instead of once per sample. Gradients from
every segment flow back through the shared prefix, as they would through each copy. This is the shared-prefix
forward of Prefix Grouper (arXiv 2506.05433) written as one packed row with a block mask; verl's
`use_remove_padding` packs sequences without sharing prefixes.

Which samples share a row is a cost choice (`group_samples`): a row costs `RowCost` (per-token work plus attention
over all pairs of its positions, which a masked dense attention computes), so a group only grows while one row is
cheaper than the separate ones. `micro_batches` then orders the groups by packed length before cutting the batch
into micro-batches, so rows padded together have similar lengths (bucketing by length). Neither choice changes a
value beyond float rounding: the update's loss is one token mean over the whole batch.

Not done: sharing beyond the prompt (identical completions are computed twice), trees deeper than one level (the
refinements' prefix is shared by K samples, the problem's by G x K: one level is kept, the cheaper by `RowCost`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

ATTENTION_WEIGHT = 3.0
"""How much more a FLOP of masked attention costs than one of the projections in a training forward and backward
(the backward of attention recomputes its scores; torch's CPU attention kernel runs below the matrix products'
rate). Measured on a `testbed` update (bench/results.md, 2026-12-06): weights 2-4 gave the fastest actor and
critic passes, 1 let groups grow into rows whose attention cost more than the prefix they saved."""


@dataclass(frozen=True)
class RowCost:
    """The work of one packed row of L positions: `per_token` x L + `per_pair` x L² (the projections and MLP per
    position, the attention scores and their weighted sum per pair of positions, which a masked dense attention
    computes for every pair). Only ratios matter."""

    per_token: float
    per_pair: float

    @staticmethod
    def of(config) -> RowCost:
        """From a transformers decoder config: 2 FLOPs per weight of a layer per token; 4 x hidden FLOPs per pair
        of positions (q·k and p·v over every head), weighted by `ATTENTION_WEIGHT`. Layers scale both alike and are
        left out."""
        hidden = config.hidden_size
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or hidden // heads
        kv = getattr(config, "num_key_value_heads", heads) * head_dim
        weights = (
            hidden * (heads * head_dim + 2 * kv) + heads * head_dim * hidden + 3 * hidden * config.intermediate_size
        )
        return RowCost(2.0 * weights, ATTENTION_WEIGHT * 4.0 * heads * head_dim)

    def __call__(self, length: int) -> float:
        return self.per_token * length + self.per_pair * length * length


@dataclass(frozen=True)
class Group:
    """Samples (indices into the batch) packed into one row after their common prompt prefix of `shared` tokens."""

    members: tuple[int, ...]
    shared: int

    def length(self, lengths: Sequence[int]) -> int:
        """Positions of the packed row: the prefix once, then each member's sequence after it."""
        return self.shared + sum(lengths[i] - self.shared for i in self.members)


def _common_prefix(a: Sequence[int], b: Sequence[int], limit: int) -> int:
    n = min(limit, len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def group_samples(
    prompts: Sequence[Sequence[int]], lengths: Sequence[int], cost: RowCost, max_members: int
) -> list[Group]:
    """Groups of samples (by index) sharing a prompt prefix, in the order of their prompts (so prompts alike are
    neighbours). `lengths`: each sample's whole sequence (prompt + completion). A sample joins the group before it
    when that group's row, with the prefix now common to all of them, costs less than the two rows apart and the
    group has fewer than `max_members` samples; a sample with no common prefix is a group of its own."""
    order = sorted(range(len(prompts)), key=lambda i: (list(prompts[i]), i))
    groups: list[Group] = []
    for i in order:
        if groups and len(groups[-1].members) < max_members:
            last = groups[-1]
            shared = _common_prefix(prompts[last.members[0]], prompts[i], last.shared)
            joined = Group((*last.members, i), shared)
            if shared > 0 and cost(joined.length(lengths)) < cost(last.length(lengths)) + cost(lengths[i]):
                groups[-1] = joined
                continue
        groups.append(Group((i,), len(prompts[i])))
    return groups


def micro_batches(groups: Sequence[Group], lengths: Sequence[int], max_samples: int) -> list[list[Group]]:
    """The groups cut into micro-batches of at most `max_samples` samples each (a group is never split: its size
    is at most `max_samples`, `group_samples`), after ordering them by packed length (longest first, ties by
    their first member), so each micro-batch pads its rows to similar lengths."""
    ordered = sorted(groups, key=lambda g: (-g.length(lengths), g.members[0]))
    out: list[list[Group]] = []
    size = 0
    for g in ordered:
        if out and size + len(g.members) <= max_samples:
            out[-1].append(g)
            size += len(g.members)
        else:
            out.append([g])
            size = len(g.members)
    return out


@dataclass(frozen=True)
class PackedRows:
    """One micro-batch as packed rows: `ids`, `positions` [R, L]; `attend` [R, 1, L, L] (True: the query may attend
    to the key); for every completion token of every sample, in sample order and token order, the packed `row` and
    `col` of the position that predicts it and its `target` id; `owner` and `index`: its sample (0..B-1 in the
    order the samples were given) and its position in that sample's completion."""

    ids: torch.Tensor
    positions: torch.Tensor
    attend: torch.Tensor
    row: torch.Tensor
    col: torch.Tensor
    target: torch.Tensor
    owner: torch.Tensor
    index: torch.Tensor


PREFIX, PAD = -1, -2
"""Segment ids of a packed row's shared prefix and its padding (a sample's segment is its group position, >= 0)."""


def pack(
    prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], groups: Sequence[Group], pad_id: int
) -> PackedRows:
    """The samples (each `prompts[i] + completions[i]`) packed one row per group (module docstring), right-padded
    with `pad_id` to the longest row. Every sample must belong to exactly one group."""
    seqs = [list(p) + list(c) for p, c in zip(prompts, completions, strict=True)]
    width = max(g.length([len(s) for s in seqs]) for g in groups)
    ids = torch.full((len(groups), width), pad_id, dtype=torch.long)
    positions = torch.zeros((len(groups), width), dtype=torch.long)
    segment = torch.full((len(groups), width), PAD, dtype=torch.long)
    where: dict[int, tuple[int, int, int]] = {}  # sample -> (row, shared, start of its segment)
    for r, g in enumerate(groups):
        s = g.shared
        first = seqs[g.members[0]]
        ids[r, :s], positions[r, :s], segment[r, :s] = (
            torch.tensor(first[:s], dtype=torch.long),
            torch.arange(s),
            PREFIX,
        )
        start = s
        for j, i in enumerate(g.members):
            rest = seqs[i][s:]
            end = start + len(rest)
            ids[r, start:end] = torch.tensor(rest, dtype=torch.long)
            positions[r, start:end] = torch.arange(s, s + len(rest))
            segment[r, start:end] = j
            where[i] = (r, s, start)
            start = end
    if sorted(where) != list(range(len(seqs))):
        raise ValueError("pack: every sample must be in exactly one group")
    causal = torch.ones(width, width, dtype=torch.bool).tril()
    keys, queries = segment[:, None, :], segment[:, :, None]
    attend = causal & ((keys == PREFIX) | (keys == queries))
    row, col, target, owner, index = [], [], [], [], []
    for i, (p, c) in enumerate(zip(prompts, completions, strict=True)):
        r, s, start = where[i]
        seq_pos = torch.arange(len(p), len(p) + len(c))  # the completion's positions in its own sequence
        before = seq_pos - 1  # the positions predicting them; in the prefix only where the whole prompt is shared
        row.append(torch.full((len(c),), r, dtype=torch.long))
        col.append(torch.where(before < s, before, start + before - s))
        target.append(ids[r, start + seq_pos - s])  # a completion lies past the prefix (s <= len(p))
        owner.append(torch.full((len(c),), i, dtype=torch.long))
        index.append(torch.arange(len(c)))
    cat = torch.cat
    return PackedRows(ids, positions, attend[:, None], cat(row), cat(col), cat(target), cat(owner), cat(index))
