"""The critic's fixed attempt bank (the `bank` protocol of binac_core/rl/evaluation.py): the base actor's attempts at
held-out problems, sampled once per base and stored. Every evaluation scores a critic on it.

Building: per split (`val` for choices, `eval` for results; the synthetic task's question splits, so no problem
is in both and none is a training problem), the base actor (no adapter) answers fresh problems at the run's
difficulty, one attempt per problem (attempts independent, so binomial intervals hold), at the evaluation
temperature, in batches of `bank.batch_problems`, until the split holds `bank.right` right and `bank.wrong` wrong
attempts (graded by the verifier); the first ones of each kind are kept, so the sizes are exact. A split not full
after `bank.max_attempts` attempts refuses in one line. The problems come from a random stream of their own
(`synthetic.bank_rows`) and leave out the run's held-out `eval` and `val` rows.

Keying: a bank is named by the sha256 of what determines it (`bank_key`): the base's weights hash, the task
settings but the training split's size, the bank settings but `enabled`, and the actor's evaluation sampling
settings. It is written atomically under `$BINAC_HOME/models/banks/` (beside the base models: `BINAC_MODEL_CACHE`
moves it too), its file named by the base's hash and its key (`bank_name`), and reused wherever it exists; a
study's archive keeps the banks of its base (binac_core/store/archive.py). The frozen base critic's feedback on
it is a file of its own, keyed also by the critic's sampling settings (`frozen_key`): computed once per bank, not
per evaluation.

Scoring (`score_bank`): one feedback per bank attempt, sampled at the evaluation temperature with one seed per
(bank, split) for every critic, the frozen one included (common random numbers: the trained and the frozen critic
draw the same stream, so at step 0, where the trained adapter is the identity, they write the same feedback).
No refinement is sampled: the bank's measures read the feedback only (binac_core/reports/bank_measures.py).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass

from binac_core import benchmarks
from binac_core.benchmarks import synthetic
from binac_core.errors import BinacError
from binac_core.foundation.config import Config
from binac_core.model.generation import AdapterRef, GenerationBackend, SamplingParams
from binac_core.model.stage_io import Attempt, ScoredBatch
from binac_core.rl.episodes import generate_attempts, sample_feedback, score, stage_seed
from binac_core.rl.kinds import FeedbackSource

SPLITS = ("val", "eval")
"""The bank's splits: `val` for choices, `eval` for results (the synthetic task's question splits)."""
FORMAT = 1
"""The bank file's format, part of its key."""


def banked(cfg: Config, trains_critic: bool) -> bool:
    """Whether a run scores its critic on the bank: `bank.enabled`, for a method that trains its critic."""
    return cfg.bank.enabled and trains_critic


def bank_key(cfg: Config, weights: str) -> str:
    """The bank's name: a sha256 (16 hex digits) of the base's weights hash, the task settings but `n_train` and
    `eval_split` (the bank leaves out both held-out splits' rows), the bank settings but `enabled`, and the
    actor's evaluation sampling settings."""
    g = cfg.generation
    blob = {
        "format": FORMAT,
        "weights": weights,
        "task": cfg.task.model_dump(mode="json", exclude={"n_train", "eval_split"}),
        "bank": cfg.bank.model_dump(mode="json", exclude={"enabled"}),
        "actor": {"temperature": g.eval_temperature, "top_p": g.top_p, "max_new_tokens": g.max_new_tokens},
    }
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:16]


def frozen_key(cfg: Config, key: str) -> str:
    """The name of the frozen base critic's feedback on bank `key`: a sha256 (16 hex digits) of the bank's key
    and the critic's sampling settings (temperature, top_p, feedback length, `critic.verdict`)."""
    g = cfg.generation
    blob = {
        "bank": key,
        "critic": {
            "temperature": g.eval_temperature,
            "top_p": g.top_p,
            "max_new_tokens": g.feedback_max_new_tokens,
            "verdict": cfg.critic.verdict,
        },
    }
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class BankSplit:
    """One split of the bank: its attempts (one per problem) with their first rewards, the problems' rows, and
    how many attempts were sampled to fill it."""

    scored: ScoredBatch
    problems: list[dict]
    sampled: int

    def to_json(self) -> dict:
        return {"scored": self.scored.to_json(), "problems": self.problems, "sampled": self.sampled}

    @classmethod
    def from_json(cls, d: dict) -> BankSplit:
        return cls(ScoredBatch.from_json(d["scored"]), d["problems"], d["sampled"])


@dataclass(frozen=True)
class Bank:
    """The bank: its key, the weights hash of the base it was sampled from, and its splits (`SPLITS`)."""

    key: str
    weights: str
    splits: dict[str, BankSplit]

    @property
    def name(self) -> str:
        """Its file's name (`bank_name`)."""
        return bank_name(self.weights, self.key)

    def to_json(self) -> dict:
        splits = {s: b.to_json() for s, b in self.splits.items()}
        return {"key": self.key, "weights": self.weights, "splits": splits}

    @classmethod
    def from_json(cls, d: dict) -> Bank:
        return cls(d["key"], d["weights"], {s: BankSplit.from_json(b) for s, b in d["splits"].items()})


def bank_name(weights: str, key: str) -> str:
    """A bank's file name (without `.json`): `bank-<the base's weights hash, 12 digits>-<key>`, so the banks of a
    base are found by its hash (a study's archive copies them, binac_core/store/archive.py)."""
    return f"bank-{weights[:12]}-{key}"


def frozen_name(cfg: Config, bank: Bank) -> str:
    """The file name of the frozen base critic's feedback on `bank`: the bank's, then `-frozen-<frozen_key>`."""
    return f"{bank.name}-frozen-{frozen_key(cfg, bank.key)}"


Draw = Callable[[int, int], tuple[list[dict], list[Attempt], list[float]]]
"""draw(offset, n): the rows of problems offset..offset+n−1 of a split, one attempt at each, and its reward."""


def fill_split(draw: Draw, right: int, wrong: int, batch: int, max_attempts: int, what: str = "bank") -> BankSplit:
    """Draw batches of `batch` problems (one attempt each) until `right` right (reward > 0) and `wrong` wrong
    attempts are kept, keeping the first of each kind; refuses in one line when `max_attempts` attempts do not
    fill it (`what` names the split)."""
    rows: list[dict] = []
    attempts: list[Attempt] = []
    rewards: list[float] = []
    need = {True: right, False: wrong}
    sampled = 0
    while need[True] or need[False]:
        if sampled >= max_attempts:
            raise BinacError(
                f"{what}: {max_attempts} attempts (bank.max_attempts) left it short of {need[True]} right and "
                f"{need[False]} wrong attempts; raise bank.max_attempts or lower bank.right / bank.wrong"
            )
        n = min(batch, max_attempts - sampled)
        for row, a, r in zip(*draw(sampled, n), strict=True):
            if need[r > 0]:
                need[r > 0] -= 1
                rows.append(row)
                attempts.append(a)
                rewards.append(r)
        sampled += n
    return BankSplit(ScoredBatch(attempts, rewards), rows, sampled)


def build_bank(backend: GenerationBackend, cfg: Config, weights: str) -> Bank:
    """The bank of `cfg` on the backend's base model, whose weights hash is `weights` (module docstring)."""
    benchmark, task, b, g = cfg.task.benchmark, cfg.task, cfg.bank, cfg.generation
    held_out = frozenset(r["question"] for s in ("eval", "val") for r in benchmarks.get(benchmark).load_rows(task, s))

    def drawer(split: str) -> Draw:
        def draw(offset: int, n: int):
            rows = synthetic.bank_rows(task, split, b.seed, offset + n, held_out)[offset:]
            params = SamplingParams(
                g.max_new_tokens, g.eval_temperature, g.top_p, stage_seed("bank", b.seed, split, offset)
            )
            attempts = generate_attempts(backend, benchmark, rows, None, 1, params)
            return rows, attempts, score(benchmark, {r["id"]: r for r in rows}, attempts)

        return draw

    return Bank(
        bank_key(cfg, weights),
        weights,
        {s: fill_split(drawer(s), b.right, b.wrong, b.batch_problems, b.max_attempts, f"bank {s}") for s in SPLITS},
    )


def score_bank(
    backend: GenerationBackend,
    cfg: Config,
    bank: Bank,
    source: FeedbackSource,
    critic: AdapterRef | None,
) -> dict[str, ScoredBatch]:
    """Per split, the bank's attempts with one feedback each from `source` (`critic`'s adapter, None for the
    base model), sampled at the evaluation temperature with the split's seed (module docstring); no refinement."""
    g, out = cfg.generation, {}
    for split, part in bank.splits.items():
        params = SamplingParams(
            g.feedback_max_new_tokens, g.eval_temperature, g.top_p, stage_seed("bank", bank.key, "z", split)
        )
        by_id = {r["id"]: r for r in part.problems}
        attempts = part.scored.attempts
        fb = sample_feedback(
            backend, cfg.task.benchmark, by_id, attempts, source, critic, 1, params, verdict=cfg.critic.verdict
        )
        out[split] = ScoredBatch(attempts, part.scored.first_rewards, fb, [], [])
    return out


def scores_to_json(scores: dict[str, ScoredBatch]) -> dict:
    return {s: b.to_json() for s, b in scores.items()}


def scores_from_json(d: dict) -> dict[str, ScoredBatch]:
    return {s: ScoredBatch.from_json(b) for s, b in d.items()}
