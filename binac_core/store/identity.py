"""Which run a stored row belongs to: the identity columns every trajectory row carries (sql/schema.sql). With them, the
per-iteration sample counts the rows' cumulative count columns are computed from (`records.sample_counts`).

Built once per run (flows/train.py for a training run, flows/evaluate.py for `binac evaluate`) and handed to the
store tasks as it is: a frozen dataclass of JSON values (a kind is a string), which Prefect passes and hashes as it does the stages'
`AdapterRef`s (the store tasks are not cached anyway: tasks/store.py)."""

from __future__ import annotations

from dataclasses import dataclass

from binac_core.rl.kinds import FeedbackSource


@dataclass(frozen=True, kw_only=True)
class RunIdentity:
    run_id: str
    """The MLflow run id (`binac_core.store.tracking`); also the folder of the run's shards."""
    method: str
    """The method trained (binac_core/rl/methods.py), or `eval` for a `binac evaluate` run."""
    feedback: FeedbackSource | None = None
    """Where the method's second-turn feedback comes from (`MethodSpec.feedback`): a fixed text carries no verdict
    to read from the training rows. None: no second turn, or not a training run."""
    preset: str
    """The config's name (`Config.name`: the preset's, e.g. `micro`)."""
    seed: int
    """The run seed."""
    benchmark: str
    """The task's benchmark (`task.benchmark`), whose grader, verdict syntax and feedback analysis the rows use."""
    parent_run_id: str | None = None
    """The comparison's MLflow run, for a run `binac compare` started; None otherwise."""
    actor_samples_per_iteration: int | None = None
    """Actor training samples per iteration (`MethodSpec.actor_train_samples_per_iteration`); None for a run that
    does not train (`binac evaluate`), whose count columns stay NULL."""
    generated_samples_per_iteration: int | None = None
    """Sequences sampled per iteration (`MethodSpec.generated_samples_per_iteration`); None as above."""
    alternation: tuple[int, int] | None = None
    """The method's `train.alternation` (`MethodSpec.alternation`): its critic iterations add no actor training
    samples (`schedule.actor_iterations_through`); None: every iteration adds them."""
    variant: str | None = None
    """The run's variant label among runs of the same method (`train`'s `label`: a study arm's, e.g. `chosen`);
    None: none."""

    def columns(self) -> dict:
        """The identity columns of a stored row: run_id, method, preset, seed, benchmark, parent_run_id, variant."""
        return {
            "run_id": self.run_id,
            "method": self.method,
            "preset": self.preset,
            "seed": self.seed,
            "benchmark": self.benchmark,
            "parent_run_id": self.parent_run_id,
            "variant": self.variant,
        }
