"""The RL math, as pure tensor functions (unit-tested on hand-computed cases).

- `group_advantages`: GRPO advantages, reward minus its group mean, divided by the group std when
  `scale=True` (DeepSeekMath GRPO; `scale=False` is the Dr. GRPO variant). Groups of one or with zero spread get 0.
- `penalty_reward`: the first-order value-penalty reward of a feedback z (its docstring; docs/algorithm.md
  derives it), the critic's reward of `binac` (`binac_core.rl.critic_reward` composes each method's form).
- `clipped_policy_loss`: PPO clipped surrogate with a token-level mean over every completion token of the batch
  (DAPO's aggregation, as TRL's `loss_type="dapo"`), plus β·k3 KL to a reference (Schulman's unbiased estimator,
  as in TRL/verl `low_var_kl` without clamping), minus an entropy bonus (verl's `entropy_coeff`).
"""

from __future__ import annotations

import torch


def group_advantages(rewards: torch.Tensor, groups: torch.Tensor, scale: bool = True, eps: float = 1e-6):
    """rewards [N], groups [N] (integer group ids) -> advantages [N]. Std is the unbiased sample std."""
    adv = torch.zeros_like(rewards, dtype=torch.float32)
    for g in torch.unique(groups):
        idx = groups == g
        r = rewards[idx].float()
        if r.numel() < 2:
            continue
        centred = r - r.mean()
        std = r.std()
        adv[idx] = centred if not scale else (centred / (std + eps) if std > 0 else torch.zeros_like(r))
    return adv


def penalty_reward(r1: torch.Tensor, r1_lookahead: torch.Tensor, lam: float, alpha: float) -> torch.Tensor:
    """The critic's reward of a feedback z, elementwise: (1 + μ)·r1 − μ·r1⁺ with μ = λ(1 + α), where r1 = r1(z; θ)
    is the reward of the actor's refinement given z, r1⁺ = r1(z; θ⁺) that of the actor θ⁺ after its update on the
    same batch, λ = `train.lam` and α = `train.alpha_shaping`; λ = 0 (or r1⁺ = r1) gives r1, the reward of the refined
    answer. The weight μ is the φ-dependent part of the lower level's objective, λ·E[(1 + α)·r1 − α·r0]: the
    −α·r0 term is constant in z and drops out, the α·r1 term does not."""
    mu = lam * (1.0 + alpha)
    return (1.0 + mu) * r1.float() - mu * r1_lookahead.float()


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(π‖π_ref): exp(ref − logp) − (ref − logp) − 1 (always ≥ 0)."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1.0


def clipped_policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    clip_eps: float,
    ref_logp: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    n_tokens: int | None = None,
    entropy: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
):
    """logp/old_logp/ref_logp/entropy/mask [B, T], adv [B]. Returns (loss, metrics).

    loss = Σ_tokens [ −min(ρ·A, clip(ρ, 1−ε, 1+ε)·A) + β·k3 − c·H ] / n_tokens, with n_tokens = mask.sum() unless
    given (callers that accumulate micro-batches pass the whole batch's token count so the sum is one token mean).
    H is the entropy of the policy's next-token distribution at each token (`update.token_entropy`), c =
    `entropy_coef`: an entropy bonus aggregated like the surrogate, verl's `pg_loss - entropy_coeff * entropy`
    (workers/actor/dp_actor.py, `agg_loss` with `token-mean`). Without `entropy` there is no such term (c is
    ignored); with it, metrics["entropy_sum"] is Σ H over the tokens whatever c is.
    """
    mask = mask.float()
    # Padding positions may hold anything (even -inf): neutralise them before they can turn the sum into NaN.
    logp, old_logp = torch.where(mask > 0, logp, 0.0), torch.where(mask > 0, old_logp, 0.0)
    if ref_logp is not None:
        ref_logp = torch.where(mask > 0, ref_logp, 0.0)
    if entropy is not None:
        entropy = torch.where(mask > 0, entropy, 0.0)
    n = float(n_tokens if n_tokens is not None else mask.sum().clamp(min=1))
    ratio = torch.exp(logp - old_logp)
    a = adv.unsqueeze(1)
    surrogate = torch.minimum(ratio * a, torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * a)
    per_token = -surrogate
    kl = torch.zeros_like(logp)
    if ref_logp is not None:
        kl = k3_kl(logp, ref_logp)
        per_token = per_token + kl_coef * kl
    if entropy is not None and entropy_coef > 0:
        per_token = per_token - entropy_coef * entropy
    loss = (per_token * mask).sum() / n
    with torch.no_grad():
        clipped = ((ratio - 1).abs() > clip_eps).float()
        metrics = {
            "kl_sum": float((kl * mask).sum()),
            "clip_sum": float((clipped * mask).sum()),
            "entropy_sum": 0.0 if entropy is None else float((entropy * mask).sum()),
            "tokens": float(mask.sum()),
        }
    return loss, metrics
