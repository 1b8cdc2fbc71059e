"""What the stages hand each other: the records of an episode's turns, the scored batch they make, and the references to
stage outputs on disk. No torch, no Prefect: plans and the tasks' cache keys use them.

x → y0 ~ actor(x) → z ~ critic(x, y0) → y1 ~ actor(x, y0, z): an `Attempt` (y0), a `Feedback` (z, several per
attempt), a `Refinement` (y1, one per feedback), identified by (problem_id, sample_idx[, feedback_idx]).
A stage writes its records to a JSON file (a list of objects with the fields below as keys) and hands the next
stage a `StageFile` (path + content digest); a generation stage's `GeneratedFile` also says what generating them
cost, a scoring stage's `RewardsFile` also names the execution results of code answers.
Reward lists keep one name across the code: `first_rewards` (r0 = R(x, y0), per attempt) and `refined_rewards`
(r1 = R(x, y1), per refinement); in JSON a `ScoredBatch` keeps its historical keys `r0` and `r1`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TypeVar

from binac_core.foundation.files import StageFile, read_json, write_json
from binac_core.foundation.kind import Kind


class _Record:
    """A frozen dataclass written to JSON as an object with its field names as keys."""

    def to_json(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, d: dict):
        return cls(**d)


@dataclass(frozen=True)
class Attempt(_Record):
    """The actor's first answer y0 to a problem: its prompt (the question as shown), the answer and its tokens."""

    problem_id: str
    sample_idx: int
    prompt_text: str
    prompt_ids: list[int]
    text: str
    token_ids: list[int]
    logprobs: list[float]


@dataclass(frozen=True)
class Feedback(_Record):
    """Feedback z on attempt (problem_id, sample_idx), the `feedback_idx`-th of its group; a fixed text (the
    self-correction instruction) or the oracle's carries no tokens (nothing trains on it)."""

    problem_id: str
    sample_idx: int
    feedback_idx: int
    text: str
    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]


@dataclass(frozen=True)
class Refinement(_Record):
    """The actor's second answer y1, written with feedback (problem_id, sample_idx, feedback_idx) in context."""

    problem_id: str
    sample_idx: int
    feedback_idx: int
    prompt_ids: list[int]
    text: str
    token_ids: list[int]
    logprobs: list[float]


Turn = Attempt | Feedback | Refinement
T = TypeVar("T", Attempt, Feedback, Refinement)


@dataclass(frozen=True)
class Scores:
    """Verifier rewards of a list of answers and, on a benchmark whose critic may see it (code), each answer's
    execution result as the critic is shown it (None elsewhere)."""

    rewards: list[float]
    execution_results: list[str | None] | None = None


@dataclass(frozen=True)
class ScoredBatch:
    """Attempts with their first rewards and, where feedback was given, the feedback, one refinement per feedback
    and the refined rewards (lists aligned with `feedback`). One iteration's training batch, or one evaluation
    protocol's round."""

    attempts: list[Attempt]
    first_rewards: list[float]
    feedback: list[Feedback] | None = None
    refined: list[Refinement] | None = None
    refined_rewards: list[float] | None = None

    def to_json(self) -> dict:
        out = {"attempts": [a.to_json() for a in self.attempts], "r0": self.first_rewards}
        if self.feedback is not None:
            out.update(
                {
                    "feedback": [f.to_json() for f in self.feedback],
                    "refined": [y.to_json() for y in self.refined],
                    "r1": self.refined_rewards,
                }
            )
        return out

    @classmethod
    def from_json(cls, d: dict) -> ScoredBatch:
        if "feedback" not in d:
            return cls([Attempt.from_json(a) for a in d["attempts"]], d["r0"])
        return cls(
            [Attempt.from_json(a) for a in d["attempts"]],
            d["r0"],
            [Feedback.from_json(f) for f in d["feedback"]],
            [Refinement.from_json(y) for y in d["refined"]],
            d["r1"],
        )


class AdapterRole(Kind):
    """The policy's two LoRA adapters (binac_core/model/policy.py). The value is the adapter's name in the model,
    the folder its checkpoints are written to (`<out>/actor`, `<out>/critic`) and the key of a run's adapters."""

    ACTOR = "actor"
    """Answers and refines: the lower level."""
    CRITIC = "critic"
    """Writes the feedback on an attempt: the upper level."""


@dataclass(frozen=True)
class AdapterRef:
    """A LoRA adapter checkpoint: its role, which is its name in the model, folder, and content digest; `key`: its
    folder's store-relative key where it was put in the object store (`binac_core.foundation.stage_objects`, only
    with `BINAC_STORE`), else None."""

    name: AdapterRole
    path: str
    digest: str
    key: str | None = field(default=None, kw_only=True)


@dataclass(frozen=True)
class GeneratedFile(StageFile):
    """A generation stage's records on disk, with what generating them cost: completion tokens and seconds (the
    numbers of perf/gen_tokens_per_s)."""

    tokens: int = 0
    seconds: float = 0.0


@dataclass(frozen=True)
class RewardsFile(StageFile):
    """A scoring stage's rewards on disk (a list of floats) and, on a code benchmark, the file of the answers'
    execution results (`Scores.execution_results`), which the critic is shown."""

    execution_results: StageFile | None = None


def write_records(path: str | Path, records: list[Turn]) -> StageFile:
    return write_json(path, [r.to_json() for r in records])


def write_generated(path: str | Path, records: list[Turn], t0: float) -> GeneratedFile:
    """`write_records`, with the records' completion tokens and the seconds since `t0` (`time.time()`)."""
    file = write_records(path, records)
    return GeneratedFile(file.path, file.digest, sum(len(r.token_ids) for r in records), time.time() - t0, key=file.key)


def read_records(kind: type[T], file: StageFile) -> list[T]:
    return [kind.from_json(d) for d in read_json(file)]


def read_answers(file: StageFile) -> list[Attempt] | list[Refinement]:
    """A file of answers to grade: attempts, or refinements (which carry a `feedback_idx`)."""
    rows = read_json(file)
    kind = Refinement if rows and "feedback_idx" in rows[0] else Attempt
    return [kind.from_json(d) for d in rows]


def read_optional_records(kind: type[T], file: StageFile | None) -> list[T] | None:
    return None if file is None else read_records(kind, file)


def write_scores(folder: str | Path, name: str, scores: Scores) -> RewardsFile:
    """`<name>.rewards.json` in `folder` and, where there are execution results, `<name>.errors.json`."""
    rewards = write_json(Path(folder) / f"{name}.rewards.json", scores.rewards)
    results = None
    if scores.execution_results is not None:
        results = write_json(Path(folder) / f"{name}.errors.json", scores.execution_results)
    return RewardsFile(rewards.path, rewards.digest, results, key=rewards.key)


def read_execution_results(file: RewardsFile | None) -> list[str | None] | None:
    """The execution results a rewards file names, or None (no file, or a benchmark without them)."""
    return None if file is None or file.execution_results is None else read_json(file.execution_results)


def read_scored_batch(
    attempts: StageFile,
    first_rewards: StageFile,
    feedback: StageFile | None = None,
    refined: StageFile | None = None,
    refined_rewards: StageFile | None = None,
) -> ScoredBatch:
    """A `ScoredBatch` from the files of its stages (feedback, refined and refined_rewards all, or none)."""
    return ScoredBatch(
        read_records(Attempt, attempts),
        read_json(first_rewards),
        read_optional_records(Feedback, feedback),
        read_optional_records(Refinement, refined),
        None if refined_rewards is None else read_json(refined_rewards),
    )
