"""One training run of one method: the Bi-NAC loop (or a baseline) as a chain of cached Prefect tasks.

Per iteration:  sample problems → actor attempts y0 → [critic feedback z → actor refinement y1] → rewards
→ actor update θ → θ⁺ → [look-ahead refinement under θ⁺ → critic reward → critic update φ (every
`train.critic_every`-th iteration)]
→ store trajectories, log metrics → every k iterations: evaluate (single, feedback, gated@K; code benchmarks
also feedback_exec, gated_exec; the synthetic task also single_greedy, `generation.eval_greedy`), with the feedback
source the method trains with; with `bank.enabled`, a method that trains its critic also scores it and the frozen
base critic on the fixed attempt bank, built once per base before the first evaluation (binac_core/rl/bank.py).
Brackets depend on the method (binac_core/rl/methods.py). Every stage is cached on its inputs, so re-running the
same command reuses finished work and a killed run resumes where it stopped.
The iteration is `binac_core.rl.loop.run_iteration`, the one the in-memory path runs too, here over the cached
tasks (`flows.stages.PrefectStages`). This flow adds what a run needs around it: the run's identity and lock, its
base's identity (the sha256 of its weights, logged as the parameter `base.weights_sha256`; a resumed run whose base
weights differ from those it recorded refuses before any stage, `binac_core.runs.bases`), the stored trajectories,
MLflow tracking, the evaluation points, and the seconds of every phase (`perf/<phase>_s`,
`binac_core.foundation.timing`; storage and evaluation timed here); the counts and the progress line are
`flows.bookkeeping.IterationLog`'s.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from prefect import flow
from prefect.runtime import flow_run
from prefect.utilities.annotations import quote

from binac_core.errors import BinacError
from binac_core.foundation.config import Config
from binac_core.foundation.files import StageFile
from binac_core.foundation.provenance import stage_code_digest
from binac_core.foundation.timing import phase_metrics, timed
from binac_core.foundation.workspace import workspace
from binac_core.grading.sandbox import accept
from binac_core.model.stage_io import AdapterRole
from binac_core.model.weights import PARAM
from binac_core.reports.measures import CRITIC_INFORMATION
from binac_core.rl.bank import banked
from binac_core.rl.evaluation import greedy_evaluated, training_protocols
from binac_core.rl.loop import IterationResult, StepContext, run_iteration
from binac_core.rl.methods import MethodSpec
from binac_core.rl.schedule import actor_iterations_through
from binac_core.rl.stream import difficulty_at
from binac_core.runs.bases import check_built, check_run, check_submitted, check_train
from binac_core.runs.plans import check_stage_code, evaluation_steps, isolation_used, plan, train_run_key
from binac_core.runs.runlock import flow_run_claim, run_lock
from binac_core.store import tracking
from binac_core.store.identity import RunIdentity
from flows.bookkeeping import IterationLog
from flows.exclusive import across_hosts, run_slot
from flows.reporting import closing_artifact, refuse
from flows.stages import PrefectStages
from tasks.bank import build_bank, frozen_bank, score_bank, store_bank
from tasks.evaluate import evaluate, store_eval_exec
from tasks.prepare import base_weights, build_base_model, init_adapters, prepare_data
from tasks.store import store_eval, store_train_step
from tasks.track import finalize_run, finish_run, log_metrics, start_run


@flow(name="train", flow_run_name="{method}-{preset}-s{seed}")
def train(
    preset: str = "micro",
    method: str = "grpo",
    steps: int = 3,
    seed: int = 0,
    overrides: dict | None = None,
    budget: int | None = None,
    parent_run_id: str | None = None,
    parent_key: str = "",
    fresh: str = "",
    shared_samples: list[int] | None = None,
    label: str = "",
    stage_code: str = "",
    base_sha256: str = "",
) -> dict:
    """Train `method` for `steps` iterations (or the whole iterations within `budget` actor training samples);
    returns run id and evaluations.

    With `train.stream_target` each iteration's problems are drawn at the difficulty the problem stream chose from
    the iterations before it (`binac_core.rl.stream`; logged as `train/difficulty`); the evaluations are not.

    The result's `critic_information` holds, per iteration, the critic's reward information measures it logged
    (`measures.CRITIC_INFORMATION`, `train/<measure>`), which the comparison report plots.

    Two counts are logged each iteration, both cumulative: `train/actor_samples`, the actor TRAINING samples (the
    sequences its loss is computed on; never the look-ahead refinements), and `train/generated_samples`, every
    sequence sampled from the actor or the critic (binac_core/rl/methods.py). Every evaluation is logged again at
    each count as the step (`eval_at_samples/<metric>`, `eval_at_generated/<metric>`), and both are stored in
    the trajectory rows (`actor_samples`, `generated_samples`).

    Args:
        preset: preset name (tiny, micro, ...) or path of a preset YAML file.
        method: grpo | fixed_critic | binac | binac_lam0 | binac_after | critic_only | self_correct |
            oracle_critic | binac_disc (binac_core/rl/methods.py).
        steps: training iterations (ignored when `budget` is set).
        seed: run seed (sampling, adapter init, batch order).
        overrides: config fields to override, {"section.field": value}.
        budget: actor training sample budget; set by `compare` for its subflows.
        parent_run_id: MLflow parent run; set by `compare`.
        parent_key: the comparison's key; set by `compare`.
        shared_samples: actor training sample counts at which every compared method evaluates; set by
            `compare`.
        fresh: any new value recomputes every stage instead of reusing cached ones (a new MLflow run);
            `binac train --fresh` sets one. An edit to library code recomputes without it.
        label: a name for the run's settings among others of the same method (a study's variant): appended to
            the MLflow run name and tagged `variant`; not part of the run's identity (its overrides are).
        stage_code: the stage code digest the run was submitted with (a study's); a worker whose own digest
            differs refuses the run in one line naming both, before any compute. Empty: no check.
        base_sha256: the weights hash of the study's base; with an object store a worker fetches that base into
            its home (`binac_core.runs.bases.check_submitted`), and refuses in one line naming both hashes when it
            holds another base for the config or the store lacks it, before any compute. Empty: no check.
    """
    # From its first line a flow run's process is seen alive or dead by a study (binac_core/runs/runlock.py).
    with flow_run_claim(workspace().home, flow_run.get_id()):
        request = TrainRequest(
            preset=preset,
            method=method,
            steps=steps,
            seed=seed,
            overrides=overrides,
            budget=budget,
            parent_run_id=parent_run_id,
            parent_key=parent_key,
            fresh=fresh,
            shared_samples=shared_samples,
            label=label,
            stage_code=stage_code,
            base_sha256=base_sha256,
        )
        return _train(request)


@dataclass(frozen=True, kw_only=True)
class TrainRequest:
    """`train`'s parameters as one value (its docstring says what each is): the first four required, the others
    with `train`'s defaults."""

    preset: str
    method: str
    steps: int
    seed: int
    overrides: dict | None = None
    budget: int | None = None
    parent_run_id: str | None = None
    parent_key: str = ""
    fresh: str = ""
    shared_samples: list[int] | None = None
    label: str = ""
    stage_code: str = ""
    base_sha256: str = ""


def _train(req: TrainRequest) -> dict:
    """The body of `train` (its docstring says what it does): checks, then the run under its slot and lock."""
    try:
        cfg, spec, iterations = _checked_plan(req)
    except BinacError as exc:  # a deployment run with a bad parameter: the CLI's one line as its state message
        return refuse(exc)
    accept(cfg.grading.sandbox)  # process-wide: the sandbox refuses an isolation the run does not accept
    # The code that computes the stages is part of the run's identity: after a library edit the same command is
    # a new run (new MLflow run, new stage folders); `fresh` does the same without an edit.
    code = stage_code_digest()
    key = train_run_key(cfg, req.method, req.seed, iterations, req.parent_key, code, req.fresh)
    # One process per run: a duplicate waits; a study tells a killed run from a live one (binac_core/runs/runlock.py);
    # with an object store, across hosts through a Prefect concurrency limit (flows/exclusive.py).
    with run_slot(key, flow_run.get_id(), across_hosts()), run_lock(workspace().home, key, flow_run.get_id()):
        setup = _set_up(req, cfg, spec, iterations, code, key)
        try:
            trained = _iterate(req, setup, iterations)
            finalize_run(setup.run.run_id, setup.cfg_d, trained.actor, trained.critic)
        except BaseException:
            finish_run(setup.run.run_id, "FAILED")
            raise
        closing_artifact(
            f"train-{req.method}-{cfg.name}-s{req.seed}",
            f"train {req.method} on {cfg.name}, seed {req.seed}",
            _evals_table(
                trained.evals,
                setup.run.actor_samples_per_iteration,
                setup.run.generated_samples_per_iteration,
                setup.run.alternation,
            ),
            setup.run.run_id,
        )
        return _result(setup, trained)


def _checked_plan(req: TrainRequest):
    """The run's config, method spec and iterations, after the checks that refuse it in one line before any
    compute (`BinacError`): the stage code, the study's base, the base a resumed run recorded."""
    # A worker on other stage code than the study's: one line naming both digests, before anything runs.
    check_stage_code(req.stage_code, stage_code_digest())
    cfg, spec, iterations = plan(req.preset, req.method, req.steps, req.seed, req.overrides, req.budget)
    # The study's base, fetched by its weights hash where there is a store; another base here refuses.
    check_submitted(cfg, workspace(), req.base_sha256)
    # A base named by its weights that is missing, or a resumed run's base that is there with other weights.
    check_train(cfg, workspace(), req.method, req.seed, iterations, req.parent_key, req.fresh)
    return cfg, spec, iterations


@dataclass(frozen=True)
class RunSetup:
    """What a run's iterations need, made once under its lock: the config (typed and as passed to tasks), the
    method, the base and its weights hash, the data splits, the attempt bank (None: none), the run's identity
    (with its MLflow run id), its stage folder, the shared folder of its initial adapters and the grading
    isolation used (`isolation_used`)."""

    cfg: Config
    cfg_d: quote
    spec: MethodSpec
    base: StageFile
    weights: str
    data: dict
    bank: StageFile | None
    run: RunIdentity
    run_dir: Path
    shared: Path
    isolation: str


@dataclass(frozen=True)
class TrainedRun:
    """A run's iterations done: the final adapters, the evaluations by step and the critic's reward information
    logged per iteration."""

    actor: object
    critic: object
    evals: dict[int, dict]
    information: dict[int, dict[str, float]]


def _set_up(req: TrainRequest, cfg: Config, spec: MethodSpec, iterations: int, code: str, key: str) -> RunSetup:
    """Under the run's lock: the base (checked against the study's and the run's recorded weights), the data, the
    attempt bank, and the MLflow run started with its tags and parameters."""
    ws = workspace()
    # quote: Prefect then passes the config to tasks as it is, without visiting each field for futures (about
    # 0.7 ms per task call); cache keys still hash it whole.
    cfg_d = quote(cfg.model_dump(mode="json"))
    method, seed, label = req.method, req.seed, req.label
    run_name = f"{method}{'-' + label if label else ''}-{cfg.name}-s{seed}"
    base = build_base_model(cfg_d)
    weights = base_weights(base)
    check_built(req.base_sha256, weights, base.path)  # a hub or smol base is only there once built
    # A resumed run keeps the base weights it started on (binac_core/runs/bases.py), before any stage runs.
    check_run(ws, key, weights, f"run {run_name} ({key})")
    # The initial adapters, shared by the runs of one config and base, live in a folder named by both.
    init_key = hashlib.sha256(f"{cfg.digest()}|{weights}|{code}|{req.fresh}".encode()).hexdigest()[:16]
    data = (prepare_data.with_options(refresh_cache=True) if req.fresh else prepare_data)(cfg_d)
    # The critic's fixed attempt bank, sampled once per base and settings (binac_core/rl/bank.py).
    bank = build_bank(cfg_d, base, weights, seed) if banked(cfg, spec.train_critic) else None
    isolation = isolation_used(cfg)
    tags, params = _run_tags(req, cfg, spec, iterations), _run_params(req, cfg, iterations, code, isolation)
    run_id = start_run(key, run_name, tags, params | {PARAM: weights}, req.parent_run_id)
    # The per-iteration counts ride in the run's identity to the rows: their `actor_samples`,
    # `generated_samples` columns hold step x each (binac_core/store/records.py).
    run = RunIdentity(
        run_id=run_id,
        method=method,
        feedback=spec.feedback,
        preset=cfg.name,
        seed=seed,
        benchmark=cfg.task.benchmark,
        parent_run_id=req.parent_run_id,
        actor_samples_per_iteration=spec.actor_train_samples_per_iteration(cfg),
        generated_samples_per_iteration=spec.generated_samples_per_iteration(cfg),
        alternation=spec.alternation(cfg),
        variant=label or None,
    )
    return RunSetup(
        cfg=cfg,
        cfg_d=cfg_d,
        spec=spec,
        base=base,
        weights=weights,
        data=data,
        bank=bank,
        run=run,
        run_dir=ws.run_dir(f"{method}-s{seed}-{key}"),
        shared=ws.run_dir(f"init-{init_key}-s{seed}"),
        isolation=isolation,
    )


def _iterate(req: TrainRequest, setup: RunSetup, iterations: int) -> TrainedRun:
    """The initial adapters and evaluation, then `iterations` of `run_iteration` over the cached tasks, each stored
    and logged, with an evaluation at every step of `_evaluation_steps`."""
    cfg, cfg_d, spec, run, seed = setup.cfg, setup.cfg_d, setup.spec, setup.run, req.seed
    per_iteration, gen_per_iteration = run.actor_samples_per_iteration, run.generated_samples_per_iteration
    adapters = init_adapters(cfg_d, setup.base, seed, str(setup.shared))
    actor, critic = adapters[AdapterRole.ACTOR], adapters[AdapterRole.CRITIC]
    log_metrics(run.run_id, {"train/actor_samples": 0, "train/generated_samples": 0}, 0)
    greedy = greedy_evaluated(cfg.generation.eval_greedy, cfg.task.benchmark)
    evaluation_point = partial(
        _evaluation_point,
        cfg_d,
        setup.base,
        setup.data["eval"],
        spec=spec,
        run=run,
        verdict=cfg.critic.verdict,
        greedy=greedy,
        bank=setup.bank,
    )
    information: dict[int, dict[str, float]] = {}
    evals = {0: evaluation_point(actor=actor, critic=critic, at=StepContext(seed, 0, str(setup.shared)))}
    alternation = run.alternation
    log = IterationLog(
        f"{req.method} {cfg.name} seed {seed}", iterations, per_iteration, gen_per_iteration, alternation
    )
    eval_at = _evaluation_steps(req, cfg, iterations, per_iteration, gen_per_iteration, alternation)
    stages = PrefectStages(cfg, cfg_d, setup.base, setup.data["train"], _stream_splits(cfg))
    history: list[tuple[int, float]] = []  # the problem stream's (difficulty, training accuracy)
    for step in range(1, iterations + 1):
        log.begin()
        difficulty = difficulty_at(cfg, spec, history)
        at = StepContext(seed, step, str(setup.run_dir / f"step-{step:05d}"), difficulty)
        res = run_iteration(stages, cfg, spec, at, actor, critic)
        actor, critic, timings = res.actor, res.critic, dict(res.timings)
        extra = log.metrics(_update_metrics(res), [res.attempts, res.feedback, res.refined, res.lookahead])
        with timed("storage", timings):
            metrics = store_train_step(run, step, res, extra=extra)
        information[step] = {k: metrics[f"train/{k}"] for k in CRITIC_INFORMATION if f"train/{k}" in metrics}
        if difficulty is not None:
            history.append((difficulty, metrics["train/reward_first"]))
            log_metrics(run.run_id, {"train/difficulty": difficulty}, step)
        if step in eval_at:
            with timed("evaluation", timings):
                evals[step] = evaluation_point(
                    actor=actor, critic=critic, at=at, samples=log.samples, generated=log.generated
                )
        log_metrics(run.run_id, phase_metrics(timings), step)
        log.progress(step, metrics, evals)
    return TrainedRun(actor=actor, critic=critic, evals=evals, information=information)


def _result(setup: RunSetup, trained: TrainedRun) -> dict:
    """`train`'s return value: run id, method, seed, evaluations, counts per iteration, final adapters, grading
    isolation and the critic's reward information by step."""
    run = setup.run
    alternation = run.alternation
    return {
        "run_id": run.run_id,
        "method": run.method,
        "seed": run.seed,
        "evals": trained.evals,
        "feedback_source": setup.spec.eval_feedback,
        "samples_per_iteration": run.actor_samples_per_iteration,
        "generated_per_iteration": run.generated_samples_per_iteration,
        **({"alternation": list(alternation)} if alternation else {}),
        "actor": trained.actor,
        "critic": trained.critic,
        "isolation": setup.isolation,
        "critic_information": {step: m for step, m in trained.information.items() if m},
    }


def _run_tags(req: TrainRequest, cfg, spec: MethodSpec, iterations: int) -> dict[str, str]:
    """The MLflow run's tags: method, preset, seed, benchmark, the variant's label and the actor sample budget."""
    return {
        "method": req.method,
        "preset": cfg.name,
        "seed": str(req.seed),
        "benchmark": cfg.task.benchmark,
        **({"variant": req.label} if req.label else {}),
        "budget_actor_samples": str(req.budget or spec.actor_samples_through(cfg, iterations)),
    }


def _run_params(req: TrainRequest, cfg, iterations: int, code: str, isolation: str) -> dict:
    """The MLflow run's parameters but the base's weights: the flat config, the method, seed and iterations, the
    stage code's digest, `fresh` and the grading isolation."""
    return {
        **cfg.flat(),
        "method": req.method,
        "seed": str(req.seed),
        "iterations": str(iterations),
        "code.stage_code_digest": code,
        "code.fresh": req.fresh,
        "grading.isolation": isolation,
    }


def _evaluation_steps(
    req: TrainRequest, cfg, iterations: int, per_iteration: int, gen_per_iteration: int, alternation
) -> set[int]:
    """The iterations after which the run evaluates (`binac_core.runs.plans.evaluation_steps`)."""
    return evaluation_steps(
        iterations,
        cfg.train.eval_every,
        cfg.train.eval_points if req.budget else None,
        per_iteration,
        cfg.train.eval_at_samples,
        req.shared_samples,
        generated_per_iteration=gen_per_iteration,
        at_generated=cfg.train.eval_at_generated,
        alternation=alternation,
    )


def _stream_splits(cfg) -> dict | None:
    """With the problem stream (`train.stream_target`), the train split of every difficulty it may choose
    (`prepare_data` of the config at that `task.difficulty`, each written once like the run's own); else None."""
    if cfg.train.stream_difficulties is None:
        return None
    low, high = cfg.train.stream_difficulties
    at = {
        d: cfg.model_copy(update={"task": cfg.task.model_copy(update={"difficulty": d})}) for d in range(low, high + 1)
    }
    return {d: prepare_data(quote(c.model_dump(mode="json")), ("train",))["train"] for d, c in at.items()}


def _update_metrics(res: IterationResult) -> dict[str, float]:
    """The iteration's update statistics: the actor's loss and KL, the critic's loss, and each update's
    `_update_stats` (where the update ran)."""
    out = {}
    if res.actor_update is not None:
        out |= {"train/actor_loss": res.actor_update.loss, "train/kl": res.actor_update.kl}
        out |= _update_stats(AdapterRole.ACTOR, res.actor_update)
    if res.critic_update is not None:
        out["train/critic_loss"] = res.critic_update.loss
        out |= _update_stats(AdapterRole.CRITIC, res.critic_update)
    return out


def _update_stats(model: AdapterRole, upd) -> dict[str, float]:
    """An update's logged statistics beside its loss, for `model` (actor or critic): the policy's mean entropy per
    completion token (`train/<model>_entropy`) and the optimizer steps it skipped on a batch without signal
    (`train/<model>_skipped_steps`; binac_core/rl/update.py `policy_update`)."""
    return {f"train/{model}_entropy": upd.entropy, f"train/{model}_skipped_steps": upd.skipped_steps}


def _evals_table(
    evals: dict[int, dict], per_iteration: int, gen_per_iteration: int, alternation: tuple[int, int] | None = None
) -> str:
    """The run's held-out evaluations as a markdown table, one row per evaluation point, with the cumulative
    actor training samples and generated samples reached at it (`per_iteration`, `gen_per_iteration` each)."""
    keys = sorted({k for m in evals.values() for k in m if k.startswith("eval/acc")})
    lines = [
        "| iteration | actor training samples | generated samples | "
        + " | ".join(k.removeprefix("eval/") for k in keys)
        + " |",
        "| --- | --- | --- | " + " | ".join("---" for _ in keys) + " |",
    ]
    for step in sorted(evals):
        cells = [f"{evals[step][k]:.3f}" if k in evals[step] else "–" for k in keys]
        samples = actor_iterations_through(alternation, step) * per_iteration
        lines.append(f"| {step} | {samples} | {step * gen_per_iteration} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _frozen_too(spec: MethodSpec, benchmark: str, verdict: bool) -> bool:
    """Whether evaluations also run `feedback_frozen` (the frozen base critic on the same attempts): for a method
    that trains its critic, where the two critics can be compared: on a benchmark whose feedback can be analysed
    (the synthetic task: the first-error measures) or whose critic gives a verdict (`critic.verdict`: the critic
    health measures, `eval/frozen_critic/*`); elsewhere it would only add generation."""
    from binac_core.benchmarks import get

    return spec.train_critic and (verdict or get(benchmark).feedback_analysis is not None)


def _evaluation_point(
    cfg_d,
    base,
    problems,
    *,
    actor,
    critic,
    spec: MethodSpec,
    run: RunIdentity,
    at: StepContext,
    verdict,
    samples=0,
    generated=0,
    greedy=False,
    bank=None,
) -> dict:
    """Evaluate with the feedback source the method trains with (binac_core/rl/evaluation.py): self_correct with its
    fixed instruction, oracle_critic with the oracle, the others with the critic adapter (for grpo and
    fixed_critic the frozen initial critic).
    Code benchmarks also get the execution-assisted protocols, and a method that trains its critic the frozen
    critic's `feedback_frozen` where the two can be compared (`_frozen_too`). The source is tagged
    `eval_feedback_source`.
    `greedy`: also the greedy `single_greedy` protocol (`evaluation.greedy_evaluated`: `generation.eval_greedy`).
    `bank`: the critic's attempt bank (its file; None: no bank): the method's critic and the frozen base critic
    are scored on it, their `bank_<split>/*` metrics logged at the step (not copied to the budget axes, not in
    the returned metrics), their rows stored (`_bank_point`).
    `verdict`: the config's `critic.verdict`. `samples`: the actor training samples so far, the step of the
    `eval_at_samples/` copies of the metrics;
    `generated`: the generated samples so far, the step of the `eval_at_generated/` copies. A method that never
    trains its actor (critic_only) logs `eval_at_samples/` at step 0 only: its count stays 0, and copies of its
    later evaluations would all pile up at x = 0."""
    source, step = spec.eval_feedback, at.step
    result = evaluate(
        cfg_d,
        base,
        problems,
        actor=actor,
        critic=critic if source.sampled else None,
        protocols=training_protocols(
            run.benchmark, source, trains_critic=_frozen_too(spec, run.benchmark, verdict), greedy=greedy
        ),
        source=source.value,
        seed=at.seed,
        step=step,
        out_dir=at.out_dir,
    )
    metrics = store_eval(run, step, result, problems)
    store_eval_exec(run, step, result)
    run_id = run.run_id
    log_metrics(run_id, metrics, step)
    # The same numbers again with each cumulative count as the step: MLflow's default charts of
    # eval_at_samples/<metric> (actor training samples) and eval_at_generated/<metric> (generated samples) then
    # compare methods at equal budgets on either axis, not at equal iterations.
    if samples or step == 0:
        log_metrics(run_id, {f"eval_at_samples/{k.removeprefix('eval/')}": v for k, v in metrics.items()}, samples)
    log_metrics(run_id, {f"eval_at_generated/{k.removeprefix('eval/')}": v for k, v in metrics.items()}, generated)
    tracking.set_tags(workspace(), run_id, {"eval_feedback_source": source.value})
    if bank is not None:
        log_metrics(run_id, _bank_point(cfg_d, base, bank, critic=critic, run=run, at=at), step)
    return metrics


def _bank_point(cfg_d, base, bank, *, critic, run: RunIdentity, at: StepContext) -> dict:
    """The critic's attempt bank at an evaluation: the method's critic's feedback (sampled now), the frozen base
    critic's (sampled once per bank), their rows stored; returns their `bank_<split>/*` metrics."""
    method = score_bank(cfg_d, base, bank, critic, seed=at.seed, step=at.step, out_dir=at.out_dir)
    frozen = frozen_bank(cfg_d, base, bank, at.seed)
    return store_bank(run, at.step, bank, method, frozen)
