"""A step's metrics, computed from exactly the rows `binac_core.store.step_records` stored, so the MLflow numbers and
SQL over `trajectories` agree by construction. They are the rewards, the advantage collapse and the critic measures of
`binac_core.reports.measures`. Plain functions over rows; they write nothing."""

from __future__ import annotations

from binac_core.foundation.stats import mean
from binac_core.model.stage_io import ScoredBatch
from binac_core.reports.bank_measures import bank_metrics
from binac_core.reports.measures import (
    critic_error_measures,
    critic_information,
    critic_signal_frac,
    critic_signal_measures,
    critic_verdict_measures,
    hint_measures,
    refine_zero_adv_frac,
    zero_adv_frac,
)
from binac_core.rl.evaluation import Evaluation
from binac_core.rl.kinds import EvalProtocol


def train_metrics(
    rows: list[dict],
    scored: ScoredBatch,
    *,
    critic_rewards: list[float] | None,
    critic_measures: bool,
) -> dict:
    """train/reward_first, train/reward_refined, the advantage collapse and critic measures of
    `binac_core.reports.measures` (the critic's reward information, `critic_information`, wherever there are
    critic rewards, and with `critic_measures` `hint_measures` too; the critic health ones, `train/critic/*`, wherever the rows have verdicts;
    `critic_measures`: the synthetic task's first-error ones) of the step's stored `rows`; None values are left
    out."""
    metrics = {
        "train/reward_first": mean(scored.first_rewards),
        "train/zero_adv_frac": zero_adv_frac([a.problem_id for a in scored.attempts], scored.first_rewards),
    }
    if scored.feedback:
        metrics.update(
            {
                "train/reward_refined": mean(r["refined_reward"] for r in rows),
                "train/feedback_gain": mean(r["refined_reward"] - r["attempt_reward"] for r in rows),
                "train/feedback_tokens": mean(r["feedback_tokens"] for r in rows),
                "train/refine_zero_adv_frac": refine_zero_adv_frac(rows),
            }
        )
        if critic_rewards is not None:
            metrics["train/critic_reward"] = mean(critic_rewards)
            metrics["train/critic_signal_frac"] = critic_signal_frac(
                [(f.problem_id, f.sample_idx) for f in scored.feedback], critic_rewards
            )
            metrics.update({f"train/{k}": v for k, v in critic_information(rows).items()})
        metrics.update(health_metrics("train/critic/", rows))
        if critic_measures:
            metrics.update({f"train/{k}": v for k, v in critic_error_measures(rows).items()})
            metrics.update({f"train/{k}": v for k, v in critic_signal_measures(rows).items()})
            metrics.update({f"train/{k}": v for k, v in hint_measures(rows).items()})
    return {k: v for k, v in metrics.items() if v is not None}


def eval_metrics(result: Evaluation, rows: dict[EvalProtocol, list[dict]], *, critic_measures: bool) -> dict:
    """The `eval/acc_*` metrics of `result` (`eval/acc_single_greedy` among them where the greedy protocol ran),
    the critic health measures of the stored `feedback` protocol's rows (`eval/critic/*`; and of the frozen
    critic's, `eval/frozen_critic/*`) where they have verdicts, and, with `critic_measures` (the synthetic task,
    its held-out split), the first-error measures of the `feedback` rows (`eval/critic_hits_first_error`,
    `eval/critic_false_alarm`, `eval/critic_approves_wrong`, `eval/critic_approves_right`; not `critic_signal`,
    which needs critic rewards, nor `critic_useful_mixed_frac`: held-out attempts get one feedback each) and of
    the frozen base critic's `feedback_frozen` rows as `eval/frozen_critic_*`. `rows`: protocol -> stored rows."""
    critic, feedback, frozen = {}, EvalProtocol.FEEDBACK, EvalProtocol.FEEDBACK_FROZEN
    if feedback in rows:
        critic = health_metrics("eval/critic/", rows[feedback])
        if critic_measures:
            critic |= {f"eval/{k}": v for k, v in critic_error_measures(rows[feedback]).items()}
    if frozen in rows:
        critic |= health_metrics("eval/frozen_critic/", rows[frozen])
        if critic_measures:
            critic |= {f"eval/frozen_{k}": v for k, v in critic_error_measures(rows[frozen]).items()}
    metrics = {f"eval/{k}": v for k, v in result.metrics.items()} | critic
    return {k: v for k, v in metrics.items() if v is not None}


def health_metrics(prefix: str, rows: list[dict]) -> dict[str, float]:
    """The critic health measures (`measures.critic_verdict_measures`) of `rows`, named `prefix` + measure; none
    where no row has a verdict (no critic)."""
    return {prefix + k: v for k, v in critic_verdict_measures(rows).items() if v is not None}


BANK_CRITICS = {EvalProtocol.BANK: "critic", EvalProtocol.BANK_FROZEN: "frozen_critic"}
"""Which critic a bank protocol's rows are of, as its metrics name it (`bank_<split>/<critic>_<measure>`)."""


def bank_step_metrics(rows: dict[tuple[EvalProtocol, str], list[dict]]) -> dict[str, float]:
    """The attempt bank's metrics (`bank_measures.bank_metrics`) of an evaluation's stored bank rows, by
    (protocol, split)."""
    out: dict[str, float] = {}
    for (protocol, split), found in rows.items():
        out |= bank_metrics(split, BANK_CRITICS[protocol], found)
    return out
