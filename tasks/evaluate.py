"""Stage 7: held-out evaluation under the named protocols, with the feedback source the method was trained with. The
protocols: single, feedback, gated@K, and for code benchmarks the execution-assisted feedback_exec and gated_exec."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from binac_core.foundation.files import StageFile, read_json
from binac_core.foundation.workspace import workspace
from binac_core.model.stage_io import AdapterRef
from binac_core.rl.eval_stage import evaluate_to_file
from binac_core.rl.evaluation import read_evaluation
from binac_core.rl.kinds import EvalProtocol, FeedbackSource
from binac_core.store import step_records
from binac_core.store.identity import RunIdentity
from tasks._common import CACHED, config, loaded


@task(name="evaluate", **CACHED)
def evaluate(
    cfg_d: dict,
    base: StageFile,
    problems: StageFile,
    actor: AdapterRef | None,
    critic: AdapterRef | None,
    seed: int,
    step: int,
    out_dir: str,
    protocols: tuple[EvalProtocol, ...] = (EvalProtocol.SINGLE, EvalProtocol.FEEDBACK, EvalProtocol.GATED),
    source: str = FeedbackSource.CRITIC_BASE.value,
) -> StageFile:
    """`source`: where the feedback comes from (a `FeedbackSource` identifier, or a label `FeedbackSource.parse`
    reads; a written source replaces the critic). It is an input of the cache key, and so is the protocol list
    (the `_exec` variants). Returns the `Evaluation`'s file."""
    _, backend = loaded(cfg_d, base, seed)
    return evaluate_to_file(
        backend,
        config(cfg_d),
        read_json(problems),
        actor=actor,
        critic=critic,
        seed=seed,
        step=step,
        out_dir=out_dir,
        protocols=protocols,
        source=FeedbackSource.parse(source),
    )


@task(name="store-eval-exec", cache_policy=NO_CACHE)
def store_eval_exec(run: RunIdentity, step: int, result: StageFile) -> int:
    """The execution-assisted protocols' rows (`binac_core.store.step_records.store_eval_exec`); returns their number."""
    return step_records.store_eval_exec(workspace(), run, step, read_evaluation(result))
