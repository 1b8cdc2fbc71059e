"""One policy-gradient update of a LoRA adapter on a batch of sampled completions.

Each `Sample` carries exactly the token ids the backend sampled, the full prompt they were conditioned on (for a
refinement: problem, first attempt and feedback) and the sampling log-probs, so the loss scores the refinement
on-policy in its real context; training a refinement as if the critique were absent is the off-policy failure
reported for critique-guided GRPO (critique-GRPO issue #6).

An update = `passes` full passes over the batch; each pass accumulates gradients over minibatches, normalised by
the batch's total completion tokens (one token-level mean), then takes one clipped-gradient AdamW step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from binac_core.losses import clipped_policy_loss


@dataclass
class Sample:
    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    advantage: float


def sequence_logprobs(model, samples: list[Sample], pad_id: int, temperature: float):
    """Log-probs of each sample's completion tokens given its prompt -> (logp [B, T], mask [B, T])."""
    seqs = [s.prompt_ids + s.token_ids for s in samples]
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    attn = torch.zeros_like(ids)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        attn[i, : len(s)] = 1
    dev = next(model.parameters()).device
    ids, attn = ids.to(dev), attn.to(dev)
    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float()
    logp_all = torch.log_softmax(logits / (temperature or 1.0), dim=-1)
    # Gather on the device, move only [B, T] to the CPU (the vocabulary axis can be 150k wide).
    tok = logp_all.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1).cpu()
    t_max = max(len(s.token_ids) for s in samples)
    logp = torch.zeros(len(samples), t_max)
    mask = torch.zeros(len(samples), t_max)
    for i, s in enumerate(samples):
        start, n = len(s.prompt_ids) - 1, len(s.token_ids)
        logp[i, :n] = tok[i, start : start + n]
        mask[i, :n] = 1
    return logp, mask


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
    mb = cfg.train.minibatch_size
    chunks = [samples[i : i + mb] for i in range(0, len(samples), mb)]
    n_tokens = sum(len(s.token_ids) for s in samples)
    refs = [None] * len(chunks)
    if kl_coef > 0:
        with torch.no_grad(), policy.model.disable_adapter():
            refs = [sequence_logprobs(policy.model, c, pad, temp)[0] for c in chunks]
    opt = policy.train_mode(name)
    params = policy.params(name)
    policy.model.train()
    total = {"loss": 0.0, "kl_sum": 0.0, "clip_sum": 0.0, "tokens": 0.0}
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
