"""The pipeline's held-out evaluation stage: the config's evaluation sampling settings, `evaluate_protocols`, and its
results written to one file per step and feedback source. Methods share their step-0 evaluation folder."""

from __future__ import annotations

from pathlib import Path

from binac_core.foundation.config import Config
from binac_core.foundation.files import StageFile, write_json
from binac_core.model.generation import AdapterRef, GenerationBackend
from binac_core.rl.evaluation import evaluate_protocols
from binac_core.rl.kinds import EvalProtocol, FeedbackSource


def evaluate_to_file(
    backend: GenerationBackend,
    cfg: Config,
    problems: list[dict],
    *,
    actor: AdapterRef | None,
    critic: AdapterRef | None,
    seed: int,
    step: int,
    out_dir: str | Path,
    protocols: tuple[EvalProtocol, ...],
    source: FeedbackSource,
) -> StageFile:
    """`evaluate_protocols` with `cfg`'s evaluation settings (eval_samples at eval_temperature, gated_k); returns
    `eval-step<step>-<source>.json` in `out_dir` (an `Evaluation` in JSON; <source>: the `FeedbackSource`'s
    identifier)."""
    g = cfg.generation
    gen = {
        "temperature": g.eval_temperature,
        "top_p": g.top_p,
        "max_new_tokens": g.max_new_tokens,
        "feedback_max_new_tokens": g.feedback_max_new_tokens,
    }
    res = evaluate_protocols(
        backend,
        cfg.task.benchmark,
        problems,
        actor=actor,
        critic=critic,
        samples=g.eval_samples,
        gen=gen,
        seed=seed,
        step=step,
        protocols=tuple(protocols),
        gated_k=cfg.train.gated_k,
        source=source,
        verdict=cfg.critic.verdict,
    )
    return write_json(Path(out_dir) / f"eval-step{step:05d}-{source.value}.json", res.to_json())
