"""The hand-made batch the critic-reward stage's tests share: two attempts (wrong r0 = 0, right r0 = 1), K = 2
feedbacks each with verdicts [incorrect, correct] and [correct, none], r1 = [1, 0, 1, 1] and r1⁺ = [1, 0, 0, 1],
on `micro` with the math benchmark, λ = 0.5 and α = 1 (μ = 1). tests/benchmarks/test_verdict.py works out the
rewards by hand."""

from __future__ import annotations

from pathlib import Path


def verdict_case(tmp_path: Path, **train) -> tuple[dict, dict[str, str]]:
    """The config as a dict (`train` fields updated on top of λ and α) and the stage files by the keyword names of
    `tasks.critic_update.critic_reward_task`."""
    from binac_core.foundation.config import load_config
    from binac_core.foundation.files import write_json
    from binac_core.model.stage_io import Attempt, Feedback, write_records

    cfg = load_config("micro").model_copy(deep=True)
    cfg = cfg.model_copy(
        update={
            "task": cfg.task.model_copy(update={"benchmark": "math"}),
            "train": cfg.train.model_copy(update={"lam": 0.5, "alpha_shaping": 1.0, **train}),
        }
    )
    attempts = [
        Attempt(problem_id="p", sample_idx=k, prompt_text="", prompt_ids=[], text="x", token_ids=[1], logprobs=[0.0])
        for k in (0, 1)
    ]
    texts = ["Step 2 is off.\nVerdict: incorrect", "Fine.\nVerdict: correct", "Verdict: correct", "Hmm."]
    feedback = [
        Feedback(
            problem_id="p", sample_idx=i // 2, feedback_idx=i % 2, text=t, prompt_ids=[], token_ids=[1], logprobs=[0.0]
        )
        for i, t in enumerate(texts)
    ]
    files = {
        "refined_rewards": write_json(tmp_path / "r1.json", [1.0, 0.0, 1.0, 1.0]),
        "lookahead_rewards": write_json(tmp_path / "r1plus.json", [1.0, 0.0, 0.0, 1.0]),
        "first_rewards": write_json(tmp_path / "r0.json", [0.0, 1.0]),
        "attempts": write_records(tmp_path / "attempts.json", attempts),
        "feedback": write_records(tmp_path / "feedback.json", feedback),
    }
    return cfg.model_dump(mode="json"), files
