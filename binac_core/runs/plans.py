"""Validation of every entry point's arguments, before any compute and without importing Prefect or torch:
a bad value raises `BinacError` with one line naming it, and nothing is written."""

from __future__ import annotations

from pathlib import Path

from binac_core.errors import BinacError
from binac_core.foundation.config import load_config
from binac_core.rl.methods import FeedbackSource, method_spec


def plan(preset: str, method: str, steps: int | None, seed: int, overrides: dict | None, budget: int | None):
    """Validate everything before any compute: (config, method spec, iterations)."""
    cfg = load_config(preset, overrides)
    spec = method_spec(method)
    from binac_core import benchmarks

    bench = benchmarks.get(cfg.task.benchmark)
    check_sandbox(bench, cfg)
    if spec.feedback is FeedbackSource.ORACLE and bench.oracle_feedback is None:
        oracles = benchmarks.names(having=lambda b: b.oracle_feedback is not None)
        raise BinacError(
            f"method {method!r} needs a benchmark with an oracle critic ({', '.join(oracles)}; "
            f"benchmark is {cfg.task.benchmark!r})"
        )
    if budget is None and (steps is None or steps < 1):
        raise BinacError(f"--steps must be a positive integer (got {steps})")
    if budget is not None and budget < 1:
        raise BinacError(f"actor-sample budget must be positive (got {budget})")
    if seed < 0:
        raise BinacError(f"--seed must be >= 0 (got {seed})")
    if cfg.task.eval_split == "val" and cfg.task.benchmark != "synthetic":
        raise BinacError(f"task.eval_split val needs the synthetic task (benchmark is {cfg.task.benchmark!r})")
    if bench.check_data is not None:
        for split in ("train", "eval"):
            bench.check_data(split)  # missing data or a split it lacks: one line, named
    if cfg.model.device == "cuda":
        from binac_core.model.policy import training_device

        training_device("cuda")  # no CUDA device here: one line
    if cfg.generation.backend == "vllm":
        from binac_core.model.generation_vllm import check_runnable

        check_runnable(cfg)  # no vLLM that runs here, or a tiny model its CPU attention cannot: one line
    iterations = steps if budget is None else spec.iterations_for_budget(cfg, budget)
    return cfg, spec, iterations


def check_sandbox(bench, cfg) -> str | None:
    """For a benchmark whose grader runs untrusted code (`Benchmark.runs_code`): the isolation its sandbox will
    use, or a one-line `BinacError` (`IsolationRequired`) when bwrap does not work here and `grading.sandbox` is
    not `rlimits`. None for the other benchmarks (nothing is probed)."""
    if not bench.runs_code:
        return None
    from binac_core.grading.sandbox import require_isolation

    return require_isolation(cfg.grading.sandbox)


def isolation_used(cfg) -> str:
    """What the run's grader isolates untrusted code with here (recorded as the run parameter `grading.isolation`):
    `bwrap` or `rlimits` for a benchmark that runs code (`check_sandbox`), `none` for the others."""
    from binac_core import benchmarks

    return check_sandbox(benchmarks.get(cfg.task.benchmark), cfg) or "none"


EQUAL = ("samples", "iterations")
"""What a comparison holds equal across methods: actor training samples (`binac compare`) or iterations
(`binac demo`)."""


def plan_compare(
    preset: str, methods: list[str], seeds: list[int], steps: int, overrides: dict | None, equal: str = "samples"
):
    """Validate a comparison before any compute: (config, budget). The budget is in actor TRAINING samples (the
    sequences the actor's loss is computed on, `MethodSpec.actor_train_samples_per_iteration`): `steps` GRPO
    iterations' worth. Each method runs the whole iterations that fit in it (`MethodSpec.iterations_for_budget`;
    critic_only, which trains no actor, the iterations GRPO runs); generated samples do not limit a method.
    `equal="iterations"` (`binac demo`): every method runs `steps` iterations instead, whatever its samples (the
    budget returned is then GRPO's, for the record)."""
    if equal not in EQUAL:
        raise BinacError(f"unknown comparison axis {equal!r} (known: {', '.join(EQUAL)})")
    if not methods:
        raise BinacError("--methods is empty")
    if len(set(methods)) != len(methods):
        raise BinacError(f"--methods lists a method twice: {','.join(methods)}")
    if steps is None or steps < 1:
        raise BinacError(f"--steps must be a positive integer (got {steps})")
    cfg = load_config(preset, overrides)
    grpo = method_spec("grpo").actor_train_samples_per_iteration(cfg)
    budget = steps * grpo
    if equal == "iterations":
        for m in methods:
            for s in seeds:
                plan(preset, m, steps, s, overrides, None)
        return cfg, budget
    # Every method runs the whole iterations that fit in the budget (methods.py `iterations_for_budget`): a budget
    # below one iteration of some method is refused here, with the smallest --steps that fits them all. A method
    # training no actor (0 per iteration) runs GRPO's iterations: it always fits.
    per_iteration = {m: method_spec(m).actor_train_samples_per_iteration(cfg) for m in methods}
    short = {m: n for m, n in per_iteration.items() if n > budget}
    if short:
        fits = -(-max(per_iteration.values()) // grpo)  # ceil: the fewest grpo iterations covering every method
        raise BinacError(
            f"--steps {steps} gives a budget of {budget} actor training samples, less than one "
            f"iteration of {', '.join(f'{m} ({n})' for m, n in short.items())}; the smallest budget "
            f"that fits every method is --steps {fits} ({fits * grpo} actor training samples)"
        )
    for m in methods:
        for s in seeds:
            plan(preset, m, None, s, overrides, budget)
    return cfg, budget


def check_stage_code(expected: str, here: str) -> None:
    """A run submitted with the stage code digest `expected` (a study's, `binac_core.foundation.provenance.
    stage_code_digest` where it was submitted) refuses to start on a worker whose own digest, `here`, differs: its
    stages would compute other results under the study's run keys. An empty `expected` (a run started by hand or by
    a comparison in its own process) asks nothing."""
    if expected and expected != here:
        raise BinacError(
            f"this worker's stage code digest is {here}, the study's is {expected}: "
            "run the worker from the study's commit (no stage was computed)"
        )


def train_run_key(cfg, method: str, seed: int, iterations: int, parent_key: str, code: str, fresh: str) -> str:
    """A training run's identity (its MLflow run, stage folders, lock): the config, method, seed, iterations, the
    comparison or study it belongs to, the stage code digest and the `--fresh` value."""
    import hashlib

    blob = f"{cfg.digest()}|{method}|{seed}|{iterations}|{parent_key}|{code}|{fresh}"
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def compare_key(
    cfg, methods: list[str], seeds: list[int], steps: int, code: str, fresh: str, equal: str = "samples"
) -> str:
    """A comparison's identity (its MLflow parent run, and part of each of its runs' keys): the config, methods,
    seeds, steps, the stage code digest, the `--fresh` value and, at equal iterations, that axis."""
    import hashlib

    axis = "" if equal == "samples" else f"|{equal}"
    return hashlib.sha256(f"{cfg.digest()}|{methods}|{seeds}|{steps}|{code}|{fresh}{axis}".encode()).hexdigest()[:12]


def plan_evaluate(
    benchmark, model, actor_adapter, critic_adapter, protocol, samples, limit, preset, temperature, max_new_tokens
):
    """Validate before any compute; returns (config, {role: AdapterRef or None}) for both `AdapterRole`s."""
    from binac_core import benchmarks
    from binac_core.rl.evaluation import PROTOCOL_STAGES

    bench = benchmarks.get(benchmark)  # an unknown name: one line listing the known ones
    if protocol not in PROTOCOL_STAGES:
        raise BinacError(f"unknown protocol {protocol!r} (known: {', '.join(PROTOCOL_STAGES)})")
    if bench.check_data is not None:
        bench.check_data("eval")  # a missing data folder or a malformed row fails here, named
    if samples < 1 or limit < 1:
        raise BinacError(f"--samples and --limit must be positive (got {samples}, {limit})")
    overrides = {"task.benchmark": benchmark, "task.n_test": limit, "generation.eval_samples": samples}
    if model == "smol":  # SmolLM2-135M-Instruct from its PyPI package (binac_core/model/smol.py)
        from binac_core.model.smol import gguf_path

        gguf_path()  # not installed: one line saying how, before any compute
        overrides["model.source"] = "smol"
    else:
        local = Path(model)
        if (model.startswith((".", "/")) or local.exists()) and not (local / "config.json").exists():
            raise BinacError(f"model folder has no config.json: {model}")
        overrides.update({"model.source": "hub", "model.hub_id": str(local.resolve()) if local.exists() else model})
    if temperature is not None:
        overrides["generation.eval_temperature"] = temperature
    if max_new_tokens is not None:
        overrides["generation.max_new_tokens"] = max_new_tokens
    cfg = load_config(preset, overrides)
    check_sandbox(bench, cfg)
    from binac_core.foundation.files import file_digest
    from binac_core.model.stage_io import AdapterRef, AdapterRole

    refs = {}
    for name, folder in ((AdapterRole.ACTOR, actor_adapter), (AdapterRole.CRITIC, critic_adapter)):
        if folder is None:
            refs[name] = None
            continue
        if not (Path(folder) / "adapter_model.safetensors").exists():
            raise BinacError(f"--{name}-adapter has no adapter_model.safetensors: {folder}")
        refs[name] = AdapterRef(name, str(Path(folder).resolve()), file_digest(Path(folder)))
    return cfg, refs


def shared_eval_samples(per_iteration: list[int], budget: int, points: int) -> list[int]:
    """Actor training sample counts at which every compared method that trains its actor can evaluate: the
    multiples of the least common multiple of the methods' non-zero actor training samples per iteration, up to
    the budget, thinned to at most `points` evenly spaced ones (the last kept). A 0 (critic_only: its count never
    moves) takes no part; such a method evaluates at evenly spaced iterations (`evaluation_steps`). Empty when
    the budget is below that multiple (the methods then share no count but 0) or no method trains its actor."""
    import math

    counts = [n for n in per_iteration if n > 0]
    if not counts:
        return []
    common = math.lcm(*counts)
    shared = [k * common for k in range(1, budget // common + 1)]
    if len(shared) > points:
        shared = [shared[math.ceil(i * len(shared) / points) - 1] for i in range(1, points + 1)]
    return shared


def evaluation_steps(
    iterations: int,
    every: int,
    points: int | None,
    samples_per_iteration: int = 0,
    at_samples: int | None = None,
    shared_samples: list[int] | None = None,
    *,
    generated_per_iteration: int = 0,
    at_generated: int | None = None,
    alternation: tuple[int, int] | None = None,
) -> set[int]:
    """Iterations after which to evaluate: in a comparison, those that reach `shared_samples` (the actor training
    sample counts every compared method reaches exactly, `shared_eval_samples`), else `points` evenly spaced
    ones (so too for a method with 0 actor training samples per iteration); outside one, every `every`
    iterations; the last iteration always. Then the equal-budget points, each when the run gets that far: with
    `at_samples`, the first iteration whose cumulative actor training samples (`samples_per_iteration` each)
    reach it; with `at_generated`, the first whose cumulative generated samples (`generated_per_iteration`
    each) reach it. A method whose count never grows (0 per iteration) has no such point. Under `alternation`
    (`MethodSpec.alternation`) the actor training samples grow at actor iterations only: a count is reached at
    the iteration of its actor iteration (`schedule.step_of_actor_iteration`)."""
    import math

    from binac_core.rl.schedule import step_of_actor_iteration

    if shared_samples and samples_per_iteration:
        steps = {
            step_of_actor_iteration(alternation, s // samples_per_iteration)
            for s in shared_samples
            if s % samples_per_iteration == 0
        }
        steps = {s for s in steps if s <= iterations} | {iterations}
    elif points:
        steps = {math.ceil(i * iterations / points) for i in range(1, points + 1)}
    else:
        steps = {s for s in range(1, iterations + 1) if s % every == 0} | {iterations}
    for target, per_iteration, schedule in (
        (at_samples, samples_per_iteration, alternation),
        (at_generated, generated_per_iteration, None),
    ):
        if target and per_iteration:
            first = step_of_actor_iteration(schedule, math.ceil(target / per_iteration))
            if first <= iterations:
                steps.add(first)
    return steps
