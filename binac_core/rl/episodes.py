"""The stages of one Bi-NAC episode, as plain functions over the records of `binac_core.model.stage_io` (no
orchestration here).

x → y0 ~ actor(x) → z ~ critic(x, y0) → y1 ~ actor(x, y0, z) → r0 = R(x, y0), r1 = R(x, y1):
`generate_attempts` gives the `Attempt`s y0, `sample_feedback` the `Feedback`s z, `generate_refinements` the
`Refinement`s y1, and `score`/`score_with_errors` the rewards (and the execution results the critic may see).
The critic sees the problem and the attempt only (plus the execution result where the benchmark's
`critic_sees_execution`, code), never the reference answer: a benchmark's `critic_messages` does not read it.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence

from binac_core import benchmarks
from binac_core.benchmarks.grade import grade_batch_with_reasons
from binac_core.benchmarks.prompts import SELF_CORRECT_FEEDBACK
from binac_core.errors import BinacError
from binac_core.model.generation import AdapterRef, GenerationBackend, SamplingParams
from binac_core.model.stage_io import Attempt, Feedback, Refinement, Scores
from binac_core.rl.methods import FeedbackSource


def _generated(g) -> dict:
    """A generation's text and tokens (`text`, `prompt_ids`, `token_ids`, `logprobs`): the fields every stage
    record copies from what the backend returned."""
    return dict(text=g.text, prompt_ids=g.prompt_ids, token_ids=g.token_ids, logprobs=g.logprobs)


def stage_seed(*parts) -> int:
    """A sampling seed derived from (run seed, step, stage, ...): reruns and resumed runs sample identically."""
    return int(hashlib.sha256(repr(parts).encode()).hexdigest()[:8], 16)


def sample_problems(rows: Sequence[dict], n: int, seed: int, step: int) -> list[dict]:
    """n problems for this iteration: a fresh permutation per epoch, deterministic in (seed, step)."""
    per_epoch = max(len(rows) // n, 1)
    epoch, offset = divmod(step, per_epoch)
    order = list(range(len(rows)))
    random.Random(stage_seed(seed, "epoch", epoch)).shuffle(order)
    return [rows[i] for i in order[offset * n : offset * n + n]]


def generate_attempts(
    backend: GenerationBackend,
    benchmark: str,
    problems: list[dict],
    actor: AdapterRef | None,
    group_size: int,
    params: SamplingParams,
) -> list[Attempt]:
    bench = benchmarks.get(benchmark)
    msgs, keys = [], []
    for row in problems:
        for k in range(group_size):
            msgs.append(bench.actor_messages(row))
            keys.append((row["id"], k))
    gens = backend.generate(msgs, actor, params)
    return [
        Attempt(
            problem_id=pid,
            sample_idx=k,
            prompt_text=m[-1]["content"],
            **_generated(g),
        )
        for (pid, k), m, g in zip(keys, msgs, gens, strict=True)
    ]


def sample_feedback(
    backend: GenerationBackend,
    benchmark: str,
    problems: dict[str, dict],
    attempts: list[Attempt],
    source: FeedbackSource,
    critic: AdapterRef | None,
    per_attempt: int,
    params: SamplingParams,
    execution_results: list[str | None] | None = None,
    verdict: bool = False,
) -> list[Feedback]:
    """`per_attempt` feedbacks for each attempt from `source`: sampled from the critic role (`critic`: its adapter,
    None for the base model) for a critic source, else written: the self-correction text (`FIXED`) or the
    benchmark's rule-based oracle (`ORACLE`: the synthetic task's; it reads the reference). `execution_results`
    (code tasks) are the attempts' execution results (`score_with_errors`), put in the critic's prompt; `verdict`
    (`critic.verdict`) asks the critic for a last verdict line."""
    bench = benchmarks.get(benchmark)
    if source is FeedbackSource.ORACLE:
        if bench.oracle_feedback is None:
            raise BinacError(f"benchmark {benchmark!r} has no oracle critic")
        return written_feedback(attempts, per_attempt, lambda a: bench.oracle_feedback(problems[a.problem_id], a.text))
    if source is FeedbackSource.FIXED:
        return written_feedback(attempts, per_attempt, lambda a: SELF_CORRECT_FEEDBACK)
    msgs, keys = [], []
    for i, a in enumerate(attempts):
        row = problems[a.problem_id]
        shown = execution_results[i] if execution_results else None
        for j in range(per_attempt):
            msgs.append(bench.critic_messages(row, a.text, shown, verdict))
            keys.append((a.problem_id, a.sample_idx, j))
    gens = backend.generate(msgs, critic, params)
    return [
        Feedback(
            problem_id=p,
            sample_idx=s,
            feedback_idx=j,
            **_generated(g),
        )
        for (p, s, j), g in zip(keys, gens, strict=True)
    ]


def written_feedback(attempts: list[Attempt], per_attempt: int, text_of) -> list[Feedback]:
    """`per_attempt` copies of the text `text_of(attempt)` for each attempt: feedback that is written, not sampled
    (it carries no tokens: nothing trains on it)."""
    return [
        Feedback(
            problem_id=a.problem_id,
            sample_idx=a.sample_idx,
            feedback_idx=j,
            text=text_of(a),
            prompt_ids=[],
            token_ids=[],
            logprobs=[],
        )
        for a in attempts
        for j in range(per_attempt)
    ]


def generate_refinements(
    backend: GenerationBackend,
    benchmark: str,
    problems: dict[str, dict],
    attempts: list[Attempt],
    feedbacks: list[Feedback],
    actor: AdapterRef | None,
    params: SamplingParams,
) -> list[Refinement]:
    bench = benchmarks.get(benchmark)
    by_key = {(a.problem_id, a.sample_idx): a for a in attempts}
    msgs = []
    for f in feedbacks:
        a = by_key[(f.problem_id, f.sample_idx)]
        msgs.append(bench.refine_messages(problems[f.problem_id], a.text, f.text))
    gens = backend.generate(msgs, actor, params)
    return [
        Refinement(
            problem_id=f.problem_id,
            sample_idx=f.sample_idx,
            feedback_idx=f.feedback_idx,
            **_generated(g),
        )
        for f, g in zip(feedbacks, gens, strict=True)
    ]


def score(benchmark: str, problems: dict[str, dict], answers: list[Attempt] | list[Refinement]) -> list[float]:
    """Verifier rewards with the benchmark's one grading function (reward = evaluation)."""
    return score_with_errors(benchmark, problems, answers).rewards


def score_with_errors(benchmark: str, problems: dict[str, dict], answers: list[Attempt] | list[Refinement]) -> Scores:
    """`score`, and where the critic may see it (`critic_sees_execution`: code benchmarks) each answer's
    execution result as the critic is shown it (the sandbox's failure reason, or `All tests passed.`); both come
    from one sandbox run per answer. `execution_results` is None for other benchmarks."""
    graded = grade_batch_with_reasons(benchmark, [problems[r.problem_id] for r in answers], [r.text for r in answers])
    rewards = [g for g, _ in graded]
    if not benchmarks.get(benchmark).critic_sees_execution:
        return Scores(rewards)
    return Scores(rewards, [reason if g == 0.0 else "All tests passed." for g, reason in graded])
