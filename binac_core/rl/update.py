"""One policy-gradient update of a LoRA adapter on a batch of sampled completions.

Each `Sample` carries exactly the token ids the backend sampled, the full prompt they were conditioned on (for a
refinement: problem, first attempt and feedback) and the sampling log-probs, so the loss scores the refinement
on-policy in its real context; training a refinement as if the critique were absent is the off-policy failure
reported for critique-guided GRPO (critique-GRPO issue #6).

An update = `passes` full passes over the batch; each pass accumulates gradients over micro-batches of
`train.micro_batch_size` sequences, normalised by the batch's total completion tokens (one token-level mean), then
takes one clipped-gradient AdamW step: the micro-batch size changes memory, not the update beyond float rounding.

The training forward runs in eval mode, as sampling does: LoRA dropout (`lora.dropout`, 0.05 in the real-model
presets) is off in both, so the recomputed log-probs are those the backend sampled with (the first-pass ratio is 1
up to float rounding, nothing is clipped on noise) and a resumed update is deterministic. `lora.dropout` therefore
has no effect on the in-process update (it is still handed to peft and to the TRL bench).

Log-probs are computed without materialising a [batch, length, vocabulary] tensor: the decoder's hidden states
are sliced to the completion positions before the LM head, which then runs over chunks of `LOGPROB_CHUNK`
positions, each token's log-prob being its logit minus the logsumexp of its row (`token_logprobs`); with
gradients on, each chunk is checkpointed (its logits are recomputed in the backward pass instead of kept).
The training forward computes a LoRA layer through its merged weight where that is cheaper
(`binac_core.model.fused_lora`): the same values up to float rounding. With `train.activation_checkpointing` every
decoder layer is checkpointed (`checkpointed_layers`): the same gradients, less memory, one more forward.
The decoder runs without a KV cache (`use_cache=False`): a training forward reads none, and a recomputed layer
must not append its keys to one a second time.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils.checkpoint import checkpoint

from binac_core.model.fused_lora import merged_lora_forward
from binac_core.model.generation import AdapterRef
from binac_core.model.memory import return_freed_memory
from binac_core.rl.losses import clipped_policy_loss

LOGPROB_CHUNK = 1024
"""Completion positions per LM-head chunk: a chunk's fp32 logits are LOGPROB_CHUNK x vocabulary (512 MB at 128k)."""


@dataclass
class Sample:
    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    advantage: float


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log softmax(logits / T)[target] for logits [N, V], targets [N] -> [N] (fp32), as gather minus logsumexp:
    no second [N, V] tensor of log-probs."""
    scaled = logits.float()
    if temperature not in (0, 1):  # x / 1.0 is x: skip the [N, V] copy at T = 1
        scaled = scaled / temperature
    return scaled.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(scaled, dim=-1)


def chunked_token_logprobs(hidden: torch.Tensor, head, targets: torch.Tensor, temperature: float,
                           chunk: int = LOGPROB_CHUNK) -> torch.Tensor:
    """`token_logprobs(head(hidden), targets)` for hidden [N, H], computed `chunk` rows at a time (checkpointed
    when gradients are on and there is more than one chunk, so no chunk's logits outlive its own forward/backward;
    a single chunk's logits are the only ones anyway, and checkpointing it would only recompute the LM head)."""

    def piece(h, t):
        return token_logprobs(head(h), t, temperature)

    out = []
    for s in range(0, hidden.shape[0], chunk):
        h, t = hidden[s : s + chunk], targets[s : s + chunk]
        if torch.is_grad_enabled() and h.requires_grad and hidden.shape[0] > chunk:
            out.append(checkpoint(piece, h, t, use_reentrant=False))
        else:
            out.append(piece(h, t))
    return torch.cat(out) if out else hidden.new_zeros(0, dtype=torch.float32)


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


def sequence_logprobs(model, samples: list[Sample], pad_id: int, temperature: float, chunk: int = LOGPROB_CHUNK):
    """Log-probs of each sample's completion tokens given its prompt -> (logp [B, T], mask [B, T]).

    The LM head runs only on the completion positions, `chunk` positions at a time."""
    ids, attn = right_padded(samples, pad_id, model)
    dev = ids.device
    decoder, head = _decoder_and_head(model)
    hidden = decoder(input_ids=ids, attention_mask=attn, use_cache=False).last_hidden_state  # [B, L, H]
    # Position p predicts token p + 1: a completion of n tokens after a prompt of m uses positions m-1 .. m+n-2.
    rows = torch.cat([torch.full((len(s.token_ids),), i, dtype=torch.long) for i, s in enumerate(samples)])
    cols = torch.cat([torch.arange(len(s.prompt_ids) - 1, len(s.prompt_ids) - 1 + len(s.token_ids))
                      for s in samples])
    rows, cols = rows.to(dev), cols.to(dev)
    flat = chunked_token_logprobs(hidden[rows, cols], head, ids[rows, cols + 1], temperature, chunk)
    t_max = max(len(s.token_ids) for s in samples)
    logp = torch.zeros(len(samples), t_max, device=dev)
    mask = torch.zeros(len(samples), t_max)
    logp = logp.index_put((rows, torch.cat([torch.arange(len(s.token_ids)) for s in samples]).to(dev)), flat)
    for i, s in enumerate(samples):
        mask[i, : len(s.token_ids)] = 1
    return logp.cpu(), mask


@contextlib.contextmanager
def checkpointed_layers(model, on: bool) -> Iterator[int]:
    """Within the block (when `on`), every decoder layer of `model` is recomputed in the backward instead of keeping
    its activations: transformers' gradient checkpointing (`GradientCheckpointingLayer`, non-reentrant
    `torch.utils.checkpoint`). transformers checkpoints a layer only in training mode, and the update runs in eval
    mode (module docstring), so the layers alone, not their submodules, are flagged as training: dropout stays off.
    Yields the number of layers checkpointed."""
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


def policy_update(policy, name: str, samples: list[Sample], passes: int, kl_coef: float) -> dict[str, float]:
    """Train adapter `name` on `samples`; returns mean loss, KL, clip fraction and token count."""
    cfg = policy.cfg
    samples = [s for s in samples if s.token_ids]
    if not samples:
        return {"loss": 0.0, "kl": 0.0, "clip_frac": 0.0, "tokens": 0.0}
    pad, temp = policy.tokenizer.pad_token_id, cfg.generation.temperature
    mb = cfg.train.micro_batch_size
    chunks = [samples[i : i + mb] for i in range(0, len(samples), mb)]
    n_tokens = sum(len(s.token_ids) for s in samples)
    refs = [None] * len(chunks)
    if kl_coef > 0:
        with torch.no_grad(), policy.model.disable_adapter():
            refs = [sequence_logprobs(policy.model, c, pad, temp)[0] for c in chunks]
    opt = policy.train_mode(name)
    params = policy.params(name)
    policy.model.eval()  # no dropout: the same distribution as sampling (module docstring)
    total = {"loss": 0.0, "kl_sum": 0.0, "clip_sum": 0.0, "tokens": 0.0}
    with merged_lora_forward(policy.model), \
            checkpointed_layers(policy.model, cfg.train.activation_checkpointing):  # module docstring
        for _ in range(passes):
            opt.zero_grad(set_to_none=True)
            for chunk, ref in zip(chunks, refs, strict=True):
                logp, mask = sequence_logprobs(policy.model, chunk, pad, temp)
                old = _pad([s.logprobs for s in chunk], logp.shape[1])
                adv = torch.tensor([s.advantage for s in chunk], dtype=torch.float32)
                loss, st = clipped_policy_loss(
                    logp, old, adv, mask, cfg.train.clip_eps, ref, kl_coef, n_tokens=n_tokens
                )
                loss.backward()
                total["loss"] += loss.item()
                for k in ("kl_sum", "clip_sum", "tokens"):
                    total[k] += st[k]
            torch.nn.utils.clip_grad_norm_(params, cfg.train.max_grad_norm)
            opt.step()
    policy.model.eval()
    for p in policy.model.parameters():
        p.requires_grad_(False)
    tokens = max(total["tokens"], 1.0)
    return {
        "loss": total["loss"] / passes,
        "kl": total["kl_sum"] / tokens,
        "clip_frac": total["clip_sum"] / tokens,
        "tokens": float(n_tokens),
    }


@dataclass(frozen=True)
class AdapterUpdate:
    """What an update stage hands on: the updated adapter and the update's statistics (`policy_update`)."""

    adapter: AdapterRef
    loss: float
    kl: float
    clip_frac: float
    tokens: float


def update_adapter(policy, adapter: AdapterRef, samples: list[Sample], *, passes: int, kl_coef: float,
                   folder: str | Path | None) -> AdapterUpdate:
    """One update stage: `adapter` trained on `samples` (`policy_update`) and saved into `folder`; returns the
    new adapter's reference and the update's statistics. A failure mid-way leaves the in-memory adapter marked
    unsynced (`Policy.begin_update`), so the next stage reloads it from disk.
    `folder` None: the adapter is not written; the reference is an in-memory one (`Policy.hold`), the same
    weights a saved one would load (saving changes no value)."""
    policy.begin_update(adapter)
    metrics = policy_update(policy, adapter.name, samples, passes, kl_coef)
    return_freed_memory()  # the update's activations and gradients: binac_core/model/memory.py
    ref = policy.hold(adapter.name) if folder is None else policy.save(adapter.name, folder)
    return AdapterUpdate(ref, **metrics)
