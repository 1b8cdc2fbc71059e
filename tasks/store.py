"""Storing every generated sample in the trajectory store (`binac_core.store.step_records`) and returning the
step's metrics, computed from exactly the rows stored (`binac_core.reports.step_metrics`). Not cached: a shard rewrite is idempotent, and so is logging a
metric once per step (`tracking.log_metrics_once`)."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from binac_core.foundation.files import StageFile, read_optional
from binac_core.foundation.workspace import workspace
from binac_core.model.stage_io import read_scored_batch
from binac_core.reports import step_metrics
from binac_core.rl.evaluation import read_evaluation
from binac_core.rl.loop import IterationResult
from binac_core.store import step_records, tracking
from binac_core.store.identity import RunIdentity


@task(name="store-train-step", cache_policy=NO_CACHE)
def store_train_step(run: RunIdentity, step: int, res: IterationResult, extra: dict | None = None) -> dict:
    """Write the iteration's rows (from the stage files `res` hands on), then log its metrics (train/reward_first,
    train/reward_refined..., and `extra`: the updates' losses, timings) to the run's MLflow run at `step`; return
    them. Storing and logging are one task, so that the flow can run it beside the next iteration (`flows/train.py`)."""
    ws = workspace()
    scored = read_scored_batch(
        res.attempts, res.first_rewards, feedback=res.feedback, refined=res.refined, refined_rewards=res.refined_rewards
    )
    critic, problems = read_optional(res.critic_rewards), read_optional(res.batch)
    rows = step_records.store_train_step(ws, run, step, scored, critic_rewards=critic, problems=problems)
    metrics = step_metrics.train_metrics(rows, scored, critic_rewards=critic, critic_measures=_analysed(run, problems))
    metrics.update(extra or {})
    tracking.log_metrics_once(ws, run.run_id, metrics, step)
    return metrics


@task(name="store-eval", cache_policy=NO_CACHE)
def store_eval(run: RunIdentity, step: int, result: StageFile, problems: StageFile | None = None) -> dict:
    """Write one shard per protocol evaluated; return the `eval/acc_*` metrics (and `eval/critic_*`)."""
    evaluation, rows = read_evaluation(result), read_optional(problems)
    stored = step_records.store_eval(workspace(), run, step, evaluation, rows)
    return step_metrics.eval_metrics(evaluation, stored, critic_measures=_analysed(run, rows))


def _analysed(run: RunIdentity, problems: list[dict] | None) -> bool:
    """Whether the rows carry the first-error analysis (the synthetic task, with its problems)."""
    return step_records.analysis_questions(run.benchmark, problems) is not None
