"""What a step leaves behind: its trajectory rows, one atomic shard per (run, protocol, step) in the store
(`binac_core.store.storage`), and its metrics, computed from exactly the rows stored, so the MLflow numbers and SQL over
`trajectories` agree by construction. Rewriting a shard is idempotent (a re-run or a resumed run replaces it)."""

from __future__ import annotations

from binac_core.reports.measures import (
    critic_error_measures,
    critic_signal_frac,
    critic_signal_measures,
    critic_verdict_measures,
    refine_zero_adv_frac,
    zero_adv_frac,
)
from binac_core.reports.stats import mean
from binac_core.rl.evaluation import EXEC_PROTOCOLS, FROZEN_PROTOCOL, GREEDY_PROTOCOL, Evaluation
from binac_core.rl.methods import FeedbackSource, method_spec
from binac_core.rl.stage_io import ScoredBatch
from binac_core.runs.workspace import Workspace
from binac_core.store import storage
from binac_core.store.identity import RunIdentity
from binac_core.store.records import trajectory_rows


def analysis_questions(benchmark: str, problems: list[dict] | None) -> dict[str, str] | None:
    """Problem id -> question on a benchmark whose feedback can be analysed against the first wrong step (the
    synthetic task: `Benchmark.feedback_analysis`), else None."""
    from binac_core.benchmarks import get

    if problems is None or get(benchmark).feedback_analysis is None:
        return None
    return {p["id"]: p["question"] for p in problems}


def store_train_step(
    ws: Workspace, run: RunIdentity, step: int, scored: ScoredBatch, *, critic_rewards: list[float] | None = None,
    problems: list[dict] | None = None,
) -> dict:
    """Write the iteration's rows; return its metrics (`train_metrics`). `problems` (the batch) gives the synthetic
    task's first wrong steps."""
    questions = analysis_questions(run.benchmark, problems)
    rows = trajectory_rows(run, step, scored, split="train", protocol="train", critic_rewards=critic_rewards,
                           questions=questions, verdicts=method_spec(run.method).feedback is not FeedbackSource.FIXED)
    storage.write_shard(ws, run.run_id, "train", step, rows)
    return train_metrics(rows, scored, critic_rewards=critic_rewards, critic_measures=questions is not None)


def train_metrics(
    rows: list[dict], scored: ScoredBatch, *, critic_rewards: list[float] | None, critic_measures: bool,
) -> dict:
    """train/reward_first, train/reward_refined, the advantage collapse and critic measures of
    `binac_core.reports.measures` (the critic health ones, `train/critic/*`, wherever the rows have verdicts;
    `critic_measures`: the synthetic task's first-error ones) of the step's stored `rows`; None values are left
    out."""
    metrics = {"train/reward_first": mean(scored.first_rewards),
               "train/zero_adv_frac": zero_adv_frac([a.problem_id for a in scored.attempts], scored.first_rewards)}
    if scored.feedback:
        metrics.update({
            "train/reward_refined": mean(r["refined_reward"] for r in rows),
            "train/feedback_gain": mean(r["refined_reward"] - r["attempt_reward"] for r in rows),
            "train/feedback_tokens": mean(r["feedback_tokens"] for r in rows),
            "train/refine_zero_adv_frac": refine_zero_adv_frac(rows),
        })
        if critic_rewards is not None:
            metrics["train/critic_reward"] = mean(critic_rewards)
            metrics["train/critic_signal_frac"] = critic_signal_frac(
                [(f.problem_id, f.sample_idx) for f in scored.feedback], critic_rewards)
        metrics.update(health_metrics("train/critic/", rows))
        if critic_measures:
            metrics.update({f"train/{k}": v for k, v in critic_error_measures(rows).items()})
            metrics.update({f"train/{k}": v for k, v in critic_signal_measures(rows).items()})
    return {k: v for k, v in metrics.items() if v is not None}


def store_eval(ws: Workspace, run: RunIdentity, step: int, result: Evaluation, problems: list[dict] | None = None) -> dict:
    """Write one shard per protocol evaluated (single, single_greedy, feedback, gated, feedback_frozen); return the
    `eval/acc_*` metrics (`eval/acc_single_greedy` among them where the greedy protocol ran), the critic health
    measures of the `feedback` protocol's rows (`eval/critic/*`; and of the frozen critic's, `eval/frozen_critic/*`)
    where they have verdicts, and, on the synthetic task (with `problems`, the held-out split), the critic measures
    of the `feedback` protocol's rows (`eval/critic_hits_first_error`, `eval/critic_false_alarm`,
    `eval/critic_approves_wrong`, `eval/critic_approves_right`; not `critic_signal`, which needs critic rewards, nor
    `critic_useful_mixed_frac`: held-out attempts get one feedback each), and the same measures of the frozen base
    critic's `feedback_frozen` rows as `eval/frozen_critic_*`."""
    critic, questions = {}, analysis_questions(run.benchmark, problems)
    verdicts = result.feedback_source is not FeedbackSource.FIXED
    storage.write_shard(ws, run.run_id, "eval-single", step,
                        trajectory_rows(run, step, result.single, split="eval", protocol="single",
                                        questions=questions))
    if result.single_greedy is not None:
        storage.write_shard(ws, run.run_id, f"eval-{GREEDY_PROTOCOL}", step,
                            trajectory_rows(run, step, result.single_greedy, split="eval", protocol=GREEDY_PROTOCOL,
                                            questions=questions))
    if result.feedback is not None:
        rows = _protocol_rows(run, step, "feedback", result.rounds("feedback"), questions, verdicts)
        storage.write_shard(ws, run.run_id, "eval-feedback", step, rows)
        critic = health_metrics("eval/critic/", rows)
        if questions is not None:
            critic |= {f"eval/{k}": v for k, v in critic_error_measures(rows).items()}
    if result.gated is not None:
        storage.write_shard(ws, run.run_id, "eval-gated", step,
                            _protocol_rows(run, step, "gated", result.gated, questions, verdicts))
    if result.feedback_frozen is not None:  # the frozen base critic on the same attempts (`eval/frozen_critic_*`)
        rows = _protocol_rows(run, step, FROZEN_PROTOCOL, [result.feedback_frozen], questions)
        storage.write_shard(ws, run.run_id, f"eval-{FROZEN_PROTOCOL}", step, rows)
        critic |= health_metrics("eval/frozen_critic/", rows)
        if questions is not None:
            critic |= {f"eval/frozen_{k}": v for k, v in critic_error_measures(rows).items()}
    metrics = {f"eval/{k}": v for k, v in result.metrics.items()} | critic
    return {k: v for k, v in metrics.items() if v is not None}


def store_eval_exec(ws: Workspace, run: RunIdentity, step: int, result: Evaluation) -> int:
    """The rows of the execution-assisted protocols (`feedback_exec`, `gated_exec`), one shard each, named by their
    protocol (`store_eval` writes single, feedback and gated). Returns the number of rows written."""
    n = 0
    for protocol in EXEC_PROTOCOLS:
        rounds = result.rounds(protocol)
        if rounds is None:
            continue
        rows = _protocol_rows(run, step, protocol, rounds)
        storage.write_shard(ws, run.run_id, f"eval-{protocol}", step, rows)
        n += len(rows)
    return n


def health_metrics(prefix: str, rows: list[dict]) -> dict[str, float]:
    """The critic health measures (`measures.critic_verdict_measures`) of `rows`, named `prefix` + measure; none
    where no row has a verdict (no critic)."""
    return {prefix + k: v for k, v in critic_verdict_measures(rows).items() if v is not None}


def _protocol_rows(run: RunIdentity, step: int, protocol: str, rounds: list[ScoredBatch],
                   questions: dict[str, str] | None = None, verdicts: bool = True) -> list[dict]:
    """The held-out rows of a feedback protocol's rounds (one for `feedback`, up to K for `gated`); `verdicts`:
    False for a fixed instruction (`records.trajectory_rows`)."""
    rows = []
    for k, scored in enumerate(rounds, start=1):
        rows += trajectory_rows(run, step, scored, split="eval", protocol=protocol, round_=k, questions=questions,
                                verdicts=verdicts)
    return rows
