"""Held-out evaluation under named protocols (each number is reported with its protocol's name):

- `single`:        the actor alone; pass@1 = mean over problems of (correct samples / samples).
- `feedback`:      actor → feedback → actor; the refined answer counts. Unassisted: the critic sees the problem and
                   the attempt only, nothing from the verifier (for code: no execution result either).
- `feedback_exec`: code benchmarks only (MBPP): as `feedback`, but the critic's prompt also holds the execution
                   result of the attempt on the benchmark's asserts, i.e. on the very tests that grade the answer
                   (verifier-assisted: the critic is told whether, and how, the graded tests failed). This is the
                   feedback the critic is trained with on MBPP (the method's environment feedback).
- `gated`:         verifier-gated, up to K rounds (oracle-assisted: the verifier decides who gets another round,
                   as in the authors' precursor scripts); a sample counts if any of its turns is correct. Round 1
                   reuses the `feedback` protocol's feedback and refinement for the attempts that failed.
- `gated_exec`:    code only: `gated` with the `feedback_exec` critic prompts (round 1 reuses `feedback_exec`).

Metrics: `acc_single`, `acc_feedback`, `acc_feedback_exec`, `acc_gated_k{K}`, `acc_gated_exec_k{K}`.

Feedback source: every method is evaluated with the feedback it was trained with (`method_feedback_source`):
its own critic adapter (`critic (trained)`), the frozen initial critic = the base model in the critic role
(`critic (base, frozen)`: `fixed_critic`, and `grpo`, which trains no critic: its feedback protocols show what the
fixed_critic's feedback source does for a GRPO actor), or the self-correction baseline's fixed instruction
(`fixed instruction`, `binac_core.prompts.SELF_CORRECT_FEEDBACK`; no critic, so no `_exec` variants).
"""

from __future__ import annotations

from binac_core import benchmarks
from binac_core.episodes import (
    generate_attempts,
    generate_refinements,
    sample_feedback,
    score_with_errors,
    stage_seed,
)
from binac_core.errors import BinacError
from binac_core.generation import AdapterRef, GenerationBackend, SamplingParams
from binac_core.stats import mean as _mean

CRITIC_TRAINED = "critic (trained)"
CRITIC_BASE = "critic (base, frozen)"
FIXED_INSTRUCTION = "fixed instruction"
ORACLE = "oracle (rule-based)"
"""`oracle_critic`: the synthetic task's oracle, which names the first wrong step (it reads the reference)."""
CRITIC_ADAPTER = "critic (adapter)"
"""`binac evaluate --critic-adapter DIR`: an adapter given on the command line (how it was trained is not known)."""

FEEDBACK_PROTOCOLS = ("feedback", "gated")
EXEC_PROTOCOLS = ("feedback_exec", "gated_exec")


def method_feedback_source(method: str) -> str:
    """The feedback source a training method is evaluated with: the one it is trained with."""
    from binac_core.methods import SPECS

    spec = SPECS.get(method)
    if spec is None:
        return "–"
    if spec.feedback == "fixed":
        return FIXED_INSTRUCTION
    if spec.feedback == "oracle":
        return ORACLE
    return CRITIC_TRAINED if spec.train_critic else CRITIC_BASE


def training_protocols(benchmark: str, fixed_feedback: str | None) -> tuple[str, ...]:
    """The protocols training evaluates: all of them, with the `_exec` variants where they exist (a code
    benchmark and a critic)."""
    base = ("single", *FEEDBACK_PROTOCOLS)
    exec_too = benchmarks.get(benchmark).critic_sees_execution and fixed_feedback is None
    return base + EXEC_PROTOCOLS if exec_too else base


def check_protocols(benchmark: str, protocols: tuple[str, ...], fixed_feedback: str | None = None) -> None:
    known = ("single", *FEEDBACK_PROTOCOLS, *EXEC_PROTOCOLS)
    bad = [p for p in protocols if p not in known]
    if bad:
        raise BinacError(f"unknown protocol {bad[0]!r} (known: {', '.join(known)})")
    if set(EXEC_PROTOCOLS) & set(protocols):
        if not benchmarks.get(benchmark).critic_sees_execution:
            code = benchmarks.names(having=lambda b: b.critic_sees_execution)
            raise BinacError(f"the execution-assisted protocols need a code benchmark ({', '.join(code)});"
                             f" {benchmark!r} has no execution result to show the critic")
        if fixed_feedback is not None:
            raise BinacError("the execution-assisted protocols need a critic; the fixed instruction sees nothing")


def eval_stages(benchmark: str, protocol: str, critic_sees_execution: bool = False, feedback: str = "critic"):
    """`binac evaluate`'s choices as (stages to run, the reported protocol name, the fixed feedback text or None);
    validated before any compute. `critic_sees_execution` turns feedback/gated into feedback_exec/gated_exec."""
    from binac_core.plans import PROTOCOL_STAGES
    from binac_core.prompts import SELF_CORRECT_FEEDBACK

    if feedback not in ("critic", "fixed"):
        raise BinacError(f"--feedback must be critic or fixed (got {feedback!r})")
    if protocol not in PROTOCOL_STAGES:
        raise BinacError(f"unknown protocol {protocol!r} (known: {', '.join(PROTOCOL_STAGES)})")
    stages = PROTOCOL_STAGES[protocol]
    if critic_sees_execution:
        stages = tuple(s if s == "single" else f"{s}_exec" for s in stages)
    fixed = SELF_CORRECT_FEEDBACK if feedback == "fixed" else None
    check_protocols(benchmark, stages, fixed)
    return stages, stages[-1], fixed


def evaluate_protocols(
    backend: GenerationBackend, benchmark: str, problems: list[dict], actor: AdapterRef | None,
    critic: AdapterRef | None, samples: int, gen: dict, seed: int, step: int, protocols: tuple[str, ...],
    gated_k: int = 2, fixed_feedback: str | None = None, feedback_source: str = CRITIC_BASE,
    oracle_feedback: bool = False,
) -> dict:
    """Returns {"metrics": {"acc_single": ..}, "feedback_source": .., "single": {...records}, "feedback": {...},
    "gated": [rounds], "feedback_exec": {...}, "gated_exec": [rounds]} (the protocols asked for).
    `fixed_feedback`: the feedback text given instead of a critic's (the self-correction baseline);
    `oracle_feedback`: the rule-based oracle's feedback instead of a critic's (`oracle_critic`, synthetic only)."""
    check_protocols(benchmark, protocols, fixed_feedback)
    by_id = {r["id"]: r for r in problems}

    def params(name: str, max_new: int) -> SamplingParams:
        return SamplingParams(max_new, gen["temperature"], gen["top_p"], stage_seed(seed, step, "eval", name))

    attempts = generate_attempts(backend, benchmark, problems, actor, samples, params("y0", gen["max_new_tokens"]))
    r0, err0 = score_with_errors(benchmark, by_id, attempts)
    out: dict = {"metrics": {}, "feedback_source": feedback_source, "single": {"attempts": attempts, "r0": r0}}
    if "single" in protocols:
        out["metrics"]["acc_single"] = _mean(r0)
    for suffix in ("", "_exec"):
        if not {f"feedback{suffix}", f"gated{suffix}"} & set(protocols):
            continue
        show_exec = suffix == "_exec"  # the critic is shown the graded tests' execution result
        fb = sample_feedback(backend, benchmark, by_id, attempts, critic, 1,
                             params("z1", gen["feedback_max_new_tokens"]), fixed_text=fixed_feedback,
                             errors=err0 if show_exec else None, oracle=oracle_feedback)
        y1 = generate_refinements(backend, benchmark, by_id, attempts, fb, actor, params("y1", gen["max_new_tokens"]))
        r1, err1 = score_with_errors(benchmark, by_id, y1)
        out[f"feedback{suffix}"] = {"attempts": attempts, "r0": r0, "feedback": fb, "refined": y1, "r1": r1}
        if f"feedback{suffix}" in protocols:
            out["metrics"][f"acc_feedback{suffix}"] = _mean(r1)
        if f"gated{suffix}" in protocols:
            out[f"gated{suffix}"], out["metrics"][f"acc_gated{suffix}_k{gated_k}"] = _gated(
                backend, benchmark, by_id, attempts, r0, fb, y1, (r1, err1 if show_exec else None), actor, critic,
                gated_k, params, gen, (fixed_feedback, oracle_feedback),
            )
    return out


def _gated(backend, benchmark, by_id, attempts, r0, fb, y1, scored_y1, actor, critic, k, params, gen, not_critic):
    """`scored_y1` = (r1, execution results to show the critic in later rounds, or None for an unassisted critic);
    `not_critic` = (the fixed feedback text or None, whether the oracle writes the feedback)."""
    fixed_feedback, oracle = not_critic
    r1, err1 = scored_y1
    show_exec = err1 is not None
    solved = {(a["problem_id"], a["sample_idx"]): r > 0 for a, r in zip(attempts, r0, strict=True)}
    failed = [i for i, a in enumerate(attempts) if not solved[(a["problem_id"], a["sample_idx"])]]
    rounds = []
    current = [attempts[i] for i in failed]
    cur_r0 = [r0[i] for i in failed]
    fb_r, y_r, r_r = [fb[i] for i in failed], [y1[i] for i in failed], [r1[i] for i in failed]
    err_r = [err1[i] for i in failed] if show_exec else None
    cur_err = None  # round 1 reuses the feedback protocol's feedback; later rounds set it
    for rnd in range(1, k + 1):
        if rnd > 1:
            if not current:
                break
            fb_r = sample_feedback(
                backend, benchmark, by_id, current, critic, 1, params(f"z{rnd}", gen["feedback_max_new_tokens"]),
                fixed_text=fixed_feedback, errors=cur_err, oracle=oracle,
            )
            y_r = generate_refinements(
                backend, benchmark, by_id, current, fb_r, actor, params(f"y{rnd}", gen["max_new_tokens"])
            )
            r_r, err_r = score_with_errors(benchmark, by_id, y_r)
            err_r = err_r if show_exec else None
        rounds.append({"attempts": current, "r0": cur_r0, "feedback": fb_r, "refined": y_r, "r1": r_r})
        for y, r in zip(y_r, r_r, strict=True):
            if r > 0:
                solved[(y["problem_id"], y["sample_idx"])] = True
        # The next round critiques the latest (still wrong) answer, keeping the sample's identity.
        keep = [i for i, y in enumerate(y_r) if not solved[(y["problem_id"], y["sample_idx"])]]
        current = [{**current[i], "text": y_r[i]["text"], "token_ids": y_r[i]["token_ids"]} for i in keep]
        cur_r0 = [r_r[i] for i in keep]
        cur_err = [err_r[i] for i in keep] if err_r is not None else None  # the errors of the answers kept
    return rounds, _mean([float(v) for v in solved.values()])
