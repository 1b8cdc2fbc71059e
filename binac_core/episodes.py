"""The stages of one Bi-NAC episode, as plain functions over JSON-able records (no orchestration here).

x → y0 ~ actor(x) → z ~ critic(x, y0) → y1 ~ actor(x, y0, z) → r0 = R(x, y0), r1 = R(x, y1).

Records are dicts so a stage's output can be written to disk and handed to the next stage by path:
- attempt:  problem_id, sample_idx, prompt_text, prompt_ids, text, token_ids, logprobs, reward
- feedback: problem_id, sample_idx, feedback_idx, text, prompt_ids, token_ids, logprobs (no tokens for a fixed text)
- refined:  problem_id, sample_idx, feedback_idx, prompt_ids, text, token_ids, logprobs, reward
The critic sees the problem and the attempt only (plus the execution result where the benchmark's
`critic_sees_execution`, code), never the reference answer: a benchmark's `critic_messages` does not read it.
"""

from __future__ import annotations

import hashlib
import random

from binac_core import benchmarks
from binac_core.errors import BinacError
from binac_core.generation import AdapterRef, GenerationBackend, SamplingParams


def stage_seed(*parts) -> int:
    """A sampling seed derived from (run seed, step, stage, ...): reruns and resumed runs sample identically."""
    return int(hashlib.sha256(repr(parts).encode()).hexdigest()[:8], 16)


def sample_problems(rows: list[dict], n: int, seed: int, step: int) -> list[dict]:
    """n problems for this iteration: a fresh permutation per epoch, deterministic in (seed, step)."""
    per_epoch = max(len(rows) // n, 1)
    epoch, offset = divmod(step, per_epoch)
    order = list(range(len(rows)))
    random.Random(stage_seed(seed, "epoch", epoch)).shuffle(order)
    return [rows[i] for i in order[offset * n : offset * n + n]]


def generate_attempts(
    backend: GenerationBackend, benchmark: str, problems: list[dict], actor: AdapterRef | None,
    group_size: int, params: SamplingParams,
) -> list[dict]:
    bench = benchmarks.get(benchmark)
    msgs, keys = [], []
    for row in problems:
        for k in range(group_size):
            msgs.append(bench.actor_messages(row))
            keys.append((row["id"], k))
    gens = backend.generate(msgs, actor, params)
    out = []
    for (pid, k), m, g in zip(keys, msgs, gens, strict=True):
        out.append({
            "problem_id": pid, "sample_idx": k, "prompt_text": m[-1]["content"], "prompt_ids": g.prompt_ids,
            "text": g.text, "token_ids": g.token_ids, "logprobs": g.logprobs,
        })
    return out


def sample_feedback(
    backend: GenerationBackend, benchmark: str, problems: dict[str, dict], attempts: list[dict],
    critic: AdapterRef | None, per_attempt: int, params: SamplingParams, fixed_text: str | None = None,
    errors: list[str | None] | None = None, oracle: bool = False,
) -> list[dict]:
    """`per_attempt` feedbacks for each attempt from the critic adapter, or `per_attempt` copies of the fixed text
    (self-correction) or of the benchmark's rule-based oracle (`oracle`: the synthetic task's; it reads the
    reference). `errors` (code tasks) are the attempts' execution results (`score_with_errors`), put in the
    critic's prompt. Fixed and oracle feedback carry no tokens: nothing trains on them."""
    bench = benchmarks.get(benchmark)
    if oracle and bench.oracle_feedback is None:
        raise BinacError(f"benchmark {benchmark!r} has no oracle critic")
    if fixed_text is not None or oracle:
        return [
            {"problem_id": a["problem_id"], "sample_idx": a["sample_idx"], "feedback_idx": j,
             "text": bench.oracle_feedback(problems[a["problem_id"]], a["text"]) if oracle else fixed_text,
             "prompt_ids": [], "token_ids": [], "logprobs": []}
            for a in attempts for j in range(per_attempt)
        ]
    msgs, keys = [], []
    for i, a in enumerate(attempts):
        row = problems[a["problem_id"]]
        err = errors[i] if errors else None
        for j in range(per_attempt):
            msgs.append(bench.critic_messages(row, a["text"], err))
            keys.append((a["problem_id"], a["sample_idx"], j))
    gens = backend.generate(msgs, critic, params)
    return [
        {"problem_id": p, "sample_idx": s, "feedback_idx": j, "text": g.text, "prompt_ids": g.prompt_ids,
         "token_ids": g.token_ids, "logprobs": g.logprobs}
        for (p, s, j), g in zip(keys, gens, strict=True)
    ]


def generate_refinements(
    backend: GenerationBackend, benchmark: str, problems: dict[str, dict], attempts: list[dict],
    feedbacks: list[dict], actor: AdapterRef | None, params: SamplingParams,
) -> list[dict]:
    bench = benchmarks.get(benchmark)
    by_key = {(a["problem_id"], a["sample_idx"]): a for a in attempts}
    msgs = []
    for f in feedbacks:
        a = by_key[(f["problem_id"], f["sample_idx"])]
        msgs.append(bench.refine_messages(problems[f["problem_id"]], a["text"], f["text"]))
    gens = backend.generate(msgs, actor, params)
    return [
        {"problem_id": f["problem_id"], "sample_idx": f["sample_idx"], "feedback_idx": f["feedback_idx"],
         "prompt_ids": g.prompt_ids, "text": g.text, "token_ids": g.token_ids, "logprobs": g.logprobs}
        for f, g in zip(feedbacks, gens, strict=True)
    ]


def score(benchmark: str, problems: dict[str, dict], records: list[dict]) -> list[float]:
    """Verifier rewards with the benchmark's one grading function (reward = evaluation)."""
    return score_with_errors(benchmark, problems, records)[0]


def score_with_errors(
    benchmark: str, problems: dict[str, dict], records: list[dict]
) -> tuple[list[float], list[str | None] | None]:
    """`score`, and where the critic may see it (`critic_sees_execution`: code benchmarks) each answer's
    execution result as the critic is shown it (the sandbox's failure reason, or `All tests passed.`); both come
    from one sandbox run per answer. The second item is None for other benchmarks."""
    from binac_core.grading import grade_batch_with_reasons

    graded = grade_batch_with_reasons(
        benchmark, [problems[r["problem_id"]] for r in records], [r["text"] for r in records]
    )
    if not benchmarks.get(benchmark).critic_sees_execution:
        return [g for g, _ in graded], None
    return [g for g, _ in graded], [reason if g == 0.0 else "All tests passed." for g, reason in graded]
