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
      moderate: {difficulty: 4}      # or {rule: {single_closest_to: 0.35, search: [2, 10]}}
      sparse: {rule: {all_wrong_frac_at_least: 0.5, search: [2, 8], otherwise: hardest}}
    rule_measure: {group_size: 8, seed: 0}   # how the base model is measured for the rule and the bounds
    overrides: {}                    # config fields set for every run, {"section.field": value}
    variants:                        # optional: a method run once per named override set (a pilot's grid)
      grpo: {lr1e-3: {train.actor_lr: 0.001}, lr5e-3: {train.actor_lr: 0.005}}
    select: {grpo: acc_single}       # optional, with variants: the held-out metric that picks a method's variant
    widen: {grpo: {lr2e-2: {train.actor_lr: 0.02}}}   # optional: variants added to a pilot after its first runs
    select_rule: auc_paired          # optional: how the report picks it (SelectRule; default last_mean)
    hypotheses: third_edition        # optional: the edition whose hypotheses the report tests (editions/*.py)
    gates: {shortcut_right_at_most: 0.05, oracle_gain_at_least: 0.05}   # optional: checks of the base model,
    # at every regime, or per regime: {all: {...}, sparse: {greedy_single_at_most: 0.1}}

A regime is a task difficulty, fixed or chosen by a rule on the base model alone (`binac_core.studies.regimes`):
`all_wrong_frac_at_least`: the smallest difficulty in `search` whose share of all-wrong groups is at least the
threshold, `otherwise: hardest` taking the hardest difficulty searched when none is (the report lists that as a
deviation) and `otherwise: fail` stopping the study; `single_closest_to`: the difficulty in `search` whose
single-turn accuracy is closest to the target (a tie: the smaller). A method listed under `variants` runs once
per variant (its overrides on top of `overrides`), the others once; the variant is part of the run's name.
`widen` adds variants to a pilot after its first runs (the design's rule for a grid whose best variant sits at an
edge): they run like the others but leave the study's key, and so its first runs, as they were.
`select` names, per method with variants, the held-out metric (one of SELECT_METRICS) by which the report
chooses its variant, by the rule `select_rule` names (`SelectRule`; binac_core/studies/study_report.py). `gates`
are checks of the base model at every chosen difficulty (`gate_failures`; a flat mapping applies at every regime, a mapping by regime name, with `all` for every regime,
applies per regime), read before any run is submitted: a study whose base fails one stops with one line naming it
(its report can still be written with `--report-only`). `hypotheses` names the study's edition, a module whose
`section` writes the report's hypotheses (binac_core/studies/editions.py says where it is found; default
`second_edition`). Nothing here imports Prefect or torch.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path

from binac_core import benchmarks
from binac_core.errors import BinacError
from binac_core.foundation.config import Config, current_keys, load_config
from binac_core.foundation.files import read_yaml_mapping
from binac_core.rl.methods import method_spec
from binac_core.runs.plans import check_sandbox
from binac_core.studies import editions
from binac_core.studies.preconditions import GATES as PRECONDITION_GATES
from binac_core.studies.preconditions import failures as precondition_failures

KEYS = {
    "name",
    "preset",
    "design",
    "deployment",
    "iterations",
    "eval_every",
    "equal_samples_method",
    "methods",
    "seeds",
    "regimes",
    "rule_measure",
    "overrides",
    "variants",
    "widen",
    "select",
    "select_rule",
    "hypotheses",
    "gates",
}
SELECT_METRICS = ("acc_single", "acc_feedback", "acc_gated_k2", "critic_margin")
"""The held-out accuracies, and `critic_margin` (binac_core/studies/critic_margin.py: the critic minus the frozen
critic on the bank), which only `select_rule: bank_margin_paired` reads and which reads nothing else."""
GATES = {
    "shortcut_right_at_most": "the upper end of the 95 % Wilson interval of the shortcut check (the share of "
    "wrong-step attempts right after approval, binac_core/studies/regimes.py) is at most this",
    "oracle_gain_at_least": "the oracle's bound minus single-turn accuracy (one second turn after the oracle's "
    "feedback) is at least this",
    **{
        name: f"{g.label}: the {g.end} end of its 95 % interval is {g.kind.replace('_', ' ')} this"
        for name, g in PRECONDITION_GATES.items()
    },
}
"""The checks a study file's `gates` can ask of the base model at a chosen difficulty: two of the bounds, and the
preconditions of binac_core/studies/preconditions.py (G1-G4)."""
RULE_KINDS = ("all_wrong_frac_at_least", "single_closest_to")


class SelectRule(str, Enum):
    """How a pilot's report chooses a method's variant by its `select` metric (binac_core/studies/study_report.py,
    `choose_variant`)."""

    LAST_MEAN = "last_mean"
    """The highest mean over seeds at each run's last evaluation; means within 0.1 point of it tie, and a tie goes
    to the variant whose override values sort smallest (the second edition's rule)."""
    AUC_PAIRED = "auc_paired"
    """The metric's area under the held-out curve (trapezoid over the evaluations every `eval_every` iterations,
    divided by the iterations: a mean accuracy); the variant with the highest mean over seeds leads, a variant
    whose paired difference from it has a 95 % t-interval containing 0 ties with it, and among the leader and its
    ties the one changing the fewest config fields from the preset's values wins, then the higher mean (the third
    edition's rule). The report also says when the leader holds the extreme value of a field the grid varies."""
    BANK_MARGIN_PAIRED = "bank_margin_paired"
    """The same choice (leader, paired ties, fewest fields changed, edges) on `critic_margin` instead of an area:
    per run, its critic's discrimination (first-error hits − false alarm) minus the frozen base critic's on the
    bank's half of the study's evaluation split, averaged over the evaluations of the run's second half
    (binac_core/studies/critic_margin.py; the fourth edition's rule)."""


@dataclass(frozen=True)
class Rule:
    kind: str
    """`all_wrong_frac_at_least` (the smallest difficulty whose share of all-wrong groups, G attempts of the base
    model none right, is at least `value`) or `single_closest_to` (the difficulty whose single-turn accuracy is
    closest to `value`)."""
    value: float
    """The rule's threshold or target (a share in (0, 1])."""
    search: tuple[int, int]
    """The difficulties searched, inclusive (they should lie in the base's pretraining range)."""
    otherwise: str
    """`all_wrong_frac_at_least` only: `hardest` (take the hardest searched difficulty, a listed deviation) or
    `fail`."""


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
    variants: dict = field(default_factory=dict)
    """method -> {variant name -> overrides}: the methods run once per variant (a pilot's grid), the widened
    ones (`widened`) included."""
    widened: frozenset = frozenset()
    """(method, variant name) of the variants the file adds under `widen`: a pilot's grid widened at an edge after
    its first runs. They are runs of the same study: they do not enter its key, so the first runs keep theirs."""
    select: dict = field(default_factory=dict)
    """method (one with variants) -> the held-out metric (SELECT_METRICS) that chooses its variant in the report."""
    gates: dict = field(default_factory=dict)
    """gate name (GATES) -> its threshold: checks of the base model before any run is submitted."""
    select_rule: SelectRule = SelectRule.LAST_MEAN
    """How the report chooses a variant by its `select` metric (`SelectRule`)."""
    hypotheses: str = editions.DEFAULT
    """The edition whose hypotheses the report tests: a module's name (binac_core/studies/editions.py)."""

    def key(self) -> str:
        """Content hash of everything that determines the runs (not the file's path or the deployment's name);
        `variants`, `select` and `gates` count only when set, and `select_rule` and `hypotheses` only when not the
        default, so a study that does not use them hashes as if the study format had no such keys; variants
        added under `widen` never count (`widened`)."""
        first = {
            m: {v: ov for v, ov in named.items() if (m, v) not in self.widened} for m, named in self.variants.items()
        }
        blob = {
            k: v
            for k, v in {**self.__dict__, "variants": first}.items()
            if k not in ("path", "deployment", "design", "widened")
            and not (k in ("variants", "select", "gates") and not v)
            and not (k == "select_rule" and v == SelectRule.LAST_MEAN)
            and not (k == "hypotheses" and v == editions.DEFAULT)
        }
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
    variant: str = ""
    """The variant's name (`Study.variants`), empty for a method run once."""

    @property
    def name(self) -> str:
        return f"{self.regime}-{self.method}{'-' + self.variant if self.variant else ''}-s{self.seed}"


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
    for name in ("iterations", "eval_every"):
        if not isinstance(raw.get(name, 1), int) or raw.get(name, 1) < 1:
            raise BinacError(f"study file {path}: {name} must be a positive integer (got {raw[name]!r})")
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
        name=str(raw["name"]),
        path=path,
        preset=str(raw["preset"]),
        design=design,
        deployment=str(raw.get("deployment", "train/study")),
        iterations=raw["iterations"],
        eval_every=raw.get("eval_every", 8),
        equal_samples_method=equal,
        methods=methods,
        seeds=seeds,
        regimes=tuple(_regime(path, n, r) for n, r in (raw["regimes"] or {}).items()),
        group_size=int(measure.get("group_size", 8)),
        measure_seed=int(measure.get("seed", 0)),
        overrides=current_keys(dict(raw.get("overrides") or {}), f"study file {path}: overrides: "),
        variants=_variants(path, raw.get("variants"), methods),  # both with old field names read as the new ones
    )
    widen = _variants(path, raw.get("widen"), methods, "widen")
    for method, named in widen.items():
        if method not in study.variants:
            raise BinacError(f"study file {path}: widen names {method!r}, which has no variants")
        clash = sorted(set(named) & set(study.variants[method]))
        if clash:
            raise BinacError(f"study file {path}: widen of {method!r}: variant {clash[0]!r} is already in variants")
    study = replace(
        study,
        variants={m: {**named, **widen.get(m, {})} for m, named in study.variants.items()},
        widened=frozenset((m, v) for m, named in widen.items() for v in named),
    )
    study = replace(
        study,
        select=_select(path, raw.get("select"), study.variants),
        select_rule=_enum(path, "select_rule", SelectRule, raw.get("select_rule")),
        hypotheses=_edition(path, raw.get("hypotheses")),
        gates=_gates(path, raw.get("gates"), tuple(r.name for r in study.regimes)),
    )
    _check_margin_rule(path, study)
    if not study.regimes:
        raise BinacError(f"study file {path}: no regimes")
    for named in study.variants.values():  # every variant must make a valid config
        for overrides in named.values():
            load_config(study.preset, {**study.overrides, **overrides})
    for regime in study.regimes:  # every difficulty the study can reach must make a valid config
        for d in (
            [regime.difficulty] if regime.rule is None else range(regime.rule.search[0], regime.rule.search[1] + 1)
        ):
            cfg = study.config(d)
            check_sandbox(benchmarks.get(cfg.task.benchmark), cfg)  # code benchmarks: no bwrap, no rlimits: one line
            if not _measures_regimes(benchmarks.get(cfg.task.benchmark)):
                raise BinacError(
                    f"study file {path}: regimes need a benchmark with an oracle critic and a "
                    f"first-error analysis ({', '.join(benchmarks.names(having=_measures_regimes))}; "
                    f"preset benchmark is {cfg.task.benchmark!r})"
                )
    return study


def _measures_regimes(bench) -> bool:
    """Whether the regimes' base measurement (`binac_core.studies.regimes`: the oracle's bound, the critic measures) can
    run on `bench`."""
    return bench.oracle_feedback is not None and bench.feedback_analysis is not None


def _variants(path: Path, raw, methods: tuple[str, ...], key: str = "variants") -> dict:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise BinacError(f"study file {path}: {key} must map a method to named override sets")
    out = {}
    for method, named in raw.items():
        if method not in methods:
            raise BinacError(f"study file {path}: {key} of {method!r}, which is not in methods")
        if not isinstance(named, dict) or not named or not all(isinstance(o, dict) for o in named.values()):
            raise BinacError(f"study file {path}: {key} of {method!r} must be {{name: {{field: value}}}}")
        out[method] = {
            str(k): current_keys(dict(v), f"study file {path}: variant {k} of {method}: ") for k, v in named.items()
        }
    return out


def _select(path: Path, raw, variants: dict) -> dict:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise BinacError(f"study file {path}: select must map a method to a metric ({', '.join(SELECT_METRICS)})")
    for method, metric in raw.items():
        if method not in variants:
            raise BinacError(f"study file {path}: select names {method!r}, which has no variants")
        if metric not in SELECT_METRICS:
            raise BinacError(
                f"study file {path}: select of {method!r}: unknown metric {metric!r} "
                f"(known: {', '.join(SELECT_METRICS)})"
            )
    return {str(m): str(v) for m, v in raw.items()}


def _check_margin_rule(path: Path, study: Study) -> None:
    """`critic_margin` and `select_rule: bank_margin_paired` go together, on a study that scores the bank."""
    margin = {m for m, metric in study.select.items() if metric == "critic_margin"}
    if study.select_rule == SelectRule.BANK_MARGIN_PAIRED and margin != set(study.select):
        other = sorted(set(study.select) - margin)[0]
        raise BinacError(
            f"study file {path}: select_rule bank_margin_paired reads critic_margin only ({other!r} selects by "
            f"{study.select[other]!r})"
        )
    if margin and study.select_rule != SelectRule.BANK_MARGIN_PAIRED:
        raise BinacError(f"study file {path}: select critic_margin needs select_rule: bank_margin_paired")
    if margin and not study.config().bank.enabled:
        raise BinacError(f"study file {path}: select critic_margin needs the attempt bank (bank.enabled: true)")


def _enum(path: Path, key: str, kind: type[Enum], raw) -> Enum:
    """`raw` as a member of `kind`; its first member when absent; one line naming the known values otherwise."""
    if raw is None:
        return next(iter(kind))
    try:
        return kind(raw)
    except ValueError:
        raise BinacError(
            f"study file {path}: {key}: unknown value {raw!r} (known: {', '.join(m.value for m in kind)})"
        ) from None


def _edition(path: Path, raw) -> str:
    """The edition's name, its module loaded (`editions.load`); one line naming the folders searched otherwise."""
    name = editions.DEFAULT if raw is None else str(raw)
    try:
        editions.load(name, path.parent)
    except BinacError as e:
        raise BinacError(f"study file {path}: {e}") from None
    return name


def _gates(path: Path, raw, regimes: tuple[str, ...]) -> dict:
    """The gates as given: {gate: threshold} (every regime) or {regime or `all`: {gate: threshold}}."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise BinacError(f"study file {path}: gates must map a gate to a threshold ({', '.join(GATES)})")
    if all(isinstance(v, dict) for v in raw.values()):
        for regime in raw:
            if regime != "all" and regime not in regimes:
                raise BinacError(
                    f"study file {path}: gates of {regime!r}, which is no regime (known: all, {', '.join(regimes)})"
                )
        return {str(r): _gate_thresholds(path, v) for r, v in raw.items()}
    return _gate_thresholds(path, raw)


def _gate_thresholds(path: Path, raw: dict) -> dict:
    for name, value in raw.items():
        if name not in GATES:
            raise BinacError(f"study file {path}: unknown gate {name!r} (known: {', '.join(GATES)})")
        ratio = name == "hint_over_self_correct_at_least"
        if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value <= (1e9 if ratio else 1):
            raise BinacError(
                f"study file {path}: gate {name} must be a {'ratio >= 0' if ratio else 'share in [0, 1]'}"
                f" (got {value!r})"
            )
    return {str(k): float(v) for k, v in raw.items()}


def gates_at(study: Study, regime: str) -> dict[str, float]:
    """The gates (name -> threshold) that apply at `regime`."""
    if not study.gates or not all(isinstance(v, dict) for v in study.gates.values()):
        return dict(study.gates)
    return {**study.gates.get("all", {}), **study.gates.get(regime, {})}


def gate_failures(study: Study, measured: dict[int, dict], difficulties: dict[str, int]) -> list[str]:
    """One line per gate the base model fails at a regime's difficulty (`measured`: binac_core/studies/regimes.py's
    measurements with the bounds, by difficulty), naming the gate, the regime and the value; empty when every gate
    holds or the study has none. A precondition gate on a measurement without preconditions fails, saying so."""
    from binac_core.foundation.stats import wilson_interval

    out = []
    for regime, d in difficulties.items():
        m, gates = measured[d], gates_at(study, regime)
        limit = gates.pop("shortcut_right_at_most", None)
        if limit is not None:
            n = m["shortcut_n"]
            right = round((m["shortcut_right"] or 0.0) * n)
            high = wilson_interval(right, n)[1]
            if high > limit:
                out.append(
                    f"regime {regime} (difficulty {d}): the shortcut check fails: {right} of {n} wrong-step "
                    f"attempts are right after approval (95 % Wilson interval up to {100 * high:.1f} %, "
                    f"gate shortcut_right_at_most {limit})"
                )
        least = gates.pop("oracle_gain_at_least", None)
        if least is not None and m["oracle"] - m["single"] < least:
            out.append(
                f"regime {regime} (difficulty {d}): the oracle's hint gains {100 * (m['oracle'] - m['single']):+.1f}"
                f" points over single-turn {100 * m['single']:.1f} % (gate oracle_gain_at_least {least})"
            )
        if gates and "preconditions" not in m:
            out.append(
                f"regime {regime} (difficulty {d}): gates {', '.join(gates)} need the precondition measures, "
                f"which benchmark {study.config().task.benchmark!r} cannot make"
            )
        elif gates:
            out += precondition_failures(regime, d, m["preconditions"], gates)
    return out


def choose_difficulties(study: Study, measured: dict[int, dict]) -> tuple[dict[str, int], list[str]]:
    """Apply the regimes' rules to the base's measurements (`binac_core.studies.regimes`, by difficulty): (difficulty by
    regime, deviations to report). A rule `otherwise: fail` that no difficulty meets raises one line."""
    from binac_core.studies.regimes import closest_difficulty, sparse_difficulty

    difficulties, deviations = {}, []
    for r in study.regimes:
        if r.rule is None:
            difficulties[r.name] = r.difficulty
            continue
        searched = {d: m for d, m in measured.items() if r.rule.search[0] <= d <= r.rule.search[1]}
        if r.rule.kind == "single_closest_to":
            difficulties[r.name] = closest_difficulty(searched, r.rule.value)
            continue
        chosen = sparse_difficulty(searched, r.rule.value)
        if chosen is None:
            if r.rule.otherwise == "fail":
                raise BinacError(
                    f"regime {r.name!r}: no difficulty in {list(r.rule.search)} has an all-wrong "
                    f"share >= {r.rule.value} (widen the base's pretraining range)"
                )
            chosen = r.rule.search[1]
            shares = ", ".join(f"d{d} {m['all_wrong_frac']:.3f}" for d, m in sorted(searched.items()))
            deviations.append(
                f"regime {r.name}: no difficulty in {r.rule.search[0]}-{r.rule.search[1]} meets the "
                f"rule (all-wrong share >= {r.rule.value}; measured {shares}); the hardest, "
                f"{chosen}, is used, as the design allows"
            )
        difficulties[r.name] = chosen
    return difficulties, deviations


def wanted_difficulties(study: Study) -> tuple[set[int], set[int]]:
    """(every difficulty a regime's rule or setting needs measured, the fixed ones)."""
    wanted = set()
    for r in study.regimes:
        wanted |= {r.difficulty} if r.rule is None else set(range(r.rule.search[0], r.rule.search[1] + 1))
    return wanted, {r.difficulty for r in study.regimes if r.rule is None}


def _regime(path: Path, name: str, raw: dict) -> Regime:
    if not isinstance(raw, dict) or ("difficulty" in raw) == ("rule" in raw):
        raise BinacError(f"study file {path}: regime {name!r} needs exactly one of difficulty, rule")
    if "difficulty" in raw:
        return Regime(name, int(raw["difficulty"]), None)
    rule = raw["rule"]
    kinds = [k for k in RULE_KINDS if isinstance(rule, dict) and k in rule]
    try:
        lo, hi = (int(x) for x in rule["search"])
        value, otherwise = float(rule[kinds[0]]), rule.get("otherwise", "fail")
    except (KeyError, TypeError, ValueError, IndexError):
        raise BinacError(
            f"study file {path}: regime {name!r}: rule needs one of {', '.join(RULE_KINDS)} and search: [lo, hi]"
        ) from None
    if len(kinds) != 1 or not 1 <= lo <= hi or otherwise not in ("hardest", "fail") or not 0 < value <= 1:
        raise BinacError(f"study file {path}: regime {name!r}: bad rule {rule!r}")
    return Regime(name, None, Rule(kinds[0], value, (lo, hi), otherwise))


def grid(study: Study, difficulties: dict[str, int]) -> list[RunSpec]:
    """Every run, seed-major (all methods and regimes of seed 0 first), so a grid stopped early is balanced. Every
    run also evaluates at the equal-budget points of both axes (`equal_budget_totals`)."""
    totals = equal_budget_totals(study)
    runs = []
    for seed in study.seeds:
        for regime in study.regimes:
            d = difficulties[regime.name]
            for method in study.methods:
                for variant, extra in (study.variants.get(method) or {"": {}}).items():
                    overrides = {
                        **study.overrides,
                        **extra,
                        "task.difficulty": d,
                        "train.eval_every": study.eval_every,
                        "train.eval_at_samples": totals["actor_train"],
                        "train.eval_at_generated": totals["generated"],
                    }
                    runs.append(RunSpec(regime.name, d, method, seed, overrides, variant))
    return runs


def equal_budget_totals(study: Study) -> dict[str, int]:
    """`equal_samples_method`'s counts after all iterations on both budget axes (`binac_core.rl.methods`): its actor
    training samples (`actor_train`, exact under an alternation: `MethodSpec.actor_samples_through`) and its
    generated samples (`generated`): the equal-budget points."""
    spec, cfg = method_spec(study.equal_samples_method), study.config()
    return {
        "actor_train": spec.actor_samples_through(cfg, study.iterations),
        "generated": spec.generated_samples_per_iteration(cfg) * study.iterations,
    }
