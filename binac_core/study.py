"""A study file (`studies/*.yaml`): the pre-registered grid of regimes × methods × seeds, read and checked before
any compute, and expanded into the training runs it asks for.

    name: sparse-feedback
    preset: study                    # preset name or YAML file: the base model and RL settings
    design: sparse-feedback.design.md  # the design text, verbatim at the top of the report (relative to the file)
    deployment: train/study          # the Prefect deployment each run is submitted to
    iterations: 40                   # training iterations of every run (equal actor updates)
    eval_every: 8                    # held-out evaluation every k iterations (and at step 0 and the last)
    equal_samples_method: grpo       # also evaluate where a run's actor samples first reach this method's total
    methods: [grpo, fixed_critic, ...]
    seeds: [0, 1, 2, 3, 4]
    regimes:
      moderate: {difficulty: 4}
      sparse: {rule: {all_wrong_frac_at_least: 0.5, search: [2, 8], otherwise: hardest}}
    rule_measure: {group_size: 8, seed: 0}   # how the base model is measured for the rule and the bounds
    overrides: {}                    # config fields set for every run, {"section.field": value}

A regime is a task difficulty, fixed or chosen by a rule on the base model alone (`binac_core.regimes`): the
smallest difficulty in `search` whose share of all-wrong groups is at least the threshold; `otherwise: hardest`
takes the hardest difficulty searched when none is (the report lists that as a deviation), `otherwise: fail`
stops the study. Nothing here imports Prefect or torch.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from binac_core import benchmarks
from binac_core.config import Config, load_config
from binac_core.errors import BinacError
from binac_core.files import read_yaml_mapping
from binac_core.methods import method_spec

KEYS = {"name", "preset", "design", "deployment", "iterations", "eval_every", "equal_samples_method", "methods",
        "seeds", "regimes", "rule_measure", "overrides"}


@dataclass(frozen=True)
class Rule:
    threshold: float
    """The least share of all-wrong groups (G attempts of the base model, none right) the difficulty must have."""
    search: tuple[int, int]
    """The difficulties searched, inclusive (they should lie in the base's pretraining range)."""
    otherwise: str
    """`hardest` (take the hardest searched difficulty, a listed deviation) or `fail`."""


@dataclass(frozen=True)
class Regime:
    name: str
    difficulty: int | None
    """Fixed difficulty, or None when `rule` chooses it."""
    rule: Rule | None


@dataclass(frozen=True)
class Study:
    name: str
    path: Path
    preset: str
    design: str
    """The design text (verbatim)."""
    deployment: str
    iterations: int
    eval_every: int
    equal_samples_method: str
    methods: tuple[str, ...]
    seeds: tuple[int, ...]
    regimes: tuple[Regime, ...]
    group_size: int
    """G of the rule's measurement."""
    measure_seed: int
    overrides: dict

    def key(self) -> str:
        """Content hash of everything that determines the runs (not the file's path or the deployment's name)."""
        blob = {k: v for k, v in self.__dict__.items() if k not in ("path", "deployment", "design")}
        return hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()[:12]

    def config(self, difficulty: int | None = None) -> Config:
        extra = {} if difficulty is None else {"task.difficulty": difficulty}
        return load_config(self.preset, {**self.overrides, **extra})


@dataclass(frozen=True)
class RunSpec:
    """One training run of the grid, as submitted to the `train` deployment."""

    regime: str
    difficulty: int
    method: str
    seed: int
    overrides: dict

    @property
    def name(self) -> str:
        return f"{self.regime}-{self.method}-s{self.seed}"


def load_study(path: str | Path) -> Study:
    """Read and check a study file; one line naming the bad value otherwise."""
    path = Path(path)
    if not path.is_file():
        raise BinacError(f"study file not found: {path}")
    raw = read_yaml_mapping(path, f"study file {path}")
    unknown = set(raw) - KEYS
    if unknown:
        raise BinacError(f"study file {path}: unknown key {sorted(unknown)[0]!r} (known: {', '.join(sorted(KEYS))})")
    missing = {"name", "preset", "methods", "seeds", "regimes", "iterations"} - set(raw)
    if missing:
        raise BinacError(f"study file {path}: missing key {sorted(missing)[0]!r}")
    methods = tuple(raw["methods"])
    for m in methods:
        method_spec(m)
    if len(set(methods)) != len(methods):
        raise BinacError(f"study file {path}: a method is listed twice")
    seeds = tuple(raw["seeds"])
    if not seeds or any(not isinstance(s, int) or s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise BinacError(f"study file {path}: seeds must be distinct non-negative integers (got {list(seeds)})")
    for field in ("iterations", "eval_every"):
        if not isinstance(raw.get(field, 1), int) or raw.get(field, 1) < 1:
            raise BinacError(f"study file {path}: {field} must be a positive integer (got {raw[field]!r})")
    equal = raw.get("equal_samples_method", "grpo")
    method_spec(equal)
    design = ""
    if raw.get("design"):
        design_path = path.parent / raw["design"]
        if not design_path.is_file():
            raise BinacError(f"study file {path}: design file not found: {design_path}")
        design = design_path.read_text()
    measure = raw.get("rule_measure") or {}
    study = Study(
        name=str(raw["name"]), path=path, preset=str(raw["preset"]), design=design,
        deployment=str(raw.get("deployment", "train/study")), iterations=raw["iterations"],
        eval_every=raw.get("eval_every", 8), equal_samples_method=equal, methods=methods, seeds=seeds,
        regimes=tuple(_regime(path, n, r) for n, r in (raw["regimes"] or {}).items()),
        group_size=int(measure.get("group_size", 8)), measure_seed=int(measure.get("seed", 0)),
        overrides=dict(raw.get("overrides") or {}),
    )
    if not study.regimes:
        raise BinacError(f"study file {path}: no regimes")
    for regime in study.regimes:  # every difficulty the study can reach must make a valid config
        for d in ([regime.difficulty] if regime.rule is None else range(regime.rule.search[0],
                                                                         regime.rule.search[1] + 1)):
            cfg = study.config(d)
            if not _measures_regimes(benchmarks.get(cfg.task.benchmark)):
                raise BinacError(f"study file {path}: regimes need a benchmark with an oracle critic and a "
                                 f"first-error analysis ({', '.join(benchmarks.names(having=_measures_regimes))}; "
                                 f"preset benchmark is {cfg.task.benchmark!r})")
    return study


def _measures_regimes(bench) -> bool:
    """Whether the regimes' base measurement (`binac_core.regimes`: the oracle's bound, the critic measures) can
    run on `bench`."""
    return bench.oracle_feedback is not None and bench.feedback_analysis is not None


def _regime(path: Path, name: str, raw: dict) -> Regime:
    if not isinstance(raw, dict) or ("difficulty" in raw) == ("rule" in raw):
        raise BinacError(f"study file {path}: regime {name!r} needs exactly one of difficulty, rule")
    if "difficulty" in raw:
        return Regime(name, int(raw["difficulty"]), None)
    rule = raw["rule"]
    try:
        lo, hi = (int(x) for x in rule["search"])
        threshold, otherwise = float(rule["all_wrong_frac_at_least"]), rule.get("otherwise", "fail")
    except (KeyError, TypeError, ValueError):
        raise BinacError(f"study file {path}: regime {name!r}: rule needs all_wrong_frac_at_least and "
                         "search: [lo, hi]") from None
    if not 1 <= lo <= hi or otherwise not in ("hardest", "fail") or not 0 < threshold <= 1:
        raise BinacError(f"study file {path}: regime {name!r}: bad rule {rule!r}")
    return Regime(name, None, Rule(threshold, (lo, hi), otherwise))


def grid(study: Study, difficulties: dict[str, int]) -> list[RunSpec]:
    """Every run, seed-major (all methods and regimes of seed 0 first), so a grid stopped early is balanced."""
    cfg = study.config()
    equal = method_spec(study.equal_samples_method).actor_samples_per_iteration(cfg) * study.iterations
    runs = []
    for seed in study.seeds:
        for regime in study.regimes:
            d = difficulties[regime.name]
            for method in study.methods:
                overrides = {**study.overrides, "task.difficulty": d, "train.eval_every": study.eval_every,
                             "train.eval_at_samples": equal}
                runs.append(RunSpec(regime.name, d, method, seed, overrides))
    return runs


def equal_samples_total(study: Study) -> int:
    """The actor samples of `equal_samples_method` after all iterations (the equal-samples evaluation point)."""
    return method_spec(study.equal_samples_method).actor_samples_per_iteration(study.config()) * study.iterations
