"""A study's regimes: measuring the base model at a difficulty, before any RL run (on a benchmark with an oracle
critic and a first-error analysis: the synthetic task).

`measure_base` samples G first attempts per held-out problem from the base model (no adapters) with the
pipeline's own generation backend and chat template, then gives every attempt four second turns that differ
only in the feedback: the base model in the critic role (the initial critic), the rule-based oracle, the
fixed self-correction instruction, and approval (`FeedbackAnalysis.approval`, "Looks correct.", in the critic's
form where the benchmark writes one: `FeedbackAnalysis.critique`) whatever the attempt. It returns
- `all_wrong_frac`: share of problems whose G attempts are all wrong, i.e. GRPO groups with no signal at step 0
  (the sparse regime's rule reads it);
- the bounds of feedback as in docs/results-tiny.md: accuracy single-turn and after each feedback source, with
  the share of attempts fixed (wrong → right) and broken (right → wrong) by it, and the initial critic's
  measures (`binac_core.reports.measures`);
- the shortcut check: over attempts with a first wrong step, the share whose refinement after approval is right
  (`shortcut_right`, of `shortcut_n` attempts; a base that copies after approval scores ~0) and the share that
  keep the attempt's final answer (`shortcut_copy`: a copy of every step or of the answer line alone); and the same right-share over the wrong attempts the initial critic itself
  approved (`critic_approved_wrong_right`, of `critic_approved_wrong_n`).
- `greedy_single` (`greedy_right` of `problems`): single-turn accuracy of one greedy attempt per problem;
- with a benchmark that can write step hints (`FeedbackAnalysis.right_steps`, the synthetic task), a fifth second
  turn after a hint naming another locally right step, and `preconditions`: the measures and intervals of
  `binac_core.studies.preconditions` (the gates G1-G4).
`sparse_difficulty` and `closest_difficulty` apply the rules. Sampling seeds are derived from (seed, difficulty, stage), so a
measurement is reproducible and cached by the study.
"""

from __future__ import annotations

import random

from binac_core import benchmarks
from binac_core.benchmarks.synthetic import final_answer
from binac_core.foundation.stats import mean as _mean
from binac_core.model.generation import SamplingParams
from binac_core.model.stage_io import Attempt
from binac_core.reports.measures import critic_error_measures, zero_adv_frac
from binac_core.rl.episodes import (
    generate_attempts,
    generate_refinements,
    sample_feedback,
    score,
    stage_seed,
    written_feedback,
)
from binac_core.rl.methods import FeedbackSource
from binac_core.studies import preconditions

SOURCES = ("initial_critic", "oracle", "self_correct", "approve", "other_step")


def measure_base(
    backend, problems: list[dict], *, group_size: int, gen, seed: int, bounds: bool = True, benchmark: str
) -> dict:
    """The rule's statistic and (with `bounds`) the feedback bounds of the base model on `problems` (rows of
    `benchmark`). `gen` is the config's `generation` section (temperature, answer and feedback budgets)."""
    difficulty = problems[0]["difficulty"]
    bench = benchmarks.get(benchmark)

    def params(stage: str, max_new: int) -> SamplingParams:
        return SamplingParams(max_new, gen.temperature, gen.top_p, stage_seed(seed, "regime", difficulty, stage))

    by_id = {p["id"]: p for p in problems}
    attempts = generate_attempts(backend, benchmark, problems, None, group_size, params("y0", gen.max_new_tokens))
    first_rewards = score(benchmark, by_id, attempts)
    greedy = generate_attempts(
        backend,
        benchmark,
        problems,
        None,
        1,
        SamplingParams(gen.max_new_tokens, 0.0, 1.0, stage_seed(seed, "regime", difficulty, "greedy")),
    )
    greedy_rewards = score(benchmark, by_id, greedy)
    out = {
        "difficulty": difficulty,
        "problems": len(problems),
        "group_size": group_size,
        "seed": seed,
        "temperature": gen.temperature,
        "single": _mean(first_rewards),
        "greedy_single": _mean(greedy_rewards),
        "greedy_right": int(sum(r > 0 for r in greedy_rewards)),
        "all_wrong_frac": 1.0 - _share_of_groups_with_a_success(attempts, first_rewards),
        "zero_adv_frac": zero_adv_frac([a.problem_id for a in attempts], first_rewards),
    }
    if not bounds:
        return out
    feedbacks = {
        "initial_critic": sample_feedback(
            backend,
            benchmark,
            by_id,
            attempts,
            FeedbackSource.CRITIC_BASE,
            None,
            1,
            params("z", gen.feedback_max_new_tokens),
        ),
        "oracle": sample_feedback(backend, benchmark, by_id, attempts, FeedbackSource.ORACLE, None, 1, params("z", 1)),
        "self_correct": sample_feedback(
            backend, benchmark, by_id, attempts, FeedbackSource.FIXED, None, 1, params("z", 1)
        ),
        "approve": written_feedback(attempts, 1, lambda a: _approval(bench.feedback_analysis, by_id, a)),
    }
    analysis = bench.feedback_analysis
    other_steps = _other_step_hints(analysis, by_id, attempts, stage_seed(seed, "regime", difficulty, "other"))
    if other_steps is not None:
        feedbacks["other_step"] = written_feedback(
            attempts, 1, lambda a: other_steps[(a.problem_id, a.sample_idx)] or _approval(analysis, by_id, a)
        )
    wrong_steps = [analysis.first_wrong_step(by_id[a.problem_id]["question"], a.text) is not None for a in attempts]
    refined_by_source = {}
    for name, fb in feedbacks.items():
        y1 = generate_refinements(
            backend, benchmark, by_id, attempts, fb, None, params(f"y1-{name}", gen.max_new_tokens)
        )
        refined_rewards = score(benchmark, by_id, y1)
        refined_by_source[name] = (y1, refined_rewards)
        pairs = list(zip(first_rewards, refined_rewards, strict=True))
        out[name] = _mean(refined_rewards)
        out[f"{name}_fixed"] = _mean([float(a == 0 and b > 0) for a, b in pairs])
        out[f"{name}_broken"] = _mean([float(a > 0 and b == 0) for a, b in pairs])
    for key in ("other_step", "other_step_fixed", "other_step_broken"):  # mixed with approvals: see preconditions
        out.pop(key, None)
    out.update(_shortcut(attempts, wrong_steps, refined_by_source["approve"]))
    critic = feedbacks["initial_critic"]
    y1, rewards = refined_by_source["initial_critic"]
    approved = [w and analysis.approves(c.text) for w, c in zip(wrong_steps, critic, strict=True)]
    out["critic_approved_wrong_n"] = sum(approved)
    right = [r for r, a in zip(rewards, approved, strict=True) if a]
    out["critic_approved_wrong_right"] = _mean(right) if right else None
    out.update(
        critic_error_measures(
            [
                {
                    "attempt_reward": r,
                    "first_wrong_step": analysis.first_wrong_step(by_id[a.problem_id]["question"], a.text),
                    "feedback_step": analysis.named_step(c.text),
                    "feedback_approves": analysis.approves(c.text),
                }
                for a, r, c in zip(attempts, first_rewards, critic, strict=True)
            ]
        )
    )
    out["critic_agrees_with_oracle"] = _mean(
        [
            float(c.text.strip() == bench.oracle_feedback(by_id[a.problem_id], a.text))
            for a, c in zip(attempts, critic, strict=True)
        ]
    )
    if other_steps is not None:
        records = _attempt_records(analysis, by_id, attempts, first_rewards, feedbacks, refined_by_source, other_steps)
        all_wrong = round(out["all_wrong_frac"] * len(problems))
        out["preconditions"] = {
            name: e.to_json()
            for name, e in preconditions.measures(
                records, out["greedy_right"], len(greedy), all_wrong, len(problems), seed
            ).items()
        }
    return out


def _approval(analysis, by_id: dict, a: Attempt) -> str:
    """The approving feedback of attempt `a` in the critic's form (`FeedbackAnalysis.critique`), else the bare
    approval text."""
    if analysis.critique is None:
        return analysis.approval
    return analysis.critique(by_id[a.problem_id], a.text, None)


def _other_step_hints(analysis, by_id: dict, attempts: list[Attempt], seed: int) -> dict | None:
    """For each attempt (by (problem_id, sample_idx)) a hint in the critic's form naming one of its locally right
    steps other than the first wrong one, drawn uniformly (seeded); None where there is none (such an attempt gets
    the approval, and is left out of the measures that read the hint). None when the benchmark cannot write step
    hints."""
    if analysis.right_steps is None or analysis.critique is None:
        return None
    rng = random.Random(seed)
    out = {}
    for a in attempts:
        question = by_id[a.problem_id]["question"]
        first = analysis.first_wrong_step(question, a.text)
        others = [k for k in analysis.right_steps(question, a.text) if k != first]
        out[(a.problem_id, a.sample_idx)] = (
            analysis.critique(by_id[a.problem_id], a.text, rng.choice(others)) if others else None
        )
    return out


def _attempt_records(analysis, by_id, attempts, first_rewards, feedbacks, refined_by_source, other_steps):
    """One `preconditions.AttemptRecord` per first attempt, from the sources' feedbacks and second turns."""
    records = []
    for i, a in enumerate(attempts):
        question = by_id[a.problem_id]["question"]
        first = analysis.first_wrong_step(question, a.text)
        has_other = other_steps[(a.problem_id, a.sample_idx)] is not None
        critic = feedbacks["initial_critic"][i].text
        records.append(
            preconditions.AttemptRecord(
                problem_id=a.problem_id,
                right=first_rewards[i] > 0,
                first_wrong_step=first,
                has_other_step=has_other,
                critic_step=analysis.named_step(critic),
                critic_approves=analysis.approves(critic),
                oracle_step=analysis.named_step(feedbacks["oracle"][i].text),
                after_oracle=refined_by_source["oracle"][1][i],
                after_other_step=refined_by_source["other_step"][1][i] if has_other else None,
                after_self_correct=refined_by_source["self_correct"][1][i],
                after_approval=refined_by_source["approve"][1][i],
            )
        )
    return records


def _shortcut(attempts: list[Attempt], wrong_steps: list[bool], approved: tuple[list, list[float]]) -> dict:
    """The shortcut check over the attempts with a first wrong step, each refined after approval."""
    y1, rewards = approved
    idx = [i for i, w in enumerate(wrong_steps) if w]
    return {
        "shortcut_n": len(idx),
        "shortcut_right": _mean([rewards[i] for i in idx]) if idx else None,
        "shortcut_copy": _mean([float(_same_answer(y1[i].text, attempts[i].text)) for i in idx]) if idx else None,
    }


def _same_answer(refined: str, attempt: str) -> bool:
    """The refinement keeps the attempt's final answer (a copy of every step, or of the answer line alone)."""
    answer = final_answer(attempt)
    return answer is not None and final_answer(refined) == answer


def closest_difficulty(measured: dict[int, dict], target: float) -> int:
    """The difficulty whose single-turn accuracy is closest to `target` (a tie, up to float rounding at 1e-9: the
    smaller difficulty)."""
    return min(sorted(measured), key=lambda d: round(abs(measured[d]["single"] - target), 9))


def sparse_difficulty(measured: dict[int, dict], threshold: float) -> int | None:
    """The smallest difficulty whose `all_wrong_frac` is at least `threshold`, or None when none is."""
    hits = [d for d, m in sorted(measured.items()) if m["all_wrong_frac"] >= threshold]
    return hits[0] if hits else None


def _share_of_groups_with_a_success(attempts: list[Attempt], rewards: list[float]) -> float:
    solved: dict[str, bool] = {}
    for a, r in zip(attempts, rewards, strict=True):
        solved[a.problem_id] = solved.get(a.problem_id, False) or r > 0
    return sum(solved.values()) / len(solved)
