"""The two implementations of an iteration's stages, `LibraryStages` (binac_core/rl/loop.py) and `PrefectStages`
(flows/stages.py, over the tasks of tasks/), call each stage's one function of binac_core/rl/stage_functions.py
with equal arguments: one iteration of every method runs through each, every stage function wrapped by a recorder,
and the recorded calls must be the same, argument for argument (the tasks read theirs back from the stage files
the others wrote). The tasks run as plain functions (no Prefect server), on a backend that answers every prompt
`A: 0`; the update stages are recorded and not run (no model)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from prefect import Task

import flows.stages
import tasks._common
from binac_core.benchmarks.synthetic import make_row, sample_questions
from binac_core.foundation.config import Config, load_config
from binac_core.foundation.files import write_json
from binac_core.model.generation import Generation
from binac_core.model.stage_io import AdapterRef
from binac_core.rl import stage_functions
from binac_core.rl.loop import LibraryStages, StepContext, run_iteration
from binac_core.rl.methods import METHODS, method_spec
from binac_core.rl.update import AdapterUpdate

STAGES = (
    "rollout_stage",
    "score_stage",
    "feedback_stage",
    "refine_stage",
    "actor_update_stage",
    "critic_reward_stage",
    "critic_update_stage",
)
UPDATES = ("actor_update_stage", "critic_update_stage")


class _AnswerBackend:
    def generate(self, prompts, adapter, params):
        return [Generation("A: 0", [1], [2], [0.0]) for _ in prompts]


def _recorded(monkeypatch) -> list[tuple[str, dict]]:
    """Every stage function wrapped: each call is recorded by its parameters' names (`_plain` values), then run,
    but for an update, which hands on a new reference named by its adapter's digest."""
    calls: list[tuple[str, dict]] = []
    for name in STAGES:
        real = getattr(stage_functions, name)

        def recorder(*args, _name=name, _real=real, **kwargs):
            bound = inspect.signature(_real).bind(*args, **kwargs).arguments
            calls.append((_name, {k: _plain(v) for k, v in bound.items()}))
            if _name in UPDATES:
                ref = bound.get("actor") or bound["critic"]
                return AdapterUpdate(AdapterRef(ref.name, "", ref.digest + "+"), 0.5, 0.0, 0.0, 1.0)
            return _real(*args, **kwargs)

        monkeypatch.setattr(stage_functions, name, recorder)
    return calls


def _plain(value):
    """A config as its fields, a sequence as a list (the tasks keep a split's rows as a tuple); else the value."""
    if isinstance(value, Config):
        return value.model_dump()
    return list(value) if isinstance(value, tuple) else value


def _iterate(stages, cfg: Config, method: str, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    at = StepContext(0, 1, str(folder))
    run_iteration(stages, cfg, method_spec(method), at, AdapterRef("actor", "", "θ"), AdapterRef("critic", "", "φ"))


@pytest.mark.parametrize("method", METHODS)
def test_both_stage_implementations_call_each_stage_function_with_equal_arguments(monkeypatch, tmp_path, method):
    cfg = load_config("micro")
    rows = [make_row(q) for q in sample_questions(0, 2, "train", 2 * cfg.train.batch_problems)]
    policy, backend = object(), _AnswerBackend()
    monkeypatch.setattr(tasks._common, "policy_and_backend", lambda path, cfg, seed: (policy, backend))
    for name, obj in vars(flows.stages).items():
        if isinstance(obj, Task):  # the task's own function: what it adds is its files, not its call
            monkeypatch.setattr(flows.stages, name, obj.fn)
    calls = _recorded(monkeypatch)
    folder = tmp_path / "step-00001"

    _iterate(LibraryStages(policy, backend, cfg, rows), cfg, method, folder)
    library = list(calls)
    calls.clear()
    split = write_json(tmp_path / "train.json", rows)
    prefect = flows.stages.PrefectStages(cfg, cfg.model_dump(mode="json"), write_json(tmp_path / "base", {}), split)
    _iterate(prefect, cfg, method, folder)

    assert [name for name, _ in calls] == [name for name, _ in library]
    for (name, args), (_, expected) in zip(calls, library, strict=True):
        assert args == expected, name
    if method == "binac":
        assert {name for name, _ in library} == set(STAGES)
