"""Held-out evaluation under named protocols, each number reported with its protocol's name. The protocols:

- `single`:        the actor alone; pass@1 = mean over problems of (correct samples / samples).
- `single_greedy`: the actor alone, one greedy answer (temperature 0) per problem, on its own decode (not one of
                   `single`'s samples): the accuracy of the actor's most likely answer, beside `single`'s at the
                   evaluation temperature. Training runs it where `generation.eval_greedy` says (`greedy_evaluated`;
                   by default on the synthetic task only).
- `feedback`:      actor → feedback → actor; the refined answer counts. Unassisted: the critic sees the problem and
                   the attempt only, nothing from the verifier (for code: no execution result either).
- `feedback_exec`: code benchmarks only (MBPP): as `feedback`, but the critic's prompt also holds the execution
                   result of the attempt on the benchmark's asserts, i.e. on the very tests that grade the answer
                   (verifier-assisted: the critic is told whether, and how, the graded tests failed). This is the
                   feedback the critic is trained with on MBPP (the method's environment feedback).
- `gated`:         verifier-gated, up to K rounds (oracle-assisted: the verifier decides who gets another round,
                   as in the authors' precursor scripts); a sample counts if any of its turns is correct. Round 1
                   reuses the `feedback` protocol's feedback and refinement for the attempts that failed.
- `gated_exec`:    code only: `gated` with the `feedback_exec` critic prompts (round 1 reuses `feedback_exec`).
- `feedback_frozen`: as `feedback` on the same first attempts, but the feedback is the frozen base critic's (no
                   adapter), whatever the method's own source: run for methods that train their critic, so the
                   trained and the frozen critic are scored on the same actor's attempts (a study's H3).
- `bank`, `bank_frozen`: the critic alone, on a fixed attempt bank (binac_core/rl/bank.py; `bank.enabled`, the
                   synthetic task, methods that train their critic): the base actor's attempts at held-out
                   problems, sampled once per base and stored, `bank.right` right and `bank.wrong` wrong ones in
                   each of two splits (`val` for choices, `eval` for results). Every evaluation gives one
                   feedback per bank attempt from the method's critic (`bank`) beside the frozen base critic's
                   (`bank_frozen`, computed once per bank); no refinement. Measures, each with a 95 % interval
                   (binac_core/reports/bank_measures.py): first-error hits, false alarm, approves wrong, approves
                   right, verdict balanced accuracy, as `bank_<split>/critic_<measure>` and
                   `bank_<split>/frozen_critic_<measure>` (and `_lo`, `_hi`). Not an `acc_*` metric: the actor's
                   accuracy is not measured on the bank.

Metrics: `acc_single`, `acc_single_greedy`, `acc_feedback`, `acc_feedback_exec`, `acc_gated_k{K}`,
`acc_gated_exec_k{K}`, `acc_feedback_frozen` (the bank's metrics: above). The protocols are the members of `EvalProtocol`
(binac_core/rl/kinds.py), whose values are these names.

Feedback source (`binac_core.rl.kinds.FeedbackSource`): every method is evaluated with the feedback it was
trained with (`MethodSpec.eval_feedback`): its own critic adapter, the frozen initial critic (fixed_critic, and
grpo, which trains no critic), the self-correction baseline's fixed instruction (no critic, so no `_exec`
variants) or the synthetic task's oracle.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from binac_core import benchmarks
from binac_core.errors import BinacError
from binac_core.foundation.files import StageFile, read_json
from binac_core.foundation.stats import mean as _mean
from binac_core.model.generation import AdapterRef, GenerationBackend, SamplingParams
from binac_core.model.stage_io import ScoredBatch
from binac_core.rl.episodes import (
    generate_attempts,
    generate_refinements,
    sample_feedback,
    score_with_errors,
    stage_seed,
)
from binac_core.rl.kinds import EvalProtocol
from binac_core.rl.methods import FeedbackSource

SINGLE, GREEDY, FEEDBACK, GATED, FROZEN = (
    EvalProtocol.SINGLE,
    EvalProtocol.SINGLE_GREEDY,
    EvalProtocol.FEEDBACK,
    EvalProtocol.GATED,
    EvalProtocol.FEEDBACK_FROZEN,
)
"""The protocols this module names most (its docstring describes each)."""
PROTOCOL_STAGES = {SINGLE: (SINGLE,), FEEDBACK: (SINGLE, FEEDBACK), GATED: (SINGLE, FEEDBACK, GATED)}
"""`binac evaluate --protocol`: the stages each one runs."""
FEEDBACK_PROTOCOLS = (FEEDBACK, GATED)
EXEC_PROTOCOLS = (EvalProtocol.FEEDBACK_EXEC, EvalProtocol.GATED_EXEC)
"""The execution-assisted variants of `FEEDBACK_PROTOCOLS`, in the same order."""
ROUND_PROTOCOLS = (GREEDY, *FEEDBACK_PROTOCOLS, *EXEC_PROTOCOLS, FROZEN)
"""The protocols with rounds of their own in an `Evaluation` (beside `single`'s first attempts)."""
GATED_PROTOCOLS = (GATED, EvalProtocol.GATED_EXEC)
"""The protocols whose rounds are a list (up to K), the others' one `ScoredBatch`."""
BANK_PROTOCOLS = (EvalProtocol.BANK, EvalProtocol.BANK_FROZEN)
"""The attempt bank's protocols: scored by binac_core/rl/bank.py, not by `evaluate_protocols`."""
GREEDY_BY_DEFAULT = ("synthetic",)
"""The benchmarks whose training evaluates `single_greedy` when `generation.eval_greedy` is None."""


def greedy_evaluated(eval_greedy: bool | None, benchmark: str) -> bool:
    """Whether training evaluates `single_greedy`: the config's `generation.eval_greedy`, or where it is None,
    whether `benchmark` is one of `GREEDY_BY_DEFAULT`."""
    return benchmark in GREEDY_BY_DEFAULT if eval_greedy is None else eval_greedy


def training_protocols(
    benchmark: str, source: FeedbackSource, trains_critic: bool = False, greedy: bool = False
) -> tuple[EvalProtocol, ...]:
    """The protocols training evaluates: all of them, with the `_exec` variants where they exist (a code
    benchmark and a critic), `feedback_frozen` for a method that trains its critic, and `single_greedy` with
    `greedy` (`greedy_evaluated`)."""
    base = (SINGLE, *((GREEDY,) if greedy else ()), *FEEDBACK_PROTOCOLS)
    exec_too = benchmarks.get(benchmark).critic_sees_execution and source.sampled
    return base + (EXEC_PROTOCOLS if exec_too else ()) + ((FROZEN,) if trains_critic else ())


def check_protocols(
    benchmark: str, protocols: tuple[str, ...], source: FeedbackSource = FeedbackSource.CRITIC_BASE
) -> None:
    known = tuple(p for p in EvalProtocol if p not in BANK_PROTOCOLS)
    bad = [p for p in protocols if p not in known]
    if bad:
        raise BinacError(f"unknown protocol {bad[0]!r} (known: {', '.join(known)})")
    if set(EXEC_PROTOCOLS) & set(protocols):
        if not benchmarks.get(benchmark).critic_sees_execution:
            code = benchmarks.names(having=lambda b: b.critic_sees_execution)
            raise BinacError(
                f"the execution-assisted protocols need a code benchmark ({', '.join(code)});"
                f" {benchmark!r} has no execution result to show the critic"
            )
        if not source.sampled:
            raise BinacError(f"the execution-assisted protocols need a critic; the {source.label} sees nothing")


FEEDBACK_CHOICES = ("critic", "fixed")
"""`binac evaluate --feedback`: a critic's (the base model's or `--critic-adapter`'s) or the fixed instruction."""


def eval_stages(
    benchmark: str,
    protocol: str,
    critic_sees_execution: bool = False,
    feedback: str = "critic",
    critic_source: FeedbackSource = FeedbackSource.CRITIC_BASE,
):
    """`binac evaluate`'s choices as (stages to run, the reported protocol name, the feedback source: `FIXED` or a
    critic's, `critic_source`); validated before any compute. `critic_sees_execution` turns feedback/gated into
    feedback_exec/gated_exec."""
    sources = dict(zip(FEEDBACK_CHOICES, (critic_source, FeedbackSource.FIXED), strict=True))
    if feedback not in sources:
        raise BinacError(f"--feedback must be {' or '.join(FEEDBACK_CHOICES)} (got {feedback!r})")
    if protocol not in PROTOCOL_STAGES:
        raise BinacError(f"unknown protocol {protocol!r} (known: {', '.join(PROTOCOL_STAGES)})")
    stages = PROTOCOL_STAGES[protocol]
    if critic_sees_execution:
        exec_of = dict(zip(FEEDBACK_PROTOCOLS, EXEC_PROTOCOLS, strict=True))
        stages = tuple(exec_of.get(s, s) for s in stages)
    source = sources[feedback]
    check_protocols(benchmark, stages, source)
    return stages, stages[-1], source


@dataclass(frozen=True)
class Evaluation:
    """An evaluation's result: the `acc_*` metrics, the feedback source, and each protocol's scored rounds: the
    first attempts (`single`, always), the greedy answers (`single_greedy`), the `feedback` round and the `gated`
    rounds (and their `_exec` variants) where computed. In JSON: {"metrics", "feedback_source", "single", and the
    protocols computed}."""

    metrics: dict[str, float]
    feedback_source: FeedbackSource
    single: ScoredBatch
    feedback: ScoredBatch | None = None
    gated: list[ScoredBatch] | None = None
    feedback_exec: ScoredBatch | None = None
    gated_exec: list[ScoredBatch] | None = None
    feedback_frozen: ScoredBatch | None = None
    single_greedy: ScoredBatch | None = None

    def rounds(self, protocol: EvalProtocol) -> list[ScoredBatch] | None:
        """A feedback protocol's rounds (one for `feedback`, up to K for `gated`), None where not computed."""
        found = getattr(self, protocol)
        return [found] if isinstance(found, ScoredBatch) else found

    def to_json(self) -> dict:
        out = {"metrics": self.metrics, "feedback_source": self.feedback_source.value, "single": self.single.to_json()}
        for protocol in ROUND_PROTOCOLS:
            found = getattr(self, protocol)
            if found is not None:
                out[protocol] = found.to_json() if isinstance(found, ScoredBatch) else [r.to_json() for r in found]
        return out

    @classmethod
    def from_json(cls, d: dict) -> Evaluation:
        rounds = {
            p.value: [ScoredBatch.from_json(r) for r in d[p]] if p in GATED_PROTOCOLS else ScoredBatch.from_json(d[p])
            for p in ROUND_PROTOCOLS
            if p in d
        }
        source = FeedbackSource.parse(d["feedback_source"])
        return cls(d["metrics"], source, ScoredBatch.from_json(d[SINGLE]), **rounds)


def read_evaluation(file: StageFile) -> Evaluation:
    """The `Evaluation` an evaluation stage wrote (`binac_core.rl.eval_stage`)."""
    return Evaluation.from_json(read_json(file))


def evaluate_protocols(
    backend: GenerationBackend,
    benchmark: str,
    problems: list[dict],
    *,
    actor: AdapterRef | None,
    critic: AdapterRef | None,
    samples: int,
    gen: dict,
    seed: int,
    step: int,
    protocols: tuple[EvalProtocol, ...],
    gated_k: int = 2,
    source: FeedbackSource = FeedbackSource.CRITIC_BASE,
    verdict: bool = False,
) -> Evaluation:
    """The protocols asked for, on `samples` attempts per problem of `actor`, with feedback from `source` (a
    critic's: `critic`'s adapter, None for the base model); `verdict`: the critic is asked for a verdict line
    (`critic.verdict`). `single_greedy` decodes one more answer per problem at temperature 0, whatever `gen`'s
    temperature and `samples`; the feedback protocols never see it."""
    check_protocols(benchmark, protocols, source)
    by_id = {r["id"]: r for r in problems}

    def params(name: str, max_new: int) -> SamplingParams:
        return SamplingParams(max_new, gen["temperature"], gen["top_p"], stage_seed(seed, step, "eval", name))

    def feedback_round(scored: ScoredBatch, shown: list[str | None] | None, rnd: int | str, frozen: bool = False):
        """Round `rnd` on `scored`'s attempts: one feedback each (the critic shown `shown`, execution results, or
        nothing; with `frozen`, the base model's critic role instead of the method's source), the refinements and
        their scores; returns (the scored round, the refinements' execution results or None)."""
        fb = sample_feedback(
            backend,
            benchmark,
            by_id,
            scored.attempts,
            FeedbackSource.CRITIC_BASE if frozen else source,
            None if frozen else critic,
            1,
            params(f"z{rnd}", gen["feedback_max_new_tokens"]),
            execution_results=shown,
            verdict=verdict,
        )
        refined = generate_refinements(
            backend, benchmark, by_id, scored.attempts, fb, actor, params(f"y{rnd}", gen["max_new_tokens"])
        )
        scores = score_with_errors(benchmark, by_id, refined)
        done = replace(scored, feedback=fb, refined=refined, refined_rewards=scores.rewards)
        return done, scores.execution_results

    attempts = generate_attempts(backend, benchmark, problems, actor, samples, params("y0", gen["max_new_tokens"]))
    first = score_with_errors(benchmark, by_id, attempts)
    single, metrics, rounds = ScoredBatch(attempts, first.rewards), {}, {}
    if SINGLE in protocols:
        metrics[f"acc_{SINGLE}"] = _mean(first.rewards)
    if GREEDY in protocols:
        greedy_seed = stage_seed(seed, step, "eval", "greedy")
        rounds[GREEDY] = _greedy(backend, benchmark, problems, actor, gen, greedy_seed)
        metrics[f"acc_{GREEDY}"] = _mean(rounds[GREEDY].first_rewards)
    for feedback, gated in (FEEDBACK_PROTOCOLS, EXEC_PROTOCOLS):
        if not {feedback, gated} & set(protocols):
            continue
        show_exec = feedback is EvalProtocol.FEEDBACK_EXEC  # the critic is shown the graded tests' execution result
        one, results = feedback_round(single, first.execution_results if show_exec else None, 1)
        rounds[feedback] = one
        if feedback in protocols:
            metrics[f"acc_{feedback}"] = _mean(one.refined_rewards)
        if gated in protocols:
            rounds[gated], metrics[f"acc_{gated}_k{gated_k}"] = _gated(
                one, results if show_exec else None, gated_k, feedback_round
            )
    if FROZEN in protocols:
        rounds[FROZEN], _ = feedback_round(single, None, "frozen", frozen=True)
        metrics[f"acc_{FROZEN}"] = _mean(rounds[FROZEN].refined_rewards)
    return Evaluation(metrics, source, single, **{p.value: r for p, r in rounds.items()})


def _greedy(
    backend: GenerationBackend, benchmark: str, problems: list[dict], actor: AdapterRef | None, gen: dict, seed: int
) -> ScoredBatch:
    """One greedy answer (temperature 0) of `actor` per problem, scored. The seed is passed on but a greedy
    decode draws nothing from it."""
    params = SamplingParams(gen["max_new_tokens"], 0.0, gen["top_p"], seed)
    attempts = generate_attempts(backend, benchmark, problems, actor, 1, params)
    by_id = {r["id"]: r for r in problems}
    return ScoredBatch(attempts, score_with_errors(benchmark, by_id, attempts).rewards)


def _gated(first: ScoredBatch, shown: list[str | None] | None, k: int, feedback_round):
    """Up to `k` rounds; returns (the rounds, the share of samples solved at any turn). Round 1 is `first` (the
    feedback protocol's round) on the attempts that failed; each later round critiques the latest (still wrong)
    answer of the samples not yet solved (`feedback_round`). `shown`: the execution results of `first`'s
    refinements, shown to the critic from round 2 on (None: an unassisted critic)."""
    show_exec = shown is not None
    solved = {(a.problem_id, a.sample_idx): r > 0 for a, r in zip(first.attempts, first.first_rewards, strict=True)}
    failed = [i for i, a in enumerate(first.attempts) if not solved[(a.problem_id, a.sample_idx)]]
    done = ScoredBatch(
        *(
            [column[i] for i in failed]
            for column in (first.attempts, first.first_rewards, first.feedback, first.refined, first.refined_rewards)
        )
    )
    results = [shown[i] for i in failed] if show_exec else None
    rounds, pending, pending_shown = [], None, None
    for rnd in range(1, k + 1):
        if rnd > 1:
            if not pending.attempts:
                break
            done, results = feedback_round(pending, pending_shown, rnd)
            results = results if show_exec else None
        rounds.append(done)
        for y, r in zip(done.refined, done.refined_rewards, strict=True):
            if r > 0:
                solved[(y.problem_id, y.sample_idx)] = True
        # The next round critiques the latest (still wrong) answer, keeping the sample's identity.
        keep = [i for i, y in enumerate(done.refined) if not solved[(y.problem_id, y.sample_idx)]]
        pending = ScoredBatch(
            [replace(done.attempts[i], text=done.refined[i].text, token_ids=done.refined[i].token_ids) for i in keep],
            [done.refined_rewards[i] for i in keep],
        )
        pending_shown = [results[i] for i in keep] if results is not None else None  # the errors of the answers kept
    return rounds, _mean([float(v) for v in solved.values()])
