"""Storing every generated sample in the trajectory store, one atomic shard per (run, protocol, step).

The step's training metrics are computed here from exactly the rows stored, so the MLflow numbers and SQL over
`trajectories` agree by construction. Not cached: a shard rewrite is idempotent."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from binac_core import storage
from binac_core.batches import refinement_rewards
from binac_core.files import read_json
from binac_core.measures import critic_error_measures, critic_signal_frac, zero_adv_frac
from binac_core.records import trajectory_rows
from binac_core.workspace import workspace


def _mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else 0.0


@task(name="store-train-step", cache_policy=NO_CACHE)
def store_train_step(
    meta: dict, step: int, attempts: dict, r0: dict, feedback: dict | None = None, refined: dict | None = None,
    r1: dict | None = None, critic_rewards: dict | None = None, batch: dict | None = None, alpha: float = 0.0,
) -> dict:
    """Write the iteration's rows; return its metrics (train/reward_first, train/reward_refined, the advantage
    collapse and critic measures of `binac_core.measures`...). `batch` (the problems) gives the synthetic task's
    first wrong steps; `alpha` is the actor's second-turn shaping weight (its refinement groups' rewards)."""
    att, rew0 = read_json(attempts), read_json(r0)
    fb = read_json(feedback) if feedback else None
    y1 = read_json(refined) if refined else None
    rew1 = read_json(r1) if r1 else None
    crew = read_json(critic_rewards) if critic_rewards else None
    questions = _questions(meta, batch)
    rows = trajectory_rows(meta, step, "train", "train", att, rew0, fb, y1, rew1, crew, questions=questions)
    storage.write_shard(workspace(), meta["run_id"], "train", step, rows)
    metrics = {"train/reward_first": _mean(rew0),
               "train/zero_adv_frac": zero_adv_frac([a["problem_id"] for a in att], rew0)}
    if fb:
        shaped = refinement_rewards(y1, att, rew0, rew1, alpha)
        metrics.update({
            "train/reward_refined": _mean(r["refined_reward"] for r in rows),
            "train/feedback_gain": _mean(r["refined_reward"] - r["attempt_reward"] for r in rows),
            "train/feedback_tokens": _mean(r["feedback_tokens"] for r in rows),
            "train/refine_zero_adv_frac": zero_adv_frac([y["problem_id"] for y in y1], shaped),
        })
        if crew is not None:
            metrics["train/critic_reward"] = _mean(crew)
            metrics["train/critic_signal_frac"] = critic_signal_frac(
                [(f["problem_id"], f["sample_idx"]) for f in fb], crew)
        if questions is not None:
            metrics.update({f"train/{k}": v for k, v in critic_error_measures(rows).items()})
    return {k: v for k, v in metrics.items() if v is not None}


def _questions(meta: dict, problems: dict | None) -> dict[str, str] | None:
    """Problem id -> question on the synthetic task (whose oracle knows the first wrong step), else None."""
    if problems is None or meta["benchmark"] != "synthetic":
        return None
    return {p["id"]: p["question"] for p in read_json(problems)}


@task(name="store-eval", cache_policy=NO_CACHE)
def store_eval(meta: dict, step: int, result: dict, problems: dict | None = None) -> dict:
    """Write one shard per protocol evaluated; return the `eval/acc_*` metrics and, on the synthetic task (with
    `problems`, the held-out split), the critic measures of the `feedback` protocol's rows (`eval/critic_*`)."""
    res = read_json(result)
    ws = workspace()
    single, critic, questions = res["single"], {}, _questions(meta, problems)
    storage.write_shard(ws, meta["run_id"], "eval-single", step,
                        trajectory_rows(meta, step, "eval", "single", single["attempts"], single["r0"],
                                        questions=questions))
    if "feedback" in res:
        f = res["feedback"]
        rows = trajectory_rows(meta, step, "eval", "feedback", f["attempts"], f["r0"], f["feedback"], f["refined"],
                               f["r1"], questions=questions)
        storage.write_shard(ws, meta["run_id"], "eval-feedback", step, rows)
        if questions is not None:
            critic = {f"eval/{k}": v for k, v in critic_error_measures(rows).items()}
    if "gated" in res:
        rows = []
        for k, rnd in enumerate(res["gated"], start=1):
            rows += trajectory_rows(meta, step, "eval", "gated", rnd["attempts"], rnd["r0"], rnd["feedback"],
                                    rnd["refined"], rnd["r1"], round_=k, questions=questions)
        storage.write_shard(ws, meta["run_id"], "eval-gated", step, rows)
    metrics = {f"eval/{k}": v for k, v in res["metrics"].items()} | critic
    return {k: v for k, v in metrics.items() if v is not None}
