"""Trajectory rows for the tests that plant small stores with `storage.write_shard`, and the measures
sql/study_measures.sql computes over such rows."""

from __future__ import annotations

from datetime import datetime

from binac_core.store import storage

DEFAULTS = {
    "run_id": "r",
    "method": "grpo",
    "preset": "micro",
    "seed": 0,
    "step": 0,
    "split": "eval",
    "protocol": "single",
    "benchmark": "synthetic",
    "problem_id": "q0",
    "sample_idx": 0,
    "feedback_idx": 0,
    "round": 0,
    "prompt": "p",
    "attempt": "a",
    "attempt_reward": 0.0,
    "attempt_tokens": 1,
    "created_at": datetime(2025, 1, 2),
}
"""The columns a row gets unless told otherwise: one step-0 grpo attempt of run r, held out under `single`."""

STUDY_MEASURES = (
    "zero_adv_frac",
    "refine_zero_adv_frac",
    "critic_hits_first_error",
    "critic_false_alarm",
    "critic_approves_wrong",
    "critic_approves_right",
    "critic_signal",
    "critic_useful_mixed_frac",
    "critic_signal_frac",
    "feedback_gain",
)
"""The per-iteration measures of sql/study_measures.sql (also logged as MLflow metrics `train/<name>`)."""


def trajectory_row(**cols) -> dict:
    """A row with every column of `storage.columns()`: `cols`, else `DEFAULTS`, else None. A name that is not a
    column is refused (a typo would otherwise plant nothing)."""
    columns = storage.columns()
    unknown = sorted(set(cols) - set(columns))
    if unknown:
        raise KeyError(f"not trajectory columns: {unknown}")
    return {c: None for c in columns} | DEFAULTS | cols
