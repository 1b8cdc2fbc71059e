"""Storing every generated sample in the trajectory store and returning the step's metrics, computed from exactly
the rows stored (`binac_core.step_records`). Not cached: a shard rewrite is idempotent."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from binac_core import step_records
from binac_core.files import read_json, read_optional
from binac_core.workspace import workspace


@task(name="store-train-step", cache_policy=NO_CACHE)
def store_train_step(
    meta: dict, step: int, attempts: dict, r0: dict, feedback: dict | None = None, refined: dict | None = None,
    r1: dict | None = None, critic_rewards: dict | None = None, batch: dict | None = None, alpha: float = 0.0,
) -> dict:
    """Write the iteration's rows; return its metrics (train/reward_first, train/reward_refined...)."""
    return step_records.store_train_step(
        workspace(), meta, step, read_json(attempts), read_json(r0), feedback=read_optional(feedback),
        refined=read_optional(refined), r1=read_optional(r1), critic_rewards=read_optional(critic_rewards),
        problems=read_optional(batch), alpha=alpha,
    )


@task(name="store-eval", cache_policy=NO_CACHE)
def store_eval(meta: dict, step: int, result: dict, problems: dict | None = None) -> dict:
    """Write one shard per protocol evaluated; return the `eval/acc_*` metrics (and `eval/critic_*`)."""
    return step_records.store_eval(workspace(), meta, step, read_json(result), read_optional(problems))
