"""Building the stored trajectory rows (schema: sql/schema.sql) from one step's stage outputs."""

from __future__ import annotations

from datetime import datetime, timezone

from binac_core import benchmarks
from binac_core.benchmarks.verdict import parse_verdict
from binac_core.model.stage_io import Attempt, ScoredBatch
from binac_core.rl.schedule import actor_iterations_through
from binac_core.store.identity import RunIdentity


def trajectory_rows(
    run: RunIdentity,
    step: int,
    scored: ScoredBatch,
    *,
    split: str,
    protocol: str,
    critic_rewards: list[float] | None = None,
    round_: int = 1,
    questions: dict[str, str] | None = None,
    verdicts: bool = True,
) -> list[dict]:
    """One row per (attempt, feedback); without feedback, one row per attempt, each with the identity columns of
    `run` and, for a training run, the cumulative counts of `step` (`sample_counts`). `questions`
    (problem id -> question, on a benchmark with a `feedback_analysis`: the synthetic task) fills
    `first_wrong_step`, `feedback_step` and `feedback_approves`, the columns the critic measures read
    (binac_core/reports/measures.py). `feedback_verdict` is each feedback's verdict (`binac_core.benchmarks.verdict`), read with the
    benchmark's `verdict_syntax`; `verdicts=False` (a fixed instruction: no critic wrote it) leaves it NULL."""
    bench = benchmarks.get(run.benchmark)
    analysis = bench.feedback_analysis if questions is not None else None
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    base = {
        **run.columns(),
        "step": step,
        "split": split,
        "protocol": protocol,
        "created_at": now,
        **sample_counts(run, step),
    }
    scored_attempts = list(zip(scored.attempts, scored.first_rewards, strict=True))
    if not scored.feedback:
        return [
            {
                **base,
                **_attempt_cols(a, r, questions, analysis),
                "feedback_idx": 0,
                "round": 0,
                "feedback": None,
                "refined": None,
                "refined_reward": None,
                "critic_reward": None,
                "feedback_tokens": None,
                "refined_tokens": None,
                "feedback_step": None,
                "feedback_approves": None,
                "feedback_verdict": None,
            }
            for a, r in scored_attempts
        ]
    by_key = {(a.problem_id, a.sample_idx): (a, r) for a, r in scored_attempts}
    # Feedback without refinements (the critic's attempt bank, binac_core/rl/bank.py): the refinement columns NULL.
    refined = scored.refined or [None] * len(scored.feedback)
    rows = []
    for i, (f, y1) in enumerate(zip(scored.feedback, refined, strict=True)):
        a, r = by_key[(f.problem_id, f.sample_idx)]
        rows.append(
            {
                **base,
                **_attempt_cols(a, r, questions, analysis),
                "feedback_idx": f.feedback_idx,
                "round": round_,
                "feedback": f.text,
                "refined": None if y1 is None else y1.text,
                "refined_reward": None if y1 is None else scored.refined_rewards[i],
                "critic_reward": None if critic_rewards is None else critic_rewards[i],
                "feedback_tokens": len(f.token_ids),
                "refined_tokens": None if y1 is None else len(y1.token_ids),
                "feedback_step": analysis.named_step(f.text) if analysis is not None else None,
                "feedback_approves": analysis.approves(f.text) if analysis is not None else None,
                "feedback_verdict": parse_verdict(f.text, bench.verdict_syntax) if verdicts else None,
            }
        )
    return rows


def sample_counts(run: RunIdentity, step: int) -> dict:
    """The `actor_samples` and `generated_samples` columns: the run's cumulative actor training samples and
    generated samples after `step` (eval rows: at the evaluation's step; step 0: 0), i.e. the run's per-iteration
    counts (binac_core/rl/methods.py; flows/train.py sets them) times the iterations that added them: `step` for
    the generated samples, the actor iterations among them for the actor's (`schedule.actor_iterations_through`
    of the run's `alternation`). NULL for rows of a run without them (`binac evaluate`)."""
    if run.actor_samples_per_iteration is None:
        return {"actor_samples": None, "generated_samples": None}
    return {
        "actor_samples": actor_iterations_through(run.alternation, step) * run.actor_samples_per_iteration,
        "generated_samples": step * run.generated_samples_per_iteration,
    }


def _attempt_cols(
    a: Attempt, reward: float, questions: dict[str, str] | None, analysis: benchmarks.FeedbackAnalysis | None
) -> dict:
    first = analysis.first_wrong_step(questions[a.problem_id], a.text) if analysis is not None else None
    return {
        "problem_id": a.problem_id,
        "sample_idx": a.sample_idx,
        "prompt": a.prompt_text,
        "attempt": a.text,
        "attempt_reward": reward,
        "attempt_tokens": len(a.token_ids),
        "first_wrong_step": first,
    }
