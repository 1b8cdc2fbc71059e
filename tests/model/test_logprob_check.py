"""The log-prob check's judge (`binac_core.model.logprob_check`) on small hand-computed cases: each expected
percentile, difference and verdict below is worked out by hand from the lists, not by the code under test."""

from __future__ import annotations

import math

import pytest

from binac_core.model import logprob_check as lc


def test_compare_logprobs_per_token_and_per_sequence():
    ref = [[-1.0, -2.0, -0.5], [-3.0], []]
    got = [[-1.0, -2.1, -0.4], [-2.5], []]
    s = lc.compare_logprobs(ref, got)
    assert s["sequences"] == 3 and s["tokens"] == 4 and s["length_mismatches"] == 0 and s["nonfinite"] == 0
    assert s["max_abs"] == pytest.approx(0.5)
    assert s["mean_abs"] == pytest.approx((0 + 0.1 + 0.1 + 0.5) / 4)
    assert s["mean_signed"] == pytest.approx((0 - 0.1 + 0.1 + 0.5) / 4)
    assert s["p99_abs"] == pytest.approx(0.5)
    assert s["exact_fraction"] == 0.25
    # per sequence: mean |d| of each non-empty one (0.0667, 0.5); |sum d| of each (0.0, 0.5)
    assert s["seq_mean_abs_max"] == pytest.approx(0.5)
    assert s["seq_mean_abs_mean"] == pytest.approx((0.2 / 3 + 0.5) / 2)
    assert s["seq_sum_abs_max"] == pytest.approx(0.5)
    assert s["seq_sum_abs_mean"] == pytest.approx(0.25)
    assert s["worst"] == {"sequence": 1, "position": 0, "measured": -2.5, "reference": -3.0, "abs": 0.5}


def test_compare_logprobs_counts_length_mismatches_and_non_finite_values():
    s = lc.compare_logprobs([[-1.0, -1.0], [-1.0]], [[-1.0], [float("nan")]])
    assert s["length_mismatches"] == 1 and s["nonfinite"] == 1 and s["tokens"] == 2 and s["max_abs"] == math.inf
    reasons = lc.judge(s, lc.tolerance_for("float32"))
    assert any("log-prob count different" in r for r in reasons) and any("non-finite" in r for r in reasons)
    with pytest.raises(ValueError, match="1 sequences of log-probs for 2"):
        lc.compare_logprobs([[-1.0], [-1.0]], [[-1.0]])


def test_percentile_is_nearest_rank():
    values = [i / 100 for i in range(1, 201)]  # 0.01 .. 2.00
    assert lc.percentile(values, 99) == pytest.approx(1.98)
    assert lc.percentile(values, 100) == 2.0 and lc.percentile([0.3], 99) == 0.3
    assert math.isnan(lc.percentile([], 99))


def test_judge_applies_each_bound_of_the_stated_tolerance():
    tol = lc.tolerance_for("float32")
    assert (tol.mean_abs, tol.p99_abs, tol.max_abs, tol.seq_mean_abs) == (0.005, 0.02, 0.1, 0.02)
    assert lc.tolerance_for("bfloat16").mean_abs > tol.mean_abs
    with pytest.raises(ValueError):
        lc.tolerance_for("int8")
    good = [[-1.0 - 0.001 * (t % 3) for t in range(100)] for _ in range(10)]  # 1000 tokens, |d| <= 0.002
    ref = [[-1.0] * 100 for _ in range(10)]
    assert lc.judge(lc.compare_logprobs(ref, good), tol, adapter_effect=0.3) == []
    # one token far off: the max bound (and only it) fails
    spiky = [row[:] for row in good]
    spiky[3][4] = -1.5
    reasons = lc.judge(lc.compare_logprobs(ref, spiky), tol)
    assert len(reasons) == 1 and reasons[0].startswith("max |diff| 0.5 > 0.1")
    # 2 % of tokens at 0.05: p99 fails, mean does not
    p99 = [row[:] for row in good]
    for i in range(20):
        p99[i % 10][i] = -1.05
    reasons = lc.judge(lc.compare_logprobs(ref, p99), tol)
    assert [r.split(" ")[0] for r in reasons] == ["p99"]
    # a systematic shift (wrong temperature): mean, p99 and worst sequence all fail
    shifted = [[v - 0.03 for v in row] for row in ref]
    reasons = lc.judge(lc.compare_logprobs(ref, shifted), tol)
    assert {r.split(" ")[0] for r in reasons} == {"mean", "p99", "worst"}
    # an adapter too weak to tell an ignored adapter from rounding: inconclusive
    reasons = lc.judge(lc.compare_logprobs(ref, good), tol, adapter_effect=0.01)
    assert len(reasons) == 1 and reasons[0].startswith("inconclusive")
    assert lc.judge(lc.compare_logprobs([[]], [[]]), tol) == ["no tokens to compare"]


def test_prefix_agreement_speedups_and_overall_status():
    g = lc.prefix_agreement([[1, 2, 3], [1, 2, 3, 4]], [[1, 2, 3], [1, 9, 3]])
    assert g == {"sequences": 2, "identical": 0.5, "mean_prefix_fraction": pytest.approx((1 + 1 / 4) / 2)}
    rows = [
        {"backend": "hf", "batch": 1, "tokens_per_s": 50.0},
        {"backend": "vllm", "batch": 1, "tokens_per_s": 200.0},
        {"backend": "hf", "batch": 32, "tokens_per_s": 400.0},
        {"backend": "vllm", "batch": 32, "tokens_per_s": 6000.0},
    ]
    assert lc.speedups(rows) == {"1": 4.0, "32": 15.0}
    assert lc.overall_status([{"status": "pass"}, {"status": "pass"}]) == ("pass", 0)
    assert lc.overall_status([{"status": "error"}, {"status": "fail"}]) == ("fail", 1)
    assert lc.overall_status([{"status": "pass"}, {"status": "error"}]) == ("error", 2)
    assert lc.overall_status([]) == ("error", 2)


def test_percentile_of_a_short_list_by_hand():
    values = [0.1, 0.2, 0.3, 0.4]  # nearest rank: ceil(q/100 * 4)
    assert lc.percentile(values, 50) == 0.2  # rank 2
    assert lc.percentile(values, 51) == 0.3  # rank ceil(2.04) = 3
    assert lc.percentile(values, 99) == 0.4  # rank ceil(3.96) = 4
    assert lc.percentile(values, 0) == 0.1  # rank max(1, 0) = 1


def test_the_max_bound_just_inside_and_just_outside():
    tol = lc.tolerance_for("float32")  # max_abs 0.1
    ref = [[-1.0] * 200]
    # One token 0.09 off among 200 exact ones: mean 0.00045, p99 (rank 198 of 200) 0, worst sequence 0.00045.
    inside = [[-1.09] + [-1.0] * 199]
    stats = lc.compare_logprobs(ref, inside)
    assert stats["max_abs"] == pytest.approx(0.09) and stats["p99_abs"] == 0.0
    assert stats["mean_abs"] == pytest.approx(0.09 / 200)
    assert lc.judge(stats, tol) == []
    # The same token 0.11 off: only the max bound fails.
    outside = [[-1.11] + [-1.0] * 199]
    assert lc.judge(lc.compare_logprobs(ref, outside), tol) == ["max |diff| 0.11 > 0.1"]


def test_the_mean_bound_just_inside_and_just_outside():
    tol = lc.tolerance_for("float32")  # mean_abs 0.005, worst sequence's mean 0.02
    ref = [[0.0] * 4, [0.0] * 4]
    # Every token 0.004 off, up in one sequence and down in the other: mean |d| 0.004 <= 0.005, signed mean 0.
    inside = [[0.004] * 4, [-0.004] * 4]
    stats = lc.compare_logprobs(ref, inside)
    assert stats["mean_abs"] == pytest.approx(0.004) and stats["mean_signed"] == pytest.approx(0.0)
    assert stats["seq_sum_abs_max"] == pytest.approx(0.016)  # |4 x 0.004| for each sequence
    assert lc.judge(stats, tol) == []
    # 0.006 a token: the mean bound fails alone (p99 and the worst sequence's mean, 0.006, are under 0.02).
    outside = [[0.006] * 4, [0.006] * 4]
    assert lc.judge(lc.compare_logprobs(ref, outside), tol) == ["mean |diff| 0.006 > 0.005"]


def test_the_adapter_effect_just_enough_and_just_short():
    tol = lc.tolerance_for("float32")  # needs 5 x 0.005 = 0.025 nats a token
    stats = lc.compare_logprobs([[-1.0]], [[-1.0]])
    assert lc.judge(stats, tol, adapter_effect=0.025) == []
    reasons = lc.judge(stats, tol, adapter_effect=0.024)
    assert len(reasons) == 1 and reasons[0].startswith("inconclusive") and "(< 0.025)" in reasons[0]


def test_mean_abs_difference_by_hand():
    assert lc.mean_abs_difference([[1.0, 2.0], [3.0]], [[1.5, 1.0], [3.0]]) == pytest.approx((0.5 + 1.0 + 0.0) / 3)
    assert math.isnan(lc.mean_abs_difference([[]], [[]]))
    with pytest.raises(ValueError):
        lc.mean_abs_difference([[1.0]], [[1.0, 2.0]])
