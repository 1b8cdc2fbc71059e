"""The RL math on hand-computed cases."""

import math

import torch

from binac_core.model.stage_io import Attempt, Feedback, Refinement, ScoredBatch
from binac_core.rl.batches import attempt_samples, feedback_samples, refinement_rewards
from binac_core.rl.losses import clipped_policy_loss, group_advantages, k3_kl, penalty_reward
from binac_core.rl.update import token_entropy


def test_group_advantages_normalise_within_each_group():
    r = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0])
    g = torch.tensor([0, 0, 0, 0, 1, 1])
    adv = group_advantages(r, g, scale=True, eps=0.0)
    # group 0: mean 0.25, sample std sqrt(0.25) = 0.5 -> (0.75/0.5, -0.25/0.5 ...)
    assert torch.allclose(adv[:4], torch.tensor([1.5, -0.5, -0.5, -0.5]))
    # group 1: no spread -> zero advantage (no signal), never NaN
    assert torch.equal(adv[4:], torch.zeros(2))


def test_group_advantages_mean_only_and_singletons():
    adv = group_advantages(torch.tensor([3.0, 1.0, 5.0]), torch.tensor([0, 0, 1]), scale=False)
    assert torch.allclose(adv, torch.tensor([1.0, -1.0, 0.0]))


def test_critic_reward_is_the_value_penalty_weight_worked_out_by_hand_from_the_objective():
    """Independent hand computation from the bilevel objective (docs/algorithm.md, "First-order value-penalty form").

    L_λ(φ, θ) = F(φ, θ) + λ·[G(θ, φ) − G(θ⁺, φ)]
        F = E[r1]                                   (upper level: reward of the refined answer)
        G = E[r0] + E[r1 + α·(r1 − r0)] − β·KL      (lower level: the actor's two turns, SCoRe shaping α)
    The score-function gradient ∇_φ L_λ weights ∇_φ log π_φ(z | x, y0) of each feedback z (on one attempt y0 with
    reward r0; θ⁺'s refinement is taken on the same y0, so the same r0) by the integrand
        I = r1 + λ·[r0 + r1 + α·(r1 − r0)] − λ·[r0 + r1⁺ + α·(r1⁺ − r0)]
    (β·KL: an actor regularizer, left out of the critic's reward). Below, I is evaluated number by number with
    λ = 0.5 and α = 2, for each (r0, r1, r1⁺); r0 is written in to show that it cancels and the α·r1 terms do not.
    """
    lam, alpha = 0.5, 2.0
    cases = [  # (r0, r1, r1⁺) -> I, computed by hand
        # 1 + 0.5·[1 + 1 + 2·(1 − 1)] − 0.5·[1 + 1 + 2·(1 − 1)] = 1 + 1 − 1 = 1
        ((1.0, 1.0, 1.0), 1.0),
        # 1 + 0.5·[1 + 1 + 2·0] − 0.5·[1 + 0 + 2·(0 − 1)] = 1 + 1 − 0.5·(−1) = 2.5   (good only for θ: highest)
        ((1.0, 1.0, 0.0), 2.5),
        # 1 + 0.5·[0 + 1 + 2·(1 − 0)] − 0.5·[0 + 0 + 0] = 1 + 1.5 = 2.5            (same, r0 = 0)
        ((0.0, 1.0, 0.0), 2.5),
        # 0 + 0.5·[0 + 0 + 0] − 0.5·[0 + 1 + 2·(1 − 0)] = −1.5                     (good only for θ⁺: lowest)
        ((0.0, 0.0, 1.0), -1.5),
        # 0 + 0.5·[1 + 0 + 2·(0 − 1)] − 0.5·[1 + 1 + 2·(1 − 1)] = −0.5 − 1 = −1.5  (same, r0 = 1)
        ((1.0, 0.0, 1.0), -1.5),
        # 0 + 0.5·[0 + 0 + 0] − 0.5·[0 + 0 + 0] = 0
        ((0.0, 0.0, 0.0), 0.0),
    ]
    r1 = torch.tensor([c[0][1] for c in cases])
    r1_plus = torch.tensor([c[0][2] for c in cases])
    expected = torch.tensor([c[1] for c in cases])
    assert torch.allclose(penalty_reward(r1, r1_plus, lam, alpha), expected)
    # α = 0 (no shaping), λ = 0.5, (r0, r1, r1⁺) = (0, 1, 0): 1 + 0.5·[0 + 1] − 0.5·[0 + 0] = 1.5; (0, 0, 1): −0.5
    assert torch.allclose(
        penalty_reward(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0]), 0.5, 0.0), torch.tensor([1.5, -0.5])
    )


def test_critic_reward_is_r1_without_penalty_or_without_lookahead():
    r1 = torch.tensor([1.0, 1.0, 0.0, 0.0])
    r1_plus = torch.tensor([1.0, 0.0, 1.0, 0.0])
    # λ = 0: I = r1 whatever α and r1⁺
    assert torch.equal(penalty_reward(r1, r1_plus, 0.0, 2.0), r1)
    # θ⁺ = θ (critic_only: no actor update, r1⁺ = r1): the two λ brackets are equal, I = r1
    assert torch.equal(penalty_reward(r1, r1.clone(), 0.5, 2.0), r1)


def test_clipped_loss_on_policy_is_minus_mean_advantage_per_token():
    logp = torch.log(torch.tensor([[0.5, 0.5, 0.5], [0.2, 0.2, 0.0]]))
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    adv = torch.tensor([1.0, -2.0])
    loss, st = clipped_policy_loss(logp, logp.clone(), adv, mask, clip_eps=0.2)
    # ratio 1: loss = -(3*1 + 2*(-2)) / 5 tokens = 0.2
    assert math.isclose(float(loss), 0.2, rel_tol=1e-6)
    assert st["tokens"] == 5 and st["clip_sum"] == 0


def test_clipped_loss_clips_positive_advantage_above_1_plus_eps():
    old = torch.log(torch.tensor([[0.5]]))
    new = torch.log(torch.tensor([[0.8]]))  # ratio 1.6
    loss, st = clipped_policy_loss(new, old, torch.tensor([1.0]), torch.ones(1, 1), clip_eps=0.2)
    assert math.isclose(float(loss), -1.2, rel_tol=1e-6)
    assert st["clip_sum"] == 1
    # negative advantage: min(1.6 * -1, 1.2 * -1) = -1.6, so the loss is 1.6 (unclipped side)
    loss, _ = clipped_policy_loss(new, old, torch.tensor([-1.0]), torch.ones(1, 1), clip_eps=0.2)
    assert math.isclose(float(loss), 1.6, rel_tol=1e-6)


def test_k3_kl_zero_at_reference_and_positive_elsewhere():
    lp = torch.log(torch.tensor([0.5, 0.25]))
    assert torch.allclose(k3_kl(lp, lp), torch.zeros(2))
    ref = torch.log(torch.tensor([0.25, 0.5]))
    # exp(d) - d - 1 with d = ref - logp = (-ln2, ln2): (0.5 + ln2 - 1, 2 - ln2 - 1)
    expected = torch.tensor([0.5 + math.log(2) - 1, 1 - math.log(2)])
    assert torch.allclose(k3_kl(lp, ref), expected, atol=1e-6)


def test_kl_term_adds_beta_times_mean_k3():
    lp = torch.log(torch.tensor([[0.5, 0.25]]))
    ref = torch.log(torch.tensor([[0.25, 0.5]]))
    loss, _ = clipped_policy_loss(lp, lp.clone(), torch.tensor([0.0]), torch.ones(1, 2), 0.2, ref, kl_coef=0.1)
    assert math.isclose(float(loss), 0.1 * (0.5 + math.log(2) - 1 + 1 - math.log(2)) / 2, rel_tol=1e-5)


H_3_1 = math.log(4) - 0.75 * math.log(3)
"""Entropy of (3/4, 1/4), the softmax of logits (ln 3, 0): −(3/4 ln 3/4 + 1/4 ln 1/4) = ln 4 − (3/4) ln 3."""


def test_token_entropy_of_known_distributions():
    logits = torch.tensor([[0.0, 0.0], [math.log(3), 0.0]])
    assert torch.allclose(token_entropy(logits), torch.tensor([math.log(2), H_3_1]), atol=1e-6)
    assert math.isclose(float(token_entropy(torch.zeros(1, 4))[0]), math.log(4), rel_tol=1e-6)  # uniform over 4
    # at temperature 2 the logits (2 ln 3, 0) are (ln 3, 0): the entropy of the sampling distribution
    assert math.isclose(float(token_entropy(torch.tensor([[2 * math.log(3), 0.0]]), 2.0)[0]), H_3_1, rel_tol=1e-6)


def test_entropy_bonus_subtracts_coef_times_the_mean_token_entropy():
    lp = torch.log(torch.tensor([[0.5, 0.25]]))
    ent = torch.tensor([[math.log(2), H_3_1]])
    args = (lp, lp.clone(), torch.tensor([0.5]), torch.ones(1, 2), 0.2)
    loss, st = clipped_policy_loss(*args, entropy=ent, entropy_coef=0.1)
    # ratio 1: −0.5 per token, minus 0.1 × the mean entropy of the two tokens
    assert math.isclose(float(loss), -0.5 - 0.1 * (math.log(2) + H_3_1) / 2, rel_tol=1e-6)
    assert math.isclose(st["entropy_sum"], math.log(2) + H_3_1, rel_tol=1e-6)
    loss, st = clipped_policy_loss(*args, entropy=ent)  # coefficient 0: measured, not in the loss
    assert math.isclose(float(loss), -0.5, rel_tol=1e-6)
    assert math.isclose(st["entropy_sum"], math.log(2) + H_3_1, rel_tol=1e-6)
    assert clipped_policy_loss(*args)[1]["entropy_sum"] == 0.0


def test_entropy_bonus_gradient_pushes_the_logits_toward_uniform():
    """dH/dz_i = −p_i (z_i − Σ_j p_j z_j): for z = (ln 3, 0), p = (3/4, 1/4), ∓(3/16) ln 3; for a uniform row 0."""
    z = torch.tensor([[0.0, 0.0], [math.log(3), 0.0]], requires_grad=True)
    lp = torch.zeros(1, 2)
    loss, _ = clipped_policy_loss(
        lp,
        lp.clone(),
        torch.tensor([0.0]),
        torch.ones(1, 2),
        0.2,
        entropy=token_entropy(z).unsqueeze(0),
        entropy_coef=0.1,
    )
    loss.backward()
    g = 0.1 / 2 * 3 / 16 * math.log(3)  # loss = −0.1 · (H_1 + H_2) / 2
    assert torch.allclose(z.grad, torch.tensor([[0.0, 0.0], [g, -g]]), atol=1e-7)


def _attempt(pid, k):
    return Attempt(pid, k, "", [1], "", [2], [0.0])


def _refined(pid, k, j):
    return Refinement(pid, k, j, [1], "", [2], [0.0])


def _feedback(pid, k, j):
    return Feedback(pid, k, j, "", [1], [2], [0.0])


def test_shaped_refinement_reward_and_group_keys():
    attempts = [_attempt("a", 0), _attempt("a", 1)]
    refined = [_refined("a", 0, 0), _refined("a", 0, 1), _refined("a", 1, 0), _refined("a", 1, 1)]
    scored = ScoredBatch(attempts, [0.0, 1.0], refined=refined, refined_rewards=[1.0, 0.0, 1.0, 0.0])
    shaped = refinement_rewards(scored, alpha=2.0)
    # r1 + 2 (r1 - r0): attempt 0 had r0 = 0, attempt 1 had r0 = 1
    assert shaped == [3.0, 0.0, 1.0, -2.0]
    s = attempt_samples(attempts, [0.0, 1.0], scale=False)
    assert [x.advantage for x in s] == [-0.5, 0.5]


def test_feedback_advantages_compare_feedback_on_the_same_attempt_only():
    fbs = [_feedback("a", 0, 0), _feedback("a", 0, 1), _feedback("a", 1, 0), _feedback("a", 1, 1)]
    s = feedback_samples(fbs, [1.0, 0.0, 1.0, 1.0], scale=False)
    assert [x.advantage for x in s] == [0.5, -0.5, 0.0, 0.0]
