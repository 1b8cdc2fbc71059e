"""One policy-gradient update of a LoRA adapter on a batch of sampled completions.

Each `Sample` carries exactly the token ids the backend sampled, the full prompt they were conditioned on (for a
refinement: problem, first attempt and feedback) and the sampling log-probs, so the loss scores the refinement
on-policy in its real context; training a refinement as if the critique were absent is the off-policy failure
reported for critique-guided GRPO (critique-GRPO issue #6).

An update = `passes` full passes over the batch; each pass accumulates gradients over micro-batches of at most
`train.micro_batch_size` sequences, normalised by the batch's total completion tokens (one token-level mean), then
takes one clipped-gradient AdamW step: the micro-batch size changes memory, not the update beyond float rounding.
A micro-batch runs as the prefix tree of its sequences (GRPO's attempts at one problem, the critic's K feedbacks on
one attempt, the refinements after them, completions beginning alike): every shared prefix computed once, no
padding, attention following the tree (`binac_core.rl.packing`, `binac_core.model.block_attention`); the
micro-batches hold neighbouring sequences in sorted order. Neither changes a value beyond float rounding. Each
micro-batch is packed once per update and reused by every pass and by the KL reference forward.

The training forward runs in eval mode, as sampling does: LoRA dropout (`lora.dropout`, 0.05 in the real-model
presets) is off in both, so the recomputed log-probs are those the backend sampled with (the first-pass ratio is 1
up to float rounding, nothing is clipped on noise) and a resumed update is deterministic. `lora.dropout` therefore
has no effect on the in-process update (it is still handed to peft and to the TRL bench).

Log-probs are computed without materialising a [batch, length, vocabulary] tensor: the decoder's hidden states
are sliced to the completion positions before the LM head, which then runs over chunks of `LOGPROB_CHUNK`
positions, each token's log-prob being its logit minus the logsumexp of its row (`token_logprobs`); with
gradients on, each chunk is checkpointed (its logits are recomputed in the backward pass instead of kept). The head
computes its logits in float32 whatever the model's dtype (`binac_core.model.lm_head.float32_logits`: a bf16 head's
rounding alone would move the first ratio off 1); a float32 model's head runs as it is.
The training forward computes a LoRA layer through its merged weight where that is cheaper
(`binac_core.model.fused_lora`): the same values up to float rounding. With `train.activation_checkpointing` every
decoder layer is checkpointed (`checkpointed_layers`): the same gradients, less memory, one more forward.
The decoder runs without a KV cache (`use_cache=False`): a training forward reads none, and a recomputed layer
must not append its keys to one a second time.

Each chunk's logits also give the entropy of the full next-token distribution at every completion token
(`token_entropy`): logged for every update, and with `train.entropy_coef` (actor) or `train.critic_entropy_coef`
(critic) above 0 an entropy bonus in the loss (`losses.clipped_policy_loss`); at 0 it is computed without a
gradient, at the cost of one more transient chunk × vocabulary tensor (the softmax). A zero-signal batch (`zero_signal`: every advantage exactly 0, no KL or entropy term) takes no optimizer
step (`policy_update`; docs/algorithm.md).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import torch
from torch.utils.checkpoint import checkpoint

from binac_core.foundation.config import Config
from binac_core.model.block_attention import PLACEHOLDER_MASK, Layout, block_attention
from binac_core.model.block_attention import layout as attention_layout
from binac_core.model.fused_lora import merged_lora_forward
from binac_core.model.generation import AdapterRef
from binac_core.model.lm_head import float32_logits
from binac_core.model.memory import return_freed_memory
from binac_core.model.stage_io import AdapterRole
from binac_core.rl import packing
from binac_core.rl.losses import clipped_policy_loss

LOGPROB_CHUNK = 1024
"""Completion positions per LM-head chunk: a chunk's fp32 logits are LOGPROB_CHUNK x vocabulary (512 MB at 128k)."""


@dataclass(frozen=True)
class UpdateSettings:
    """Everything one update of an adapter reads, built from the config for the adapter's role (`of`): the update
    takes no setting from anywhere else."""

    lr: float
    """AdamW's learning rate (`train.actor_lr` / `train.critic_lr`)."""
    passes: int
    """Optimizer steps, one per full pass over the batch (`train.t_low` / `train.t_high`)."""
    kl_coef: float
    """Weight of the k3 KL to the base model (`train.kl_coef` / `train.critic_kl_coef`)."""
    entropy_coef: float
    """Weight of the entropy bonus (`train.entropy_coef` / `train.critic_entropy_coef`)."""
    clip_eps: float
    """The PPO ratio clip (`train.clip_eps`)."""
    max_grad_norm: float
    """The gradient norm each step is clipped to (`train.max_grad_norm`)."""
    micro_batch_size: int
    """Sequences per gradient-accumulation micro-batch (`train.micro_batch_size`)."""
    activation_checkpointing: bool
    """Recompute every decoder layer in the backward (`train.activation_checkpointing`)."""
    temperature: float
    """The sampling temperature the log-probs are computed at (`generation.temperature`)."""

    @classmethod
    def of(cls, cfg: Config, role: AdapterRole, **changes) -> UpdateSettings:
        """The settings of the `role` adapter's update under `cfg`, with `changes` (field -> value) applied on
        top."""
        t = cfg.train
        actor = role == AdapterRole.ACTOR
        if role not in tuple(AdapterRole):
            known = ", ".join(r.value for r in AdapterRole)
            raise ValueError(f"no update settings for an adapter named {role!r} ({known})")
        settings = cls(
            lr=t.actor_lr if actor else t.critic_lr,
            passes=t.t_low if actor else t.t_high,
            kl_coef=t.kl_coef if actor else t.critic_kl_coef,
            entropy_coef=t.entropy_coef if actor else t.critic_entropy_coef,
            clip_eps=t.clip_eps,
            max_grad_norm=t.max_grad_norm,
            micro_batch_size=t.micro_batch_size,
            activation_checkpointing=t.activation_checkpointing,
            temperature=cfg.generation.temperature,
        )
        return replace(settings, **changes)


@dataclass
class Sample:
    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    advantage: float


def scaled_logits(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """logits / T in fp32, the sampling distribution's logits; T = 0 (greedy) and T = 1 leave them as they are."""
    scaled = logits.float()
    if temperature not in (0, 1):  # x / 1.0 is x: skip the [N, V] copy at T = 1
        scaled = scaled / temperature
    return scaled


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log softmax(logits / T)[target] for logits [N, V], targets [N] -> [N] (fp32), as gather minus logsumexp:
    no second [N, V] tensor of log-probs."""
    scaled = scaled_logits(logits, temperature)
    return scaled.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(scaled, dim=-1)


def token_entropy(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Entropy −Σ_v p_v log p_v of p = softmax(logits / T) per row, logits [N, V] -> [N] (fp32, nats), as
    logsumexp(s) − Σ_v softmax(s)_v · s_v with s = logits / T: verl's `entropy_from_logits`
    (verl/utils/torch_functional.py), at the temperature verl's actor also divides by. The inner sum is a dot
    product per row (no [N, V] product tensor). Logits are assumed finite (an LM head's): a −inf logit would give
    NaN, as in verl."""
    scaled = scaled_logits(logits, temperature)
    return torch.logsumexp(scaled, dim=-1) - torch.linalg.vecdot(torch.softmax(scaled, dim=-1), scaled)


EntropyMode = Literal["value", "differentiable"]
"""How `chunked_token_logprobs` and `sequence_logprobs` return the entropy: `value`, computed without a gradient (a
metric); `differentiable`, with one when gradients are on (an entropy term of the loss)."""


def chunked_token_logprobs(
    hidden: torch.Tensor,
    head,
    targets: torch.Tensor,
    temperature: float,
    chunk: int = LOGPROB_CHUNK,
    entropy: EntropyMode | None = None,
):
    """`token_logprobs(head(hidden), targets)` for hidden [N, H], computed `chunk` rows at a time (checkpointed
    when gradients are on and there is more than one chunk, so no chunk's logits outlive its own forward/backward;
    a single chunk's logits are the only ones anyway, and checkpointing it would only recompute the LM head).
    With `entropy` (`EntropyMode`), returns (log-probs [N], `token_entropy` [N]) from the same logits. The logits
    are float32 (`float32_logits`: `head` itself when it is float32)."""
    head = float32_logits(head)

    def piece(h, t):
        if entropy is None:
            return token_logprobs(head(h), t, temperature)
        scaled = scaled_logits(head(h), temperature)
        with torch.set_grad_enabled(torch.is_grad_enabled() and entropy == "differentiable"):
            ent = token_entropy(scaled)
        return token_logprobs(scaled, t), ent

    out = []
    for s in range(0, hidden.shape[0], chunk):
        h, t = hidden[s : s + chunk], targets[s : s + chunk]
        if torch.is_grad_enabled() and h.requires_grad and hidden.shape[0] > chunk:
            out.append(checkpoint(piece, h, t, use_reentrant=False))
        else:
            out.append(piece(h, t))
    if entropy is None:
        return torch.cat(out) if out else hidden.new_zeros(0, dtype=torch.float32)
    if not out:
        return hidden.new_zeros(0, dtype=torch.float32), hidden.new_zeros(0, dtype=torch.float32)
    return torch.cat([o[0] for o in out]), torch.cat([o[1] for o in out])


def _decoder_and_head(model):
    """(decoder, lm_head) of a causal LM, through a peft wrapper when there is one (LoRA layers live inside the
    modules, so the active adapter, or `disable_adapter()`, applies to both)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    for attr in ("final_logit_softcapping", "logit_scale"):
        if getattr(base.config, attr, None) not in (None, 1.0):
            raise NotImplementedError(f"sequence_logprobs: models with config.{attr} are not supported")
    return base.get_decoder(), base.get_output_embeddings()


def right_padded(samples: list[Sample], pad_id: int, model) -> tuple[torch.Tensor, torch.Tensor]:
    """(input ids [B, L], attention mask [B, L]) of the samples' prompt + completion, right-padded with `pad_id`,
    on the model's device."""
    seqs = [s.prompt_ids + s.token_ids for s in samples]
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    attn = torch.zeros_like(ids)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        attn[i, : len(s)] = 1
    dev = next(model.parameters()).device
    return ids.to(dev), attn.to(dev)


def sequence_logprobs(
    model,
    samples: list[Sample],
    pad_id: int,
    temperature: float,
    chunk: int = LOGPROB_CHUNK,
    entropy: EntropyMode | None = None,
    pack: bool = True,
    packed: PackedBatch | None = None,
):
    """Log-probs of each sample's completion tokens given its prompt -> (logp [B, T], mask [B, T]); with
    `entropy` (`EntropyMode`), (logp, mask, entropy [B, T]): the next-token distribution's entropy at each
    completion token (`token_entropy`), 0 at padding.

    `pack` (default): the samples run as their prefix tree, every shared prefix once (`binac_core.rl.packing`;
    `packed`: the samples already packed, `pack_batch`); False: one right-padded row per sample from position 0.
    The two give the same values up to float rounding. The LM head runs only on the completion positions (packed:
    each distinct scored token once), `chunk` positions at a time."""
    decoder, head = _decoder_and_head(model)
    dev = next(model.parameters()).device
    if pack:
        packed = packed or pack_batch(samples)
        tree = packed.tree
        with block_attention(model):
            hidden = decoder(
                input_ids=tree.ids.to(dev),
                attention_mask=PLACEHOLDER_MASK.to(dev),
                position_ids=tree.positions.to(dev),
                use_cache=False,
                block_layout=packed.layout.ready(dev, next(decoder.parameters()).dtype),
            ).last_hidden_state[0]
        flat = chunked_token_logprobs(hidden[tree.at.to(dev)], head, tree.target.to(dev), temperature, chunk, entropy)
        scored = tree.scored.to(dev)
        flat = flat[scored] if entropy is None else tuple(f[scored] for f in flat)
        at = (tree.owner.to(dev), tree.index.to(dev))
    else:
        ids, attn = right_padded(samples, pad_id, model)
        hidden = decoder(input_ids=ids, attention_mask=attn, use_cache=False).last_hidden_state  # [B, L, H]
        # Position p predicts token p + 1: a completion of n tokens after a prompt of m uses positions m-1 .. m+n-2.
        r = torch.cat([torch.full((len(s.token_ids),), i, dtype=torch.long) for i, s in enumerate(samples)]).to(dev)
        c = torch.cat([torch.arange(len(s.prompt_ids) - 1, len(s.prompt_ids) - 1 + len(s.token_ids)) for s in samples])
        targets = ids[r, c.to(dev) + 1]
        flat = chunked_token_logprobs(hidden[r, c.to(dev)], head, targets, temperature, chunk, entropy)
        at = (r, torch.cat([torch.arange(len(s.token_ids)) for s in samples]).to(dev))
    t_max = max(len(s.token_ids) for s in samples)
    mask = torch.zeros(len(samples), t_max)
    for i, s in enumerate(samples):
        mask[i, : len(s.token_ids)] = 1
    if entropy is None:
        return torch.zeros(len(samples), t_max, device=dev).index_put(at, flat).cpu(), mask
    logp, ent = (torch.zeros(len(samples), t_max, device=dev).index_put(at, f) for f in flat)
    return logp.cpu(), mask, ent.cpu()


@dataclass(frozen=True)
class PackedBatch:
    """Samples packed as their prefix tree (`packing.pack`) and the tree's attention layout
    (`block_attention.layout`): built once per micro-batch, reused by every pass of an update."""

    tree: packing.Packed
    layout: Layout


def pack_batch(samples: list[Sample]) -> PackedBatch:
    """`samples` packed as their prefix tree, with its attention layout (`PackedBatch`)."""
    tree = packing.pack([s.prompt_ids for s in samples], [s.token_ids for s in samples])
    return PackedBatch(tree, attention_layout(tree.blocks, tree.ids.shape[1]))


MicroBatch = tuple[list[Sample], PackedBatch]
"""A micro-batch's samples and their packed form."""


def micro_batches(samples: list[Sample], size: int) -> list[MicroBatch]:
    """The batch as micro-batches of at most `size` samples, neighbours in the order of their sequences
    (`packing.micro_batches`), each packed (`pack_batch`)."""
    cuts = packing.micro_batches([s.prompt_ids + s.token_ids for s in samples], size)
    return [(chunk, pack_batch(chunk)) for chunk in ([samples[i] for i in cut] for cut in cuts)]


@contextlib.contextmanager
def checkpointed_layers(model, on: bool) -> Iterator[int]:
    """Within the block (when `on`), every decoder layer of `model` is recomputed in the backward instead of keeping
    its activations: transformers' gradient checkpointing (`GradientCheckpointingLayer`, non-reentrant
    `torch.utils.checkpoint`). transformers checkpoints a layer only in training mode, and the update runs in eval
    mode (module docstring), so the layers alone, not their submodules, are flagged as training: dropout stays off.
    A layer recomputed in the backward must attend as its forward did, after `sequence_logprobs` has returned: the
    block keeps the packed forward's attention dispatch (`block_attention`) in place. Yields the number of layers
    checkpointed."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    layers = [m for m in base.modules() if isinstance(m, GradientCheckpointingLayer)] if on else []
    if not layers:
        yield 0
        return
    base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    flags = [m.training for m in layers]
    for m in layers:
        m.training = True
    try:
        with block_attention(model):
            yield len(layers)
    finally:
        for m, flag in zip(layers, flags, strict=True):
            m.training = flag
        base.gradient_checkpointing_disable()


def _pad(rows: list[list[float]], t_max: int) -> torch.Tensor:
    out = torch.zeros(len(rows), t_max)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r)
    return out


def zero_signal(samples: list[Sample], kl_coef: float, entropy_coef: float) -> bool:
    """Whether the loss on `samples` has exactly zero gradient: every advantage is exactly 0 (the surrogate is
    −min(ρ·0, clip(ρ)·0) = 0 for any θ) and neither the KL term nor the entropy term is on. Not a threshold: an
    advantage of 1e-9 is a signal."""
    return kl_coef == 0 and entropy_coef == 0 and all(s.advantage == 0 for s in samples)


def _batch_pass(
    policy, chunks: list[MicroBatch], refs: list, n_tokens: int, settings: UpdateSettings, backward: bool
) -> dict[str, float]:
    """One pass over the batch's micro-batches: each one's loss (its share of the batch's token mean), back-propagated
    when `backward` (gradients accumulate, no optimizer step here); returns the summed loss and statistics."""
    pad, temp = policy.tokenizer.pad_token_id, settings.temperature
    mode = "differentiable" if settings.entropy_coef > 0 else "value"
    total = dict.fromkeys(("loss", "kl_sum", "clip_sum", "entropy_sum", "tokens"), 0.0)
    for (chunk, packed), ref in zip(chunks, refs, strict=True):
        logp, mask, entropy = sequence_logprobs(policy.model, chunk, pad, temp, entropy=mode, packed=packed)
        old = _pad([s.logprobs for s in chunk], logp.shape[1])
        adv = torch.tensor([s.advantage for s in chunk], dtype=torch.float32)
        loss, st = clipped_policy_loss(
            logp,
            old,
            adv,
            mask,
            settings.clip_eps,
            ref,
            settings.kl_coef,
            n_tokens=n_tokens,
            entropy=entropy,
            entropy_coef=settings.entropy_coef,
        )
        if backward:
            loss.backward()
        total["loss"] += loss.item()
        for k in ("kl_sum", "clip_sum", "entropy_sum", "tokens"):
            total[k] += st[k]
    return total


def policy_update(policy, name: str, samples: list[Sample], settings: UpdateSettings) -> dict[str, float]:
    """Train adapter `name` on `samples`: `settings.passes` AdamW steps, each on the gradient of one pass over the
    batch.
    Returns the mean loss per pass, the KL, entropy and clip fraction per completion token, the token count and
    `skipped_steps`, the optimizer steps not taken.

    A batch without signal takes no step: no completion token, or `zero_signal` (every advantage exactly 0, no KL
    or entropy term). Its gradient would be exactly zero, yet AdamW would still move the adapter along its moments
    from earlier updates; here the weights and the optimizer state (moments, step count) stay as they were, one
    forward without gradients measures the batch (its loss is 0), and its `passes` steps count as skipped
    (docs/algorithm.md, "GRPO for the actor")."""
    passes, kl_coef = settings.passes, settings.kl_coef
    samples = [s for s in samples if s.token_ids]
    if not samples:
        return {"loss": 0.0, "kl": 0.0, "entropy": 0.0, "clip_frac": 0.0, "tokens": 0.0, "skipped_steps": float(passes)}
    pad, temp = policy.tokenizer.pad_token_id, settings.temperature
    mb = settings.micro_batch_size
    chunks = micro_batches(samples, mb)
    n_tokens = sum(len(s.token_ids) for s in samples)
    refs = [None] * len(chunks)
    if kl_coef > 0:
        with torch.no_grad(), policy.model.disable_adapter():
            refs = [sequence_logprobs(policy.model, c, pad, temp, packed=p)[0] for c, p in chunks]
    skip = zero_signal(samples, kl_coef, settings.entropy_coef)
    if skip:
        policy.model.set_adapter(name)  # no `train_mode`: no optimizer is created for a step not taken
        policy.model.eval()
        with torch.no_grad(), merged_lora_forward(policy.model):
            total = _batch_pass(policy, chunks, refs, n_tokens, settings, backward=False)
    else:
        total = _train_passes(policy, name, chunks, refs, n_tokens, settings)
    policy.model.eval()
    for p in policy.model.parameters():
        p.requires_grad_(False)
    tokens = max(total["tokens"], 1.0)
    return {
        "loss": total["loss"] / (1 if skip else passes),
        "kl": total["kl_sum"] / tokens,
        "entropy": total["entropy_sum"] / tokens,
        "clip_frac": total["clip_sum"] / tokens,
        "tokens": float(n_tokens),
        "skipped_steps": float(passes if skip else 0),
    }


def _train_passes(
    policy, name: str, chunks: list[MicroBatch], refs: list, n_tokens: int, settings: UpdateSettings
) -> dict[str, float]:
    """`settings.passes` passes over the batch, each accumulating its gradient (`_batch_pass`), clipping its norm
    and taking one AdamW step; returns the statistics summed over the passes."""
    opt = policy.train_mode(name, settings.lr)
    params = policy.params(name)
    policy.model.eval()  # no dropout: the same distribution as sampling (module docstring)
    total = dict.fromkeys(("loss", "kl_sum", "clip_sum", "entropy_sum", "tokens"), 0.0)
    with (
        merged_lora_forward(policy.model),
        checkpointed_layers(policy.model, settings.activation_checkpointing),
    ):  # module docstring
        for _ in range(settings.passes):
            opt.zero_grad(set_to_none=True)
            for k, v in _batch_pass(policy, chunks, refs, n_tokens, settings, backward=True).items():
                total[k] += v
            torch.nn.utils.clip_grad_norm_(params, settings.max_grad_norm)
            opt.step()
    return total


@dataclass(frozen=True)
class AdapterUpdate:
    """What an update stage hands on: the updated adapter and the update's statistics (`policy_update`)."""

    adapter: AdapterRef
    loss: float
    kl: float
    clip_frac: float
    tokens: float
    entropy: float = 0.0
    """Mean entropy of the policy's next-token distribution per completion token, over the update's passes."""
    skipped_steps: float = 0.0
    """Optimizer steps not taken, the batch having no signal (`policy_update`): 0 or the update's passes."""


def update_adapter(
    policy, adapter: AdapterRef, samples: list[Sample], settings: UpdateSettings, folder: str | Path | None
) -> AdapterUpdate:
    """One update stage: `adapter` trained on `samples` (`policy_update`) and saved into `folder`; returns the
    new adapter's reference and the update's statistics. A failure mid-way leaves the in-memory adapter marked
    unsynced (`Policy.begin_update`), so the next stage reloads it from disk.
    `folder` None: the adapter is not written; the reference is an in-memory one (`Policy.hold`), the same
    weights a saved one would load (saving changes no value)."""
    policy.begin_update(adapter)
    metrics = policy_update(policy, adapter.name, samples, settings)
    return_freed_memory()  # the update's activations and gradients: binac_core/model/memory.py
    ref = policy.hold(adapter.name) if folder is None else policy.save(adapter.name, folder)
    return AdapterUpdate(ref, **metrics)
