"""The study's per-iteration measures on hand-built groups and hand-labelled feedback (binac_core/reports/measures.py),
the oracle's zero false alarm on random attempts, a simulation of noisy critic rewards, the critic's three reward
forms, and the evaluation schedule's equal-samples point."""

import math
import random

import pytest
import torch

from binac_core.benchmarks import synthetic
from binac_core.benchmarks.synthetic import first_wrong_step
from binac_core.model.stage_io import Attempt, Feedback, Refinement, ScoredBatch
from binac_core.reports.measures import (
    critic_error_measures,
    critic_signal_frac,
    critic_signal_measures,
    refine_zero_adv_frac,
    usefulness,
    zero_adv_frac,
)
from binac_core.rl.critic_reward import critic_reward
from binac_core.rl.kinds import CriticRewardForm
from binac_core.runs.plans import evaluation_steps
from binac_core.store.identity import RunIdentity
from binac_core.store.records import trajectory_rows


def test_zero_adv_frac_counts_groups_whose_rewards_are_all_equal():
    # p1: all wrong (collapsed), p2: mixed, p3: all right (collapsed), p4: a group of one (no advantage either)
    keys = ["p1"] * 3 + ["p2"] * 3 + ["p3"] * 2 + ["p4"]
    rewards = [0, 0, 0, 1, 0, 0, 1, 1, 1]
    assert zero_adv_frac(keys, rewards) == 3 / 4
    assert zero_adv_frac([], []) is None
    # shaped second-turn rewards: equal r1 but different r0 give different shaped values, hence signal
    assert zero_adv_frac(["p"] * 2, [0.0 + 1.0 * (0 - 1), 0.0 + 1.0 * (0 - 0)]) == 0.0


def test_critic_signal_frac_is_the_share_of_feedback_groups_with_unequal_rewards():
    keys = [("p1", 0)] * 4 + [("p1", 1)] * 4 + [("p2", 0)] * 4
    rewards = [1, 0, 0, 0] + [0, 0, 0, 0] + [1.5, 1.5, 1.5, 1.5]
    assert critic_signal_frac(keys, rewards) == pytest.approx(1 / 3)


# question 7+5-3+4: correct steps 7+5=2 2-3=9 9+4=3, answer 3
Q = "7+5-3+4"
RIGHT = "7+5=2 2-3=9 9+4=3 A: 3"
WRONG_AT_2 = "7+5=2 2-3=8 8+4=2 A: 2"
WRONG_AT_1 = "7+5=1 1-3=8 8+4=2 A: 2"
STEPS_RIGHT_ANSWER_WRONG = "7+5=2 2-3=9 9+4=3 A: 5"
LUCKY_RIGHT_WRONG_AT_2 = "7+5=2 2-3=8 8+4=3 A: 3"  # step 2 wrong, step 3 wrong too: the answer is right by luck


def test_first_wrong_step_by_hand():
    assert first_wrong_step(Q, RIGHT) is None
    assert first_wrong_step(Q, WRONG_AT_2) == 2
    assert first_wrong_step(Q, WRONG_AT_1) == 1
    assert first_wrong_step(Q, "7+5=2 junk") == 2  # a malformed step counts as wrong
    assert first_wrong_step(Q, "7+5=2") == 2  # so does a missing one
    assert first_wrong_step(Q, STEPS_RIGHT_ANSWER_WRONG) is None
    assert first_wrong_step(Q, LUCKY_RIGHT_WRONG_AT_2) == 2


def test_critic_error_measures_on_hand_labelled_feedback():
    rows = [  # (attempt, r0, feedback, hand label)
        (WRONG_AT_2, 0.0, "Step 2 is wrong.", "hit"),
        (WRONG_AT_2, 0.0, "Step 3 is wrong.", "miss: a later step"),
        (WRONG_AT_2, 0.0, "Check your work.", "miss: names no step"),
        (WRONG_AT_1, 0.0, "Step 1 is wrong.", "hit"),
        (WRONG_AT_1, 0.0, "Looks correct.", "miss, approves a wrong attempt"),
        (LUCKY_RIGHT_WRONG_AT_2, 1.0, "Step 2 is wrong.", "hit, though the answer is right"),
        (LUCKY_RIGHT_WRONG_AT_2, 1.0, "Looks correct.", "miss, approves a wrong attempt"),
        (STEPS_RIGHT_ANSWER_WRONG, 0.0, "Step 1 is wrong.", "alarm: every step is right, the answer is not"),
        (RIGHT, 1.0, "Looks correct.", "no alarm"),
        (RIGHT, 1.0, "Step 2 is wrong.", "alarm"),
        (RIGHT, 1.0, "Check your work.", "no alarm: names no step"),
        (RIGHT, 1.0, "Step 1 is wrong. Looks correct.", "alarm"),
    ]
    m = critic_error_measures(stored_rows(rows))
    # approves right: over the six rows with r0 > 0 (two lucky, four right), the three that approve (the lucky
    # attempt's "Looks correct.", the right attempt's "Looks correct." and "Step 1 is wrong. Looks correct.")
    assert m == pytest.approx(
        {
            "critic_hits_first_error": 3 / 7,
            "critic_false_alarm": 3 / 5,
            "critic_approves_wrong": 2 / 7,
            "critic_approves_right": 3 / 6,
        }
    )
    none = critic_error_measures(stored_rows([(RIGHT, 1.0, "Looks correct.", "no alarm")]))
    assert none == {
        "critic_hits_first_error": None,
        "critic_false_alarm": 0.0,
        "critic_approves_wrong": None,
        "critic_approves_right": 1.0,
    }
    wrong_only = critic_error_measures(stored_rows([(WRONG_AT_1, 0.0, "Looks correct.", "approves a wrong one")]))
    assert wrong_only["critic_approves_wrong"] == 1.0 and wrong_only["critic_approves_right"] is None
    # rows without the approval column (binac_core/studies/regimes.py's): hits and alarms only
    bare = [{"first_wrong_step": 2, "feedback_step": 2}, {"first_wrong_step": None, "feedback_step": 1}]
    assert critic_error_measures(bare) == {
        "critic_hits_first_error": 1.0,
        "critic_false_alarm": 1.0,
        "critic_approves_wrong": None,
        "critic_approves_right": None,
    }


def test_records_fill_feedback_approves_only_with_an_analysis():
    rows = stored_rows([(WRONG_AT_1, 0.0, "Looks correct.", ""), (RIGHT, 1.0, "Step 1 is wrong.", "")])
    assert [r["feedback_approves"] for r in rows] == [True, False]
    meta = RunIdentity(run_id="r", method="m", preset="p", seed=0, benchmark="synthetic")
    a = Attempt("q", 0, "", [], RIGHT, [], [])
    without_feedback = trajectory_rows(
        meta, 1, ScoredBatch([a], [1.0]), split="eval", protocol="single", questions={"q": Q}
    )
    f = Feedback("q", 0, 0, "Looks correct.", [], [], [])
    without_analysis = trajectory_rows(
        meta,
        1,
        ScoredBatch([a], [1.0], [f], [Refinement("q", 0, 0, [], "", [], [])], [1.0]),
        split="train",
        protocol="train",
    )
    assert without_feedback[0]["feedback_approves"] is None and without_analysis[0]["feedback_approves"] is None


def stored_rows(labelled):
    """The rows the store writes for these (attempt, r0, feedback, label) tuples (binac_core/store/records.py), one
    attempt of question Q with one feedback each."""
    meta = RunIdentity(run_id="r", method="m", preset="p", seed=0, benchmark="synthetic")
    out = []
    for i, (attempt, r0, feedback, _) in enumerate(labelled):
        a = Attempt("q", i, "", [], attempt, [], [])
        f = Feedback("q", i, 0, feedback, [], [], [])
        scored = ScoredBatch([a], [r0], [f], [Refinement("q", i, 0, [], "", [], [])], [0.0])
        out += trajectory_rows(meta, 1, scored, split="train", protocol="train", questions={"q": Q})
    return out


def group_rows(groups: list[tuple[str, list[tuple[str, float]]]], problem: str = "q") -> list[dict]:
    """The stored rows of one step in which attempt i (of `problem`, question Q) gets the K feedbacks of
    `groups[i]` = (attempt, [(feedback, critic reward), ...]); refinements all r1 = 0."""
    meta = RunIdentity(run_id="r", method="m", preset="p", seed=0, benchmark="synthetic")
    attempts = [Attempt(problem, i, "", [], attempt, [], []) for i, (attempt, _) in enumerate(groups)]
    feedback = [
        Feedback(problem, i, k, text, [], [], []) for i, (_, fs) in enumerate(groups) for k, (text, _) in enumerate(fs)
    ]
    refined = [Refinement(problem, f.sample_idx, f.feedback_idx, [], "", [], []) for f in feedback]
    rewards = [c for _, fs in groups for _, c in fs]
    first = [synthetic.grade_response(synthetic.make_row(Q), a.text) for a in attempts]
    scored = ScoredBatch(attempts, first, feedback, refined, [0.0] * len(feedback))
    return trajectory_rows(
        meta, 1, scored, split="train", protocol="train", critic_rewards=rewards, questions={problem: Q}
    )


def test_usefulness_by_hand():
    cases = [  # (attempt, feedback, u)
        (WRONG_AT_2, "Step 2 is wrong.", 1),
        (WRONG_AT_2, "Step 1 is wrong.", 0),
        (WRONG_AT_2, "Looks correct.", 0),
        (WRONG_AT_2, "Check your work.", 0),
        (LUCKY_RIGHT_WRONG_AT_2, "Step 2 is wrong.", 1),
        (RIGHT, "Looks correct.", 1),
        (RIGHT, "Step 3 is wrong.", 0),
        (RIGHT, "Check your work.", 0),
        # every step right, the answer line wrong: the oracle's verdict is "Check your work." (no step, no approval)
        (STEPS_RIGHT_ANSWER_WRONG, "Looks correct.", 0),
        (STEPS_RIGHT_ANSWER_WRONG, "Check your work.", 1),
        (STEPS_RIGHT_ANSWER_WRONG, "Step 1 is wrong.", 0),
    ]
    rows = stored_rows([(a, synthetic.grade_response(synthetic.make_row(Q), a), f, "") for a, f, _ in cases])
    assert [usefulness(r) for r in rows] == [u for _, _, u in cases]
    assert usefulness({"first_wrong_step": None, "feedback_step": None, "feedback_approves": None}) is None


def test_critic_signal_ranks_useful_feedback_against_useless_feedback_by_hand():
    rows = group_rows(
        [
            # u = 1, 0, 0; rewards 1, 0, 1: pairs (a, b) +1, (a, c) 0 (a tie)
            (WRONG_AT_2, [("Step 2 is wrong.", 1.0), ("Looks correct.", 0.0), ("Step 3 is wrong.", 1.0)]),
            # u = 1, 1, 0; rewards 0, 2, 1: pairs (a, c) -1, (b, c) +1
            (RIGHT, [("Looks correct.", 0.0), ("Looks correct.", 2.0), ("Step 1 is wrong.", 1.0)]),
            (WRONG_AT_1, [("Step 1 is wrong.", 0.0), ("Step 1 is wrong.", 1.0)]),  # all useful: not mixed
            (RIGHT, [("Check your work.", 0.0), ("Step 2 is wrong.", 1.0)]),  # all useless: not mixed
        ]
    )
    m = critic_signal_measures(rows)
    assert m == {"critic_signal": pytest.approx((1 + 0 - 1 + 1) / 4), "critic_useful_mixed_frac": 2 / 4}
    # a critic whose reward ranks every useful feedback first scores 1, the reverse -1
    best = group_rows([(WRONG_AT_2, [("Step 2 is wrong.", 2.0), ("Looks correct.", -1.0), ("Step 1 is wrong.", 0.0)])])
    worst = group_rows([(RIGHT, [("Looks correct.", 0.0), ("Step 1 is wrong.", 1.0)])])
    assert critic_signal_measures(best)["critic_signal"] == 1.0
    assert critic_signal_measures(worst)["critic_signal"] == -1.0
    # no mixed group: no signal measure, yet a share of 0
    flat = group_rows([(RIGHT, [("Looks correct.", 0.0), ("Looks correct.", 1.0)])])
    assert critic_signal_measures(flat) == {"critic_signal": None, "critic_useful_mixed_frac": 0.0}
    # without critic rewards (evaluation rows), the share only
    no_rewards = [{**r, "critic_reward": None} for r in rows]
    assert critic_signal_measures(no_rewards) == {"critic_signal": None, "critic_useful_mixed_frac": 0.5}
    assert critic_signal_measures([]) == {"critic_signal": None, "critic_useful_mixed_frac": None}


def test_refine_zero_adv_frac_takes_one_unshaped_refinement_per_attempt():
    def row(problem, sample, k, r1):
        return {"problem_id": problem, "sample_idx": sample, "feedback_idx": k, "refined_reward": r1}

    refined = {  # problem: the refined rewards of sample 0's feedback 0 and 1, then of sample 1's
        # p1: the feedback_idx 0 refinements are 1, 1: collapsed, though feedback 1's differ
        "p1": [[1.0, 0.0], [1.0, 1.0]],
        "p2": [[0.0, 0.0], [1.0, 0.0]],  # 0, 1: signal
        "p3": [[0.0, 1.0], [0.0, 1.0]],  # 0, 0: collapsed
    }
    rows = [
        row(problem, sample, k, r1)
        for problem, by_sample in refined.items()
        for sample, by_feedback in enumerate(by_sample)
        for k, r1 in enumerate(by_feedback)
    ]
    assert refine_zero_adv_frac(rows) == pytest.approx(2 / 3)
    assert refine_zero_adv_frac([]) is None


def _random_attempt(rng: random.Random, question: str) -> str:
    """A right trace, one with wrong steps (later steps building on the wrong value or not), or a malformed one
    (a junk, missing or mis-sized step, extra steps, a wrong or missing answer line)."""
    steps = synthetic.solve_steps(question)
    width, mod = steps[0].width, 10 ** steps[0].width
    kind = rng.choice(["right", "wrong", "wrong", "malformed"])
    if kind == "right":
        return synthetic.render_trace(steps)
    if kind == "wrong":
        out, value = [], steps[0].a
        carry = rng.random() < 0.5  # later steps restate the wrong value (as a sampled trace does) or not
        for s in steps:
            a = value if carry else s.a
            c = synthetic.apply_op(a, s.op, s.b, mod)
            if rng.random() < 0.4:
                c = (c + rng.randrange(1, mod)) % mod
            out.append(synthetic.Step(a, s.op, s.b, c, width))
            value = c
        return synthetic.render_trace(out)
    pieces = [s.text for s in steps]
    answer = f" A: {synthetic.render_value(steps[-1].c, width)}"
    match rng.randrange(6):
        case 0:
            pieces[rng.randrange(len(pieces))] = "junk"
        case 1:
            del pieces[rng.randrange(len(pieces))]
        case 2:
            k = rng.randrange(len(pieces))
            pieces[k] = pieces[k].lstrip("0") if width == 2 else "0" + pieces[k]
        case 3:
            pieces.append(
                f"{synthetic.render_value(steps[-1].c, width)}+1="
                f"{synthetic.render_value((steps[-1].c + 1) % mod, width)}"
            )
        case 4:
            answer = f" A: {synthetic.render_value((steps[-1].c + 1) % mod, width)}"
        case 5:
            answer = rng.choice(["", " A:", " A: ?"])
    return " ".join(pieces) + answer


def test_the_oracle_never_false_alarms_always_hits_and_never_approves_a_wrong_attempt():
    """Random attempts at random questions of both answer spaces, each with the rule-based oracle's feedback: by
    construction it names a step only when one is wrong, and then the first, so 0 false alarms and 1 hit."""
    rng = random.Random(21)
    meta = RunIdentity(run_id="r", method="oracle_critic", preset="p", seed=0, benchmark="synthetic")
    rows, moduli = [], set()
    for i in range(1500):
        moduli.add(modulus := rng.choice([10, 100]))
        question = synthetic.random_question(rng, rng.randint(1, 8), modulus)
        problem = synthetic.make_row(question)
        attempt = _random_attempt(rng, question)
        a = Attempt(problem["id"], i, "", [], attempt, [], [])
        f = Feedback(problem["id"], i, 0, synthetic.oracle_feedback(problem, attempt), [], [], [])
        r0 = synthetic.grade_response(problem, attempt)
        scored = ScoredBatch([a], [r0], [f], [Refinement(problem["id"], i, 0, [], "", [], [])], [0.0])
        rows += trajectory_rows(meta, 1, scored, split="train", protocol="train", questions={problem["id"]: question})
    m = critic_error_measures(rows)
    # it approves a right answer only when its steps are exactly the right ones (a lucky answer over a wrong step
    # gets its hint, extra steps "Check your work."): below 1, and over the right answers only
    right_answers = [r for r in rows if r["attempt_reward"] > 0]
    approved = sum(r["feedback"] == synthetic.LOOKS_CORRECT for r in right_answers) / len(right_answers)
    assert any(r["first_wrong_step"] is not None for r in right_answers) and approved < 1
    assert m == {
        "critic_hits_first_error": 1.0,
        "critic_false_alarm": 0.0,
        "critic_approves_wrong": 0.0,
        "critic_approves_right": pytest.approx(approved),
    }
    wrong = [r for r in rows if r["first_wrong_step"] is not None]
    right = [r for r in rows if r["first_wrong_step"] is None]
    assert len(wrong) > 500 and len(right) > 300 and moduli == {10, 100}
    # the old definition (right answer = right attempt) counted the oracle's correct detections on lucky right
    # answers over wrong steps as false alarms
    assert any(r["attempt_reward"] > 0 and r["feedback_step"] is not None for r in rows)
    assert any(r["first_wrong_step"] is None and r["attempt_reward"] == 0 for r in rows)  # a bad answer line


def _simulated_rows(rng: random.Random, n_groups: int, reward) -> list[dict]:
    """`n_groups` attempts (each with a first wrong step, 1) with K = 4 feedbacks each, every feedback useful
    (names step 1) or useless (approves) with probability 1/2; `reward(u)` draws its critic reward."""
    rows = []
    for g in range(n_groups):
        for k in range(4):
            u = rng.random() < 0.5
            rows.append(
                {
                    "problem_id": f"p{g}",
                    "sample_idx": 0,
                    "feedback_idx": k,
                    "first_wrong_step": 1,
                    "feedback_step": 1 if u else None,
                    "feedback_approves": not u,
                    "critic_reward": reward(u),
                }
            )
    return rows


def test_simulated_noise_scores_no_critic_signal_and_the_penalty_form_lowers_it():
    """A refinement after useful feedback succeeds with probability q1 = 0.6, after useless feedback q0 = 0.3.

    Tolerance: given the usefulness draws, groups are independent and a mixed group's sum of signs s_g lies in
    [-n_g, n_g] (n_g = n1·n0 ≤ 4 pairs with K = 4), so Var(s_g) ≤ n_g² ≤ 4·n_g and, over P pairs in all,
    sd(critic_signal) ≤ sqrt(4P)/P = 2/√P. With 20,000 groups, 87.5 % are mixed (1 − 2/16) with 24/7 ≈ 3.43 pairs
    on average: P ≈ 60,000, sd ≤ 0.0082, and the tolerance of 5 such sd is ≈ 0.041 (computed from the P drawn).
    Expected values by hand: r1 alone, E sign(r1_i − r1_j) = q1(1 − q0) − q0(1 − q1) = q1 − q0 = 0.30; the penalty
    form c = 2·r1 − r1⁺ takes 2, 1, 0, −1 with probabilities q(1−q), q², (1−q)², (1−q)q, which gives
    P(c_i > c_j) = 0.4752 and P(c_i < c_j) = 0.3132: 0.162. critic_signal_frac's expectations are
    Σ_n1 C(4,n1)/16 · (1 − Σ_v P1(v)^n1 P0(v)^(4−n1)): 0.867 for r1, 0.981 for the penalty form; a mean of 20,000
    independent groups, sd ≤ 0.5/√20000 ≈ 0.0035."""
    q = {True: 0.6, False: 0.3}
    rng = random.Random(0)
    n = 20_000

    def measured(reward):
        rows = _simulated_rows(random.Random(1), n, reward)  # the same usefulness draws for every reward
        keys = [(r["problem_id"], r["sample_idx"]) for r in rows]
        signal = critic_signal_measures(rows)["critic_signal"]
        return signal, critic_signal_frac(keys, [r["critic_reward"] for r in rows]), rows

    def r1(u):
        return float(rng.random() < q[u])

    def noise(u):
        return float(rng.random() < 0.45)

    def penalty(u):  # (1 + μ)·r1 − μ·r1⁺, μ = 1, two independent draws with the same q given u
        return 2 * r1(u) - r1(u)

    signal_noise, frac_noise, rows = measured(noise)
    p = _pairs(rows)
    tol = 5 * 2 / math.sqrt(p)
    assert 50_000 < p < 70_000 and tol < 0.05
    assert abs(signal_noise) < tol
    assert frac_noise > 0.8  # noise makes rewards differ: the old measure calls it signal
    signal_r1, frac_r1, _ = measured(r1)
    signal_pen, frac_pen, _ = measured(penalty)
    assert signal_r1 == pytest.approx(0.30, abs=tol) and signal_pen == pytest.approx(0.162, abs=tol)
    assert signal_pen < signal_r1 - 2 * tol  # the extra draw lowers the signal ...
    assert frac_r1 == pytest.approx(0.867, abs=0.02) and frac_pen == pytest.approx(0.981, abs=0.02)
    assert frac_pen > frac_r1 + 0.05  # ... and raises critic_signal_frac


def _pairs(rows: list[dict]) -> int:
    """The number of (useful, useless) pairs inside the groups of `rows`."""
    counts: dict = {}
    for r in rows:
        n1, n0 = counts.get(r["problem_id"], (0, 0))
        u = usefulness(r)
        counts[r["problem_id"]] = (n1 + u, n0 + 1 - u)
    return sum(n1 * n0 for n1, n0 in counts.values())


def test_the_three_critic_reward_forms():
    penalty, r1_only, after = CriticRewardForm.PENALTY, CriticRewardForm.R1, CriticRewardForm.AFTER
    r1, ahead = [1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]
    # penalty, λ = 0.5, α = 1: μ = 1, so 2·r1 − r1⁺
    assert critic_reward(penalty, r1, ahead, lam=0.5, alpha=1.0) == [1.0, -1.0, 2.0, 0.0]
    assert critic_reward(penalty, r1, None, lam=0.5, alpha=1.0) == r1  # θ⁺ = θ
    assert critic_reward(r1_only, r1, ahead, lam=0.5, alpha=1.0) == r1
    assert critic_reward(after, r1, ahead, lam=0.5, alpha=1.0) == ahead
    assert critic_reward("after", r1, ahead, lam=0.5, alpha=1.0) == ahead  # a stored form's identifier
    with pytest.raises(ValueError, match="look-ahead"):
        critic_reward(after, r1, None, lam=0.5, alpha=1.0)
    with pytest.raises(ValueError, match="not a valid CriticRewardForm"):
        critic_reward("lam", r1, ahead, lam=0.5, alpha=1.0)


def test_the_penalty_form_is_the_float32_formula_bit_for_bit():
    """μ = λ(1 + α) = 0.3·1.7 rounds in float32: the reward is (1 + μ)·r1 − μ·r1⁺ computed on float32 tensors."""
    r1, ahead = [1.0, 0.0, 0.5, 1.0], [0.0, 1.0, 0.25, 1.0]
    mu = 0.3 * (1.0 + 0.7)
    expected = ((1.0 + mu) * torch.tensor(r1).float() - mu * torch.tensor(ahead).float()).tolist()
    assert critic_reward(CriticRewardForm.PENALTY, r1, ahead, lam=0.3, alpha=0.7) == expected


def test_evaluation_steps_add_the_equal_samples_point():
    # every 8 of 40, and the first iteration whose samples reach 2560 at 576 per iteration: ceil(4.44) = 5
    assert evaluation_steps(40, 8, None, 576, 2560) == {5, 8, 16, 24, 32, 40}
    assert evaluation_steps(40, 8, None, 64, 2560) == {8, 16, 24, 32, 40}  # grpo reaches it at its end
    assert evaluation_steps(3, 8, None, 64, 2560) == {3}  # never reached within the run
    assert math.ceil(2560 / 320) in evaluation_steps(40, 8, None, 320, 2560)
