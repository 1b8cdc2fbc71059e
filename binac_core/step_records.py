"""What a step leaves behind: its trajectory rows, one atomic shard per (run, protocol, step) in the store
(`binac_core.storage`), and its metrics, computed from exactly the rows stored, so the MLflow numbers and SQL over
`trajectories` agree by construction. Rewriting a shard is idempotent (a re-run or a resumed run replaces it)."""

from __future__ import annotations

from binac_core import storage
from binac_core.batches import refinement_rewards
from binac_core.evaluation import EXEC_PROTOCOLS
from binac_core.measures import critic_error_measures, critic_signal_frac, zero_adv_frac
from binac_core.records import trajectory_rows
from binac_core.stats import mean
from binac_core.workspace import Workspace


def analysis_questions(benchmark: str, problems: list[dict] | None) -> dict[str, str] | None:
    """Problem id -> question on a benchmark whose feedback can be analysed against the first wrong step (the
    synthetic task: `Benchmark.feedback_analysis`), else None."""
    from binac_core.benchmarks import get

    if problems is None or get(benchmark).feedback_analysis is None:
        return None
    return {p["id"]: p["question"] for p in problems}


def store_train_step(
    ws: Workspace, meta: dict, step: int, attempts: list[dict], r0: list[float], feedback: list[dict] | None = None,
    refined: list[dict] | None = None, r1: list[float] | None = None, critic_rewards: list[float] | None = None,
    problems: list[dict] | None = None, alpha: float = 0.0,
) -> dict:
    """Write the iteration's rows; return its metrics (`train_metrics`). `problems` (the batch) gives the synthetic
    task's first wrong steps; `alpha` is the actor's second-turn shaping weight (its refinement groups' rewards)."""
    questions = analysis_questions(meta["benchmark"], problems)
    rows = trajectory_rows(meta, step, "train", "train", attempts, r0, feedback, refined, r1, critic_rewards,
                           questions=questions)
    storage.write_shard(ws, meta["run_id"], "train", step, rows)
    return train_metrics(rows, attempts, r0, feedback, refined, r1, critic_rewards, alpha, questions is not None)


def train_metrics(
    rows: list[dict], attempts: list[dict], r0: list[float], feedback: list[dict] | None, refined: list[dict] | None,
    r1: list[float] | None, critic_rewards: list[float] | None, alpha: float, critic_measures: bool,
) -> dict:
    """train/reward_first, train/reward_refined, the advantage collapse and critic measures of
    `binac_core.measures` (`critic_measures`: the synthetic task's first-error ones); None values are left out."""
    metrics = {"train/reward_first": mean(r0),
               "train/zero_adv_frac": zero_adv_frac([a["problem_id"] for a in attempts], r0)}
    if feedback:
        shaped = refinement_rewards(refined, attempts, r0, r1, alpha)
        metrics.update({
            "train/reward_refined": mean(r["refined_reward"] for r in rows),
            "train/feedback_gain": mean(r["refined_reward"] - r["attempt_reward"] for r in rows),
            "train/feedback_tokens": mean(r["feedback_tokens"] for r in rows),
            "train/refine_zero_adv_frac": zero_adv_frac([y["problem_id"] for y in refined], shaped),
        })
        if critic_rewards is not None:
            metrics["train/critic_reward"] = mean(critic_rewards)
            metrics["train/critic_signal_frac"] = critic_signal_frac(
                [(f["problem_id"], f["sample_idx"]) for f in feedback], critic_rewards)
        if critic_measures:
            metrics.update({f"train/{k}": v for k, v in critic_error_measures(rows).items()})
    return {k: v for k, v in metrics.items() if v is not None}


def store_eval(ws: Workspace, meta: dict, step: int, result: dict, problems: list[dict] | None = None) -> dict:
    """Write one shard per protocol evaluated (single, feedback, gated); return the `eval/acc_*` metrics and, on
    the synthetic task (with `problems`, the held-out split), the critic measures of the `feedback` protocol's rows
    (`eval/critic_*`)."""
    single, critic, questions = result["single"], {}, analysis_questions(meta["benchmark"], problems)
    storage.write_shard(ws, meta["run_id"], "eval-single", step,
                        trajectory_rows(meta, step, "eval", "single", single["attempts"], single["r0"],
                                        questions=questions))
    if "feedback" in result:
        rows = _protocol_rows(meta, step, "feedback", [result["feedback"]], questions)
        storage.write_shard(ws, meta["run_id"], "eval-feedback", step, rows)
        if questions is not None:
            critic = {f"eval/{k}": v for k, v in critic_error_measures(rows).items()}
    if "gated" in result:
        storage.write_shard(ws, meta["run_id"], "eval-gated", step,
                            _protocol_rows(meta, step, "gated", result["gated"], questions))
    metrics = {f"eval/{k}": v for k, v in result["metrics"].items()} | critic
    return {k: v for k, v in metrics.items() if v is not None}


def store_eval_exec(ws: Workspace, meta: dict, step: int, result: dict) -> int:
    """The rows of the execution-assisted protocols (`feedback_exec`, `gated_exec`), one shard each, named by their
    protocol (`store_eval` writes single, feedback and gated). Returns the number of rows written."""
    n = 0
    for protocol in EXEC_PROTOCOLS:
        if protocol not in result:
            continue
        rounds = [result[protocol]] if protocol == "feedback_exec" else result[protocol]
        rows = _protocol_rows(meta, step, protocol, rounds)
        storage.write_shard(ws, meta["run_id"], f"eval-{protocol}", step, rows)
        n += len(rows)
    return n


def _protocol_rows(meta: dict, step: int, protocol: str, rounds: list[dict],
                   questions: dict[str, str] | None = None) -> list[dict]:
    """The held-out rows of a feedback protocol's rounds (one round for `feedback`, up to K for `gated`)."""
    rows = []
    for k, rnd in enumerate(rounds, start=1):
        rows += trajectory_rows(meta, step, "eval", protocol, rnd["attempts"], rnd["r0"], rnd["feedback"],
                                rnd["refined"], rnd["r1"], round_=k, questions=questions)
    return rows
