"""Held-out evaluation under three named protocols (each number is reported with its protocol's name):

- `single`:   the actor alone; pass@1 = mean over problems of (correct samples / samples).
- `feedback`: actor → critic → actor; the refined answer counts; no verifier in the loop.
- `gated`:    verifier-gated, up to K rounds (oracle-assisted: the verifier decides who gets another round,
              as in the authors' precursor scripts); a sample counts if any of its turns is correct.
Round 1 of `gated` reuses the `feedback` protocol's feedback and refinement for the attempts that failed.
"""

from __future__ import annotations

from binac_core.episodes import (
    generate_attempts,
    generate_refinements,
    sample_feedback,
    score_with_errors,
    stage_seed,
)
from binac_core.generation import AdapterRef, GenerationBackend, SamplingParams


def evaluate_protocols(
    backend: GenerationBackend, benchmark: str, problems: list[dict], actor: AdapterRef | None,
    critic: AdapterRef | None, samples: int, gen: dict, seed: int, step: int, protocols: tuple[str, ...],
    gated_k: int = 2,
) -> dict:
    """Returns {"metrics": {"acc_single": ..}, "single": {...records}, "feedback": {...}, "gated": [rounds]}."""
    by_id = {r["id"]: r for r in problems}

    def params(name: str, max_new: int) -> SamplingParams:
        return SamplingParams(max_new, gen["temperature"], gen["top_p"], stage_seed(seed, step, "eval", name))

    attempts = generate_attempts(backend, benchmark, problems, actor, samples, params("y0", gen["max_new_tokens"]))
    r0, err0 = score_with_errors(benchmark, by_id, attempts)
    out: dict = {"metrics": {}, "single": {"attempts": attempts, "r0": r0}}
    if "single" in protocols:
        out["metrics"]["acc_single"] = _mean(r0)
    if not {"feedback", "gated"} & set(protocols):
        return out
    fb = sample_feedback(backend, benchmark, by_id, attempts, critic, 1, params("z1", gen["feedback_max_new_tokens"]),
                         errors=err0)
    y1 = generate_refinements(backend, benchmark, by_id, attempts, fb, actor, params("y1", gen["max_new_tokens"]))
    r1, err1 = score_with_errors(benchmark, by_id, y1)
    out["feedback"] = {"attempts": attempts, "r0": r0, "feedback": fb, "refined": y1, "r1": r1}
    if "feedback" in protocols:
        out["metrics"]["acc_feedback"] = _mean(r1)
    if "gated" in protocols:
        out["gated"], out["metrics"][f"acc_gated_k{gated_k}"] = _gated(
            backend, benchmark, by_id, attempts, r0, fb, y1, (r1, err1), actor, critic, gated_k, params, gen
        )
    return out


def _gated(backend, benchmark, by_id, attempts, r0, fb, y1, scored_y1, actor, critic, k, params, gen):
    r1, err1 = scored_y1
    solved = {(a["problem_id"], a["sample_idx"]): r > 0 for a, r in zip(attempts, r0, strict=True)}
    failed = [i for i, a in enumerate(attempts) if not solved[(a["problem_id"], a["sample_idx"])]]
    rounds = []
    current = [attempts[i] for i in failed]
    cur_r0 = [r0[i] for i in failed]
    fb_r, y_r, r_r = [fb[i] for i in failed], [y1[i] for i in failed], [r1[i] for i in failed]
    err_r = [err1[i] for i in failed] if err1 is not None else None
    cur_err = None  # round 1 reuses the feedback protocol's feedback; later rounds set it
    for rnd in range(1, k + 1):
        if rnd > 1:
            if not current:
                break
            fb_r = sample_feedback(
                backend, benchmark, by_id, current, critic, 1, params(f"z{rnd}", gen["feedback_max_new_tokens"]),
                errors=cur_err,
            )
            y_r = generate_refinements(
                backend, benchmark, by_id, current, fb_r, actor, params(f"y{rnd}", gen["max_new_tokens"])
            )
            r_r, err_r = score_with_errors(benchmark, by_id, y_r)
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


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0
