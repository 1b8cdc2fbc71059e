"""The bookkeeping of a training run's iterations, kept out of flows/train.py's loop body. It keeps the cumulative
sample counts, the per-iteration metrics the updates do not compute (grader counts, counts, timings), the ETA and the
progress line. It decides nothing the stages compute."""

from __future__ import annotations

import time

from binac_core.grading.counters import GraderCounts
from binac_core.model.stage_io import GeneratedFile
from binac_core.rl.schedule import actor_iterations_through
from flows.reporting import progress


class IterationLog:
    """Counts and clocks of one run of `iterations` iterations; `begin` at the start of each iteration, then
    `metrics` once its updates are done, then `progress` at its end."""

    def __init__(
        self,
        label: str,
        iterations: int,
        per_iteration: int,
        gen_per_iteration: int,
        alternation: tuple[int, int] | None = None,
    ):
        """`label`: the progress line's prefix (method, preset, seed). `per_iteration`, `gen_per_iteration`: the
        method's actor training samples and generated samples per iteration (binac_core/rl/methods.py), the
        former added at its actor iterations only under `alternation` (`MethodSpec.alternation`)."""
        self.label, self.iterations = label, iterations
        self.per_iteration, self.gen_per_iteration = per_iteration, gen_per_iteration
        self.alternation, self.step = alternation, 0
        self.samples = self.generated = 0
        """Cumulative actor training samples and generated samples, after the iteration's `metrics`."""
        self.t_start = time.time()
        self.t0, self.graded = self.t_start, GraderCounts()

    def begin(self) -> None:
        """The iteration's clock and grader counts start here."""
        self.t0, self.graded = time.time(), GraderCounts()

    def metrics(self, update_metrics: dict, generations: list[GeneratedFile | None]) -> dict:
        """The iteration's metrics beside its stored rows' (tasks/store.py `extra`): `update_metrics` (the updates'
        losses), the iteration's grader counts (`grader/*`), the cumulative counts (`train/actor_samples`,
        `train/generated_samples`, counted here), the iteration's seconds so far (`perf/step_s`) and the tokens per
        second of its `generations` (None: a stage the method lacks)."""
        self.step += 1
        self.samples = self.per_iteration * actor_iterations_through(self.alternation, self.step)
        self.generated += self.gen_per_iteration
        gens = [g for g in generations if g is not None]
        gen_s = sum(g.seconds for g in gens)
        out = dict(update_metrics)
        out.update({f"grader/{k}": v for k, v in self.graded.since().items()})  # this iteration's grading
        out.update(
            {
                "train/actor_samples": self.samples,
                "train/generated_samples": self.generated,
                "perf/step_s": time.time() - self.t0,
                "perf/gen_tokens_per_s": sum(g.tokens for g in gens) / max(gen_s, 1e-9),
            }
        )
        return out

    def progress(self, step: int, metrics: dict, evals: dict[int, dict]) -> None:
        """The iteration's progress line: its first reward, its held-out accuracy if it evaluated, the counts and
        the ETA (the mean iteration time so far times the iterations left)."""
        eta = (time.time() - self.t_start) / step * (self.iterations - step)
        acc = f" acc_single {evals[step]['eval/acc_single']:.3f}" if step in evals else ""
        progress(
            f"[{self.label}] iteration {step}/{self.iterations}: reward_first "
            f"{metrics['train/reward_first']:.3f}{acc}, actor training samples {self.samples}, generated samples "
            f"{self.generated}, ETA {eta:.0f}s"
        )
