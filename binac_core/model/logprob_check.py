"""The judge of the backend log-prob check (`scripts/gpu_check.py`, `make gpu-check`; docs/gpu.md). Its pure functions
decide whether a backend's log-probs of sampled tokens match the trainer's recomputation of the same tokens.

`compare_logprobs` measures the per-token and per-sequence differences of one row (nearest-rank `percentile`),
`judge` names each bound of the dtype's `Tolerance` (`TOLERANCES`) a row exceeds, or why it cannot be judged;
`prefix_agreement` compares greedy completions (reported, not gated), `speedups` the throughput rows, and
`overall_status` folds the runs' statuses into the check's status and exit code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

EXIT_PASS, EXIT_FAIL, EXIT_ERROR, EXIT_UNAVAILABLE = 0, 1, 2, 3
"""The check's exit codes: every gated row passed; a row failed; an error; no vLLM that can run here."""


@dataclass(frozen=True)
class Tolerance:
    """Bounds on |backend log-prob − trainer log-prob| (nats) over the tokens of one row of the check."""

    mean_abs: float
    """mean over all tokens"""
    p99_abs: float
    """99th percentile over all tokens"""
    max_abs: float
    """any single token"""
    seq_mean_abs: float
    """the worst sequence's mean over its own tokens"""
    adapter_effect_factor: float = 5.0
    """an adapter row is conclusive only when the adapter itself moves the log-probs by this many `mean_abs`"""


TOLERANCES = {
    "float32": Tolerance(mean_abs=0.005, p99_abs=0.02, max_abs=0.1, seq_mean_abs=0.02),
    "bfloat16": Tolerance(mean_abs=0.03, p99_abs=0.3, max_abs=2.0, seq_mean_abs=0.1),
    "float16": Tolerance(mean_abs=0.03, p99_abs=0.3, max_abs=2.0, seq_mean_abs=0.1),
}


def tolerance_for(dtype: str) -> Tolerance:
    if dtype not in TOLERANCES:
        raise ValueError(f"no tolerance for dtype {dtype!r} (known: {', '.join(TOLERANCES)})")
    return TOLERANCES[dtype]


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100]) of an ascending list; nan for an empty one."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def compare_logprobs(reference: list[list[float]], measured: list[list[float]]) -> dict:
    """Per-token and per-sequence differences of `measured` (a backend's log-probs) from `reference` (the
    trainer's recomputation), both one list per sequence over the same tokens.

    Sequences whose lengths differ are compared over their common prefix and counted in `length_mismatches`;
    a non-finite value on either side counts as an infinite difference (`nonfinite`)."""
    if len(reference) != len(measured):
        raise ValueError(f"{len(measured)} sequences of log-probs for {len(reference)} reference sequences")
    diffs: list[float] = []
    signed: list[float] = []
    seq_means: list[float] = []
    seq_sums: list[float] = []
    worst = None
    mismatches = nonfinite = 0
    for i, (ref, got) in enumerate(zip(reference, measured, strict=True)):
        if len(ref) != len(got):
            mismatches += 1
        seq: list[float] = []
        total = 0.0
        for t, (r, m) in enumerate(zip(ref, got, strict=False)):
            if math.isfinite(r) and math.isfinite(m):
                d = m - r
            else:
                d = math.inf
                nonfinite += 1
            seq.append(abs(d))
            signed.append(d)
            total += d
            if worst is None or abs(d) > worst["abs"]:
                worst = {"sequence": i, "position": t, "measured": m, "reference": r, "abs": abs(d)}
        diffs.extend(seq)
        if seq:
            seq_means.append(sum(seq) / len(seq))
            seq_sums.append(abs(total))
    ordered = sorted(diffs)
    n = len(ordered)
    return {
        "sequences": len(reference),
        "tokens": n,
        "length_mismatches": mismatches,
        "nonfinite": nonfinite,
        "mean_abs": sum(ordered) / n if n else math.nan,
        "p99_abs": percentile(ordered, 99),
        "max_abs": ordered[-1] if n else math.nan,
        "mean_signed": sum(signed) / n if n else math.nan,
        "exact_fraction": sum(1 for d in ordered if d == 0.0) / n if n else math.nan,
        "seq_mean_abs_mean": sum(seq_means) / len(seq_means) if seq_means else math.nan,
        "seq_mean_abs_max": max(seq_means) if seq_means else math.nan,
        "seq_sum_abs_mean": sum(seq_sums) / len(seq_sums) if seq_sums else math.nan,
        "seq_sum_abs_max": max(seq_sums) if seq_sums else math.nan,
        "worst": worst,
    }


def mean_abs_difference(a: list[list[float]], b: list[list[float]]) -> float:
    """Mean |a − b| over all tokens of two equally shaped lists of lists (nan when empty)."""
    total, n = 0.0, 0
    for x, y in zip(a, b, strict=True):
        for u, v in zip(x, y, strict=True):
            total += abs(u - v)
            n += 1
    return total / n if n else math.nan


def judge(stats: dict, tol: Tolerance, adapter_effect: float | None = None) -> list[str]:
    """Why a row fails (empty: it passes): each bound of `tol` that `stats` (from `compare_logprobs`) exceeds, a
    structural problem (lengths, non-finite values, nothing compared), or an adapter too weak to tell."""
    reasons = []
    if stats["tokens"] == 0:
        return ["no tokens to compare"]
    if stats["length_mismatches"]:
        reasons.append(f"{stats['length_mismatches']} sequence(s) with a log-prob count different from their tokens")
    if stats["nonfinite"]:
        reasons.append(f"{stats['nonfinite']} non-finite log-prob(s)")
    for key, bound, what in (
        ("mean_abs", tol.mean_abs, "mean |diff|"),
        ("p99_abs", tol.p99_abs, "p99 |diff|"),
        ("max_abs", tol.max_abs, "max |diff|"),
        ("seq_mean_abs_max", tol.seq_mean_abs, "worst sequence's mean |diff|"),
    ):
        value = stats[key]
        if not value <= bound:  # nan fails too
            reasons.append(f"{what} {value:.3g} > {bound:g}")
    if adapter_effect is not None:
        need = tol.adapter_effect_factor * tol.mean_abs
        if not adapter_effect >= need:
            reasons.append(
                f"inconclusive: the adapter moves the trainer's log-probs by only {adapter_effect:.3g} "
                f"a token (< {need:g}), so an adapter vLLM ignored could pass"
            )
    return reasons


def prefix_agreement(a: list[list[int]], b: list[list[int]]) -> dict:
    """Greedy completions of two backends: the fraction identical, and the mean length of the common prefix as a
    fraction of the longer completion."""
    if not a:
        return {"sequences": 0, "identical": math.nan, "mean_prefix_fraction": math.nan}
    identical, fractions = 0, []
    for x, y in zip(a, b, strict=True):
        identical += x == y
        n = 0
        while n < min(len(x), len(y)) and x[n] == y[n]:
            n += 1
        fractions.append(n / max(len(x), len(y), 1))
    return {"sequences": len(a), "identical": identical / len(a), "mean_prefix_fraction": sum(fractions) / len(a)}


def speedups(rows: list[dict]) -> dict[str, float]:
    """vLLM tokens/s over HF tokens/s per batch size, from throughput rows ({backend, batch, tokens_per_s})."""
    by = {(r["backend"], r["batch"]): r["tokens_per_s"] for r in rows}
    out = {}
    for (backend, batch), tps in sorted(by.items(), key=lambda kv: kv[0][1]):
        if backend == "vllm" and by.get(("hf", batch)):
            out[str(batch)] = tps / by[("hf", batch)]
    return out


def overall_status(runs: list[dict]) -> tuple[str, int]:
    """(status, exit code) of the whole check from the runs' statuses: any `fail` -> 1, else any `error` (or no
    run) -> 2, else 0."""
    statuses = [r.get("status") for r in runs]
    if "fail" in statuses:
        return "fail", EXIT_FAIL
    if not statuses or any(s != "pass" for s in statuses):
        return "error", EXIT_ERROR
    return "pass", EXIT_PASS
