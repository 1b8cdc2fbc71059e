"""What a step leaves behind in the store: its trajectory rows, one atomic shard per (run, protocol, step)
(`binac_core.store.storage`). Each writer returns the rows it stored, from which the step's metrics are computed
(`binac_core.reports.step_metrics`), so the MLflow numbers and SQL over `trajectories` agree by construction.
Rewriting a shard is idempotent (a re-run or a resumed run replaces it)."""

from __future__ import annotations

from binac_core.foundation.workspace import Workspace
from binac_core.model.stage_io import ScoredBatch
from binac_core.rl.evaluation import EXEC_PROTOCOLS, Evaluation
from binac_core.rl.kinds import EvalProtocol, FeedbackSource
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
    ws: Workspace,
    run: RunIdentity,
    step: int,
    scored: ScoredBatch,
    *,
    critic_rewards: list[float] | None = None,
    problems: list[dict] | None = None,
) -> list[dict]:
    """Write the iteration's rows and return them. `problems` (the batch) gives the synthetic task's first wrong
    steps."""
    questions = analysis_questions(run.benchmark, problems)
    rows = trajectory_rows(
        run,
        step,
        scored,
        split="train",
        protocol="train",
        critic_rewards=critic_rewards,
        questions=questions,
        verdicts=run.feedback is not FeedbackSource.FIXED,
    )
    storage.write_shard(ws, run.run_id, "train", step, rows)
    return rows


def store_eval(
    ws: Workspace, run: RunIdentity, step: int, result: Evaluation, problems: list[dict] | None = None
) -> dict[EvalProtocol, list[dict]]:
    """Write one shard per protocol evaluated (single, single_greedy, feedback, gated, feedback_frozen); return
    the rows stored, by protocol. `problems` (the held-out split) gives the synthetic task's first wrong steps."""
    questions, out = analysis_questions(run.benchmark, problems), {}
    verdicts = result.feedback_source is not FeedbackSource.FIXED
    single, greedy, feedback, gated, frozen = (
        EvalProtocol.SINGLE,
        EvalProtocol.SINGLE_GREEDY,
        EvalProtocol.FEEDBACK,
        EvalProtocol.GATED,
        EvalProtocol.FEEDBACK_FROZEN,
    )
    out[single] = trajectory_rows(run, step, result.single, split="eval", protocol=single, questions=questions)
    if result.single_greedy is not None:
        out[greedy] = trajectory_rows(
            run, step, result.single_greedy, split="eval", protocol=greedy, questions=questions
        )
    if result.feedback is not None:
        out[feedback] = _protocol_rows(run, step, feedback, result.rounds(feedback), questions, verdicts)
    if result.gated is not None:
        out[gated] = _protocol_rows(run, step, gated, result.gated, questions, verdicts)
    if result.feedback_frozen is not None:  # the frozen base critic on the same attempts
        out[frozen] = _protocol_rows(run, step, frozen, [result.feedback_frozen], questions)
    for protocol, rows in out.items():
        storage.write_shard(ws, run.run_id, f"eval-{protocol}", step, rows)
    return out


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


def _protocol_rows(
    run: RunIdentity,
    step: int,
    protocol: EvalProtocol,
    rounds: list[ScoredBatch],
    questions: dict[str, str] | None = None,
    verdicts: bool = True,
) -> list[dict]:
    """The held-out rows of a feedback protocol's rounds (one for `feedback`, up to K for `gated`); `verdicts`:
    False for a fixed instruction (`records.trajectory_rows`)."""
    rows = []
    for k, scored in enumerate(rounds, start=1):
        rows += trajectory_rows(
            run, step, scored, split="eval", protocol=protocol, round_=k, questions=questions, verdicts=verdicts
        )
    return rows


def store_bank(
    ws: Workspace,
    run: RunIdentity,
    step: int,
    scores: dict[EvalProtocol, dict[str, ScoredBatch]],
    problems: dict[str, list[dict]],
) -> dict[tuple[EvalProtocol, str], list[dict]]:
    """The attempt bank's rows at an evaluation (binac_core/rl/bank.py): per protocol (`bank`: the method's critic,
    `bank_frozen`: the frozen base critic) and bank split, one shard `<protocol>-<split>` of one row per
    feedback, in split `bank_<split>`, with the first-error analysis (`problems`: each split's rows) and the
    feedback's verdict; no refinement. Returns the rows stored, by (protocol, split)."""
    out = {}
    for protocol, by_split in scores.items():
        for split, scored in by_split.items():
            questions = analysis_questions(run.benchmark, problems[split])
            rows = trajectory_rows(run, step, scored, split=f"bank_{split}", protocol=protocol, questions=questions)
            storage.write_shard(ws, run.run_id, f"{protocol}-{split}", step, rows)
            out[(protocol, split)] = rows
    return out
