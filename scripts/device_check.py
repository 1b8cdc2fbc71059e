"""The training loop on a real accelerator, in one command: binac's CUDA path (the GPU presets' bf16, activation
checkpointing, transformers' `generate` as `generation.backend: hf`, the decode loop and fused LoRA in float32) on a
Llama-3.2-1B-shaped model with random weights, built where it runs (no model hub, no vLLM).

    python scripts/device_check.py --out DIR [--device cuda | --cpu] [--parts loop,logprobs,speed,placement]
                                   [--work DIR] [--budget-s S]

Four parts, each in a child process of its own process group (`binac_core.runs.process_group`) under its own time
budget, each writing its results (or its error, with the traceback) into DIR/<part>/result.json as it goes; a part
that fails or runs out of time is reported and the next one runs:

1. `loop`: one `binac` and one `grpo` iteration of `binac_core.rl.loop.iteration` on the synthetic task at
   `llama1b-math`'s settings (or the largest answer length that fits the part's budget at the measured decode
   speed, stated); seconds per phase, tokens/s of each generation stage, and the peak device memory of each
   adapter update (`torch.cuda.max_memory_allocated`) against `scripts/gpu_memory.py`'s count for the update's
   largest micro-batch; first, the same for one actor update on random tokens at the longest micro-batch of the
   memory table in docs/gpu.md (32 sequences at llama1b-math's `max_model_len`, 3072 tokens), the adapter put back
   afterwards.
2. `logprobs`: the samplers against the trainer's recomputation of the same tokens (`update.sequence_logprobs`),
   judged by `binac_core.model.logprob_check` with its tolerances: the decode loop in float32, transformers'
   `generate` in bfloat16 (the GPU presets' path); greedy completions of the decode loop against `generate`'s
   (reported, not gated).
3. `speed`: tokens/s of the decode loop (float32) and of `generate` (float32, bfloat16) at batch 1 / 32 / 64, the
   actor adapter active.
4. `placement`: where things run (docs/gpu.md, "The first GPU session"): `model.device: cpu` keeps a policy on the
   CPU beside a GPU; a process started with `CUDA_VISIBLE_DEVICES=<i>` (as `BINAC_GPUS` starts each worker) sees
   that device alone, each its own (at least two devices needed; else reported, not gated); and where vLLM is
   installed, its sleep mode at the preset's engine settings on the random model: device memory returned by a
   sleep, the time of a wake, and the same greedy tokens before and after it (gated).

`--cpu`: the same parts at a tiny shape (hidden 64, vocabulary 512) in float32, seconds a part; a test runs it.
Output: DIR/results.json and DIR/results.md, a summary on stdout; DIR/<part>/log.txt each child's output. Exit codes
(`logprob_check`): 0 every part ran and every gated row passed, 1 a gated row failed, 2 a part raised or timed out,
3 no CUDA device for `--device cuda` (one line).

What it does not do: download anything, run Prefect, MLflow or DuckDB (none is imported) or vLLM beyond the
placement part's sleep check (only where it is installed), measure a real
model's accuracy (the weights are random), or gate on memory or speed (reported beside the counts). Its model, up to
a few GiB, goes into `--work` (default: the system's temporary folder on CUDA, DIR/work on CPU), never into DIR's
results. docs/gpu.md, "The device check", says how to run it on a lent device.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from unittest import mock

REPO = Path(__file__).resolve().parents[1]
for _path in (REPO, REPO / "scripts"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import gpu_memory as gm  # noqa: E402 (scripts/ on sys.path)
from gpu_check import write_json  # noqa: E402 (the same JSON writer as the vLLM check)

from binac_core.model.logprob_check import (  # noqa: E402
    EXIT_ERROR,
    EXIT_FAIL,
    EXIT_PASS,
    EXIT_UNAVAILABLE,
    compare_logprobs,
    judge,
    mean_abs_difference,
    overall_status,
    prefix_agreement,
    tolerance_for,
)
from binac_core.runs.process_group import start_in_group, stop_group  # noqa: E402

PARTS = ("loop", "logprobs", "speed", "placement")
PRESET = "llama1b-math"
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "PYTHONUNBUFFERED": "1",
}
ROPE = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "factor": 32.0,
    "high_freq_factor": 4.0,
    "low_freq_factor": 1.0,
    "original_max_position_embeddings": 8192,
}
"""Llama-3.2-1B-Instruct's config.json: its RoPE (a static one the decode loop supports)."""
CONTEXT = 131072
"""Llama-3.2-1B-Instruct's `max_position_embeddings`."""
TOKENIZER_VOCAB = 256
"""The project tokenizer's target size (the tiny preset's); its ids are a subset of the model's vocabulary."""


def say(message: str) -> None:
    print(f"device_check: {message}", flush=True)


# --------------------------------------------------------------------------- modes


@dataclass(frozen=True)
class MicroBatch:
    """An update's largest micro-batch: sequences, their padded length, their completion tokens."""

    sequences: int
    length: int
    completion_tokens: int


@dataclass(frozen=True)
class Mode:
    """The sizes of one run of the check: `cuda` (the real shape) or `cpu` (a tiny one, for tests)."""

    name: str
    shape: gm.Shape
    """the random model's shape (`params` 0: counted once built)"""
    loop_dtype: str
    half_dtype: str
    """the dtype of the GPU presets' rows (`generate` in bfloat16); float32 on CPU, where bf16 kernels say nothing
    about a GPU's"""
    lengths: tuple[int, ...]
    """answer lengths the loop may run at, longest first (feedback: half); the longest that fits is taken"""
    batch_problems: int
    """problems of the loop's iterations"""
    probe_tokens: int
    """decode steps timed to choose the answer length"""
    logprob_prompts: int
    logprob_tokens: int
    """prompts and new tokens of each log-prob row"""
    speed_batches: tuple[int, ...]
    speed_tokens: int
    """batch sizes and new tokens of the speed rows"""
    single_prompts: int
    """prompts timed one at a time for batch 1"""
    longest: MicroBatch
    """the micro-batch of the memory table in docs/gpu.md (`gpu_memory.budget`'s longest refinements), updated once
    on random tokens"""
    budgets: tuple[tuple[str, float], ...]
    """seconds per part"""
    budget_s: float
    """the whole check"""

    def budget(self, part: str) -> float:
        return dict(self.budgets)[part]


LLAMA_1B = next(s for s in gm.MODELS if s.name == "Llama-3.2-1B")
CUDA = Mode(
    "cuda",
    LLAMA_1B,
    "bfloat16",
    "bfloat16",
    lengths=(1024, 512, 256, 128),
    batch_problems=4,
    probe_tokens=32,
    logprob_prompts=32,
    logprob_tokens=128,
    speed_batches=(1, 32, 64),
    speed_tokens=128,
    single_prompts=1,
    longest=MicroBatch(32, 2048 + 1024, 32 * 1024),
    budgets=(("loop", 140.0), ("logprobs", 60.0), ("speed", 65.0), ("placement", 120.0)),
    budget_s=400.0,
)
CPU = Mode(
    "cpu",
    gm.Shape("tiny Llama", 0, 64, 2, 4, 2, 16, 128, 512),
    "float32",
    "float32",
    lengths=(16,),
    batch_problems=2,
    probe_tokens=4,
    logprob_prompts=8,
    logprob_tokens=16,
    speed_batches=(1, 4, 8),
    speed_tokens=16,
    single_prompts=2,
    longest=MicroBatch(32, 48 + 16, 32 * 16),
    budgets=(("loop", 300.0), ("logprobs", 150.0), ("speed", 150.0), ("placement", 120.0)),
    budget_s=1000.0,
)
MODES = {"cuda": CUDA, "cpu": CPU}


@dataclass(frozen=True)
class PartContext:
    """What a part's child process is given."""

    mode: Mode
    out: Path
    """the part's own folder"""
    work: Path
    """the model and adapters"""
    deadline: float
    """time.time() by which the parent stops the part"""
    inject_failure: bool

    @property
    def device(self) -> str:
        return self.mode.name


# --------------------------------------------------------------------------- the random model


@dataclass(frozen=True)
class ModelInfo:
    """The random-weight model a part runs on."""

    folder: str
    shape: gm.Shape
    """with the built model's parameter count (tied embeddings once)"""
    tokenizer_ids: int
    saved_dtype: str
    build_s: float | None
    """None: an earlier run's model was reused"""


def project_tokenizer():
    """The tiny presets' tokenizer (`binac_core.model.tokenizer`), trained on the project's teacher corpus."""
    from binac_core.foundation.config import TaskConfig
    from binac_core.model.pretrain import teacher_corpus
    from binac_core.model.tokenizer import train_tokenizer

    texts = [m["content"] for conversation in teacher_corpus(TaskConfig(), 400) for m in conversation]
    return train_tokenizer(texts, TOKENIZER_VOCAB)


def llama_config(shape: gm.Shape, tok):
    """A Llama config of `shape` (Llama-3.2-1B's RoPE, norm and tied embeddings) with the tokenizer's specials."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=shape.vocab,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        head_dim=shape.head_dim,
        max_position_embeddings=CONTEXT,
        rope_parameters=dict(ROPE),
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )


def ensure_model(mode: Mode, work: Path) -> ModelInfo:
    """The random-weight model of `mode` in `work/model-<mode>` (tokenizer, weights in the loop's dtype,
    `meta.json`), built on the device unless a model of the same shape is there already."""
    import torch
    from transformers import LlamaForCausalLM

    folder = work / f"model-{mode.name}"
    meta_file = folder / "meta.json"
    wanted = {k: v for k, v in asdict(mode.shape).items() if k != "params"}
    if meta_file.is_file():
        meta = json.loads(meta_file.read_text())
        if {k: v for k, v in meta["shape"].items() if k != "params"} == wanted:
            return ModelInfo(str(folder), gm.Shape(**meta["shape"]), meta["tokenizer_ids"], meta["saved_dtype"], None)
    t0 = time.perf_counter()
    tok = project_tokenizer()
    torch.manual_seed(0)
    with torch.device("cuda" if mode.name == "cuda" else "cpu"):  # initialised where it is fast
        model = LlamaForCausalLM(llama_config(mode.shape, tok))
    model.to(getattr(torch, mode.loop_dtype)).to("cpu")
    shape = replace(mode.shape, params=sum(p.numel() for p in model.parameters()))
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    del model
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    info = ModelInfo(str(folder), shape, len(tok), mode.loop_dtype, round(time.perf_counter() - t0, 2))
    meta_file.write_text(json.dumps(asdict(info), indent=1))
    return info


def policy_config(mode: Mode, model_dir: str, dtype: str, answer: int):
    """`llama1b-math` on the synthetic task with `generation.backend: hf`, `dtype`, answers of `answer` tokens
    (feedback half), `mode.batch_problems` problems, and `train.critic_kl_coef` = `train.kl_coef` (`DEVIATIONS`)."""
    from binac_core.foundation.config import load_config

    preset = load_config(PRESET)
    return load_config(
        PRESET,
        {
            "model.hub_id": model_dir,
            "model.dtype": dtype,
            "task.benchmark": "synthetic",
            "task.n_train": 256,
            "generation.backend": "hf",
            "generation.max_new_tokens": answer,
            "generation.feedback_max_new_tokens": max(1, answer // 2),
            "train.batch_problems": mode.batch_problems,
            "train.critic_kl_coef": preset.train.kl_coef,
        },
    )


DEVIATIONS = (
    "task.benchmark synthetic (no data set on the device); generation.backend hf (no vLLM there)",
    "train.batch_problems {batch} (preset 32): {attempts} attempts instead of 256, the preset's batch at its lengths "
    "taking several times the part's budget; the updates' micro-batches are the preset's ({micro_batch} sequences)",
    "train.critic_kl_coef {kl} (preset 0): with random weights every feedback earns the same reward, and a batch "
    "without signal takes no optimizer step (`update.zero_signal`); the KL term makes the critic's update run",
)


# --------------------------------------------------------------------------- part 1: the loop


def largest_micro_batch(samples, size: int) -> MicroBatch:
    """The micro-batch of `update.policy_update` (`size` sequences of `samples` with tokens, in order) with the
    most padded tokens."""
    kept = [s for s in samples if s.token_ids]
    best = MicroBatch(0, 0, 0)
    for i in range(0, len(kept), size):
        chunk = kept[i : i + size]
        mb = MicroBatch(
            len(chunk), max(len(s.prompt_ids) + len(s.token_ids) for s in chunk), sum(len(s.token_ids) for s in chunk)
        )
        if mb.sequences * mb.length > best.sequences * best.length:
            best = mb
    return best


@dataclass(frozen=True)
class GenerationStat:
    """One generate call of an iteration."""

    stage: str
    prompts: int
    tokens: int
    seconds: float
    tokens_per_s: float


@dataclass(frozen=True)
class UpdateStat:
    """One adapter update of an iteration (`update.AdapterUpdate`'s statistics, its time and memory)."""

    adapter: str
    seconds: float
    micro_batch: MicroBatch
    peak_bytes: int | None
    """`torch.cuda.max_memory_allocated()` over the update (weights included); None on CPU"""
    peak_reserved_bytes: int | None
    """`torch.cuda.max_memory_reserved()`: what the caching allocator held (slack included)"""
    allocated_before_bytes: int | None
    loss: float
    kl: float
    tokens: float
    skipped_steps: float


@dataclass
class Recorder:
    """What one instrumented iteration spent, by phase, and its generation and update statistics."""

    cuda: bool
    stages: dict[int, str]
    """sampling seed -> stage name (`episodes.stage_seed`)"""
    seconds: dict[str, float] = field(default_factory=dict)
    generations: list[GenerationStat] = field(default_factory=list)
    updates: list[UpdateStat] = field(default_factory=list)

    def add(self, phase: str, seconds: float) -> None:
        self.seconds[phase] = round(self.seconds.get(phase, 0.0) + seconds, 4)


def _sync(cuda: bool) -> None:
    if cuda:
        import torch

        torch.cuda.synchronize()


class TimedBackend:
    """A generation backend that records each call's stage, tokens and seconds in a `Recorder`."""

    def __init__(self, inner, rec: Recorder):
        self.inner, self.rec = inner, rec

    def generate(self, prompts, adapter, params):
        t0 = time.perf_counter()
        gens = self.inner.generate(prompts, adapter, params)
        seconds = time.perf_counter() - t0
        stage = self.rec.stages.get(params.seed, "other generation")
        tokens = sum(len(g.token_ids) for g in gens)
        self.rec.add(stage, seconds)
        self.rec.generations.append(
            GenerationStat(
                stage, len(prompts), tokens, round(seconds, 4), round(tokens / seconds, 1) if seconds > 0 else math.nan
            )
        )
        return gens


def timed_update(rec: Recorder, update_adapter: Callable) -> Callable:
    """`update.update_adapter` recording its seconds, largest micro-batch and (CUDA) peak memory."""

    def run(policy, adapter, samples, settings, folder):
        import torch

        mb = largest_micro_batch(samples, settings.micro_batch_size)
        before = None
        if rec.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
        t0 = time.perf_counter()
        upd = update_adapter(policy, adapter, samples, settings, folder)
        _sync(rec.cuda)
        seconds = time.perf_counter() - t0
        peak = torch.cuda.max_memory_allocated() if rec.cuda else None
        reserved = torch.cuda.max_memory_reserved() if rec.cuda else None
        rec.add(f"{adapter.name} update", seconds)
        rec.updates.append(
            UpdateStat(
                adapter.name,
                round(seconds, 3),
                mb,
                peak,
                reserved,
                before,
                upd.loss,
                upd.kl,
                upd.tokens,
                upd.skipped_steps,
            )
        )
        return upd

    return run


def timed(rec: Recorder, phase: str, fn: Callable) -> Callable:
    """`fn`, its seconds added to `phase` in `rec`."""

    def run(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            rec.add(phase, time.perf_counter() - t0)

    return run


@contextlib.contextmanager
def instrumented(rec: Recorder) -> Iterator[None]:
    """The stage functions' calls (scoring, critic rewards, updates; `binac_core.rl.stage_functions`) timed into
    `rec` within the block; generation is timed by `TimedBackend`. The loop itself is unchanged."""
    from binac_core.rl import stage_functions as stages

    with (
        mock.patch.object(stages, "update_adapter", timed_update(rec, stages.update_adapter)),
        mock.patch.object(stages, "score_with_errors", timed(rec, "score", stages.score_with_errors)),
        mock.patch.object(stages, "critic_reward", timed(rec, "critic reward", stages.critic_reward)),
    ):
        yield


def run_iteration(method: str, policy, backend, cfg, rows, actor, critic, cuda: bool):
    """One `loop.iteration` of `method` (seed 0, step 1), instrumented; (its result, its `Recorder`, seconds)."""
    from binac_core.rl.episodes import stage_seed
    from binac_core.rl.loop import iteration
    from binac_core.rl.methods import method_spec

    stages = {stage_seed(0, 1, s): s for s in ("attempts", "feedback", "refined", "lookahead")}
    rec = Recorder(cuda, stages)
    _sync(cuda)
    t0 = time.perf_counter()
    with instrumented(rec):
        res = iteration(policy, TimedBackend(backend, rec), cfg, method_spec(method), rows, 0, 1, actor, critic)
    _sync(cuda)
    return res, rec, time.perf_counter() - t0


def predicted_memory(info: ModelInfo, cfg, mb: MicroBatch, per_token: int) -> dict:
    """`gpu_memory.trainer_parts` for this micro-batch (bytes by part, and their total)."""
    parts = gm.trainer_parts(
        info.shape,
        cfg.lora.rank,
        mb.sequences,
        mb.length,
        mb.completion_tokens,
        e=_bytes(cfg.model.dtype),
        checkpointing=cfg.train.activation_checkpointing,
        dtype=cfg.model.dtype,
        per_token=per_token,
    )
    return {**parts, "total": sum(parts.values())}


def _bytes(dtype: str) -> int:
    return 4 if dtype == "float32" else 2


def iteration_summary(method: str, res, rec: Recorder, wall: float, info: ModelInfo, cfg, per_token: int) -> dict:
    """The results of one iteration: seconds per phase, generation per stage, and each update's memory."""
    phases = dict(rec.seconds)
    phases["other"] = round(max(0.0, wall - sum(phases.values())), 4)
    updates = [update_summary(u, info, cfg, per_token, rec.cuda) for u in rec.updates]
    return {
        "method": method,
        "wall_s": round(wall, 3),
        "phases_s": phases,
        "generation": [asdict(g) for g in rec.generations],
        "updates": updates,
        "rewards": {
            "first_mean": _mean(res.first_rewards.rewards),
            "refined_mean": _mean(res.refined_rewards and res.refined_rewards.rewards),
            "critic_mean": _mean(res.critic_rewards),
        },
    }


def update_summary(u: UpdateStat, info: ModelInfo, cfg, per_token: int, cuda: bool) -> dict:
    """An update's statistics beside `gpu_memory`'s count for its largest micro-batch."""
    predicted = predicted_memory(info, cfg, u.micro_batch, per_token)
    ratio = u.peak_bytes / predicted["total"] if u.peak_bytes else None
    return {
        **asdict(u),
        "predicted_bytes": predicted,
        "measured_over_predicted": ratio,
        "peak_note": None if cuda else "not measured on CPU (CUDA memory statistics only)",
    }


def longest_update(setup: LoopSetup, mode: Mode, cuda: bool) -> dict:
    """One actor update as the loop makes it (`update.update_adapter`, the preset's micro-batch, KL term and
    activation checkpointing) on `mode.longest`: random token ids, advantages 0. The adapter and its optimizer are
    put back as they were, so the iterations start from fresh adapters."""
    import torch
    from peft import set_peft_model_state_dict

    from binac_core.rl.update import Sample, UpdateSettings, update_adapter

    mb, policy = mode.longest, setup.policy
    answer = mb.completion_tokens // mb.sequences
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, setup.info.shape.vocab, (mb.sequences, mb.length), generator=gen).tolist()
    samples = [Sample(row[: mb.length - answer], row[mb.length - answer :], [0.0] * answer, 0.0) for row in ids]
    rec = Recorder(cuda, {})
    before = policy.adapter_state("actor")
    timed_update(rec, update_adapter)(
        policy, policy.hold("actor"), samples, UpdateSettings.of(setup.cfg, "actor", passes=1), None
    )
    set_peft_model_state_dict(policy.model, before, adapter_name="actor")
    policy.optimizers.pop("actor", None)
    return update_summary(rec.updates[0], setup.info, setup.cfg, setup.per_token, cuda)


def _mean(values) -> float | None:
    return sum(values) / len(values) if values else None


@dataclass(frozen=True)
class LengthChoice:
    """The loop's answer and feedback lengths, and why (`choose_length`)."""

    answer: int
    feedback: int
    decode_step_s: float
    left_s: float
    reason: str


STEPS_PER_ANSWER = 4.5
"""Decode steps of the two iterations per answer token: binac's attempts, refinements and look-ahead (3) and
feedback (0.5), grpo's attempts (1)."""
SAFETY = 1.5
"""Margin on the probed step time (longer contexts, prefill, the updates' share)."""


def choose_length(lengths: tuple[int, ...], step_s: float, left_s: float) -> LengthChoice:
    """The longest of `lengths` whose decode steps, at `step_s` each with the `SAFETY` margin, fit in 3/4 of
    `left_s` (the rest for updates and scoring); the shortest when none does."""
    for n in lengths:
        need = STEPS_PER_ANSWER * n * step_s * SAFETY
        if need <= 0.75 * left_s:
            why = "the preset's" if n == lengths[0] else f"the longest that fits (the preset's {lengths[0]} does not)"
            return LengthChoice(
                n, max(1, n // 2), step_s, left_s, f"{why}: ~{need:.0f} s of decoding estimated, {left_s:.0f} s left"
            )
    n = lengths[-1]
    return LengthChoice(n, max(1, n // 2), step_s, left_s, f"none fits in {left_s:.0f} s: the shortest")


def probe_step(backend, rows, actor, mode: Mode, cfg) -> float:
    """Seconds per decode step of the loop's largest generate call (its refinements' batch), after a warm-up."""
    from binac_core import benchmarks
    from binac_core.model.generation import SamplingParams

    bench = benchmarks.get("synthetic")
    batch = cfg.train.batch_problems * cfg.train.group_size * cfg.train.critic_group_size
    msgs = [bench.actor_messages(rows[i % len(rows)]) for i in range(batch)]
    backend.generate(msgs[:2], actor, SamplingParams(4, 1.0, 1.0, seed=1))
    t0 = time.perf_counter()
    gens = backend.generate(msgs, actor, SamplingParams(mode.probe_tokens, 1.0, 1.0, seed=2))
    steps = max(max(len(g.token_ids) for g in gens), 1)
    return (time.perf_counter() - t0) / steps


@dataclass(frozen=True)
class LoopSetup:
    """The loop's model, policy, backend, config (at the chosen lengths), train rows and memory count."""

    info: ModelInfo
    policy: object
    backend: object
    cfg: object
    rows: list
    per_token: int
    """`gpu_memory.saved_per_token` of the shape, rank and dtype"""


def setup_loop(ctx: PartContext, state: dict, save: Callable[[], None]) -> LoopSetup:
    """The model, a policy with fresh adapters, the per-token memory count, and the answer length that fits."""
    from binac_core.benchmarks.synthetic import make_split
    from binac_core.model.generation import HFBackend
    from binac_core.model.policy import Policy

    mode = ctx.mode
    info = ensure_model(mode, ctx.work)
    state["model"] = asdict(info)
    state["phase"] = "load"
    cfg = policy_config(mode, info.folder, mode.loop_dtype, mode.lengths[0])
    policy = Policy(info.folder, cfg, seed=0)
    backend = HFBackend(policy, cfg.generation.batch_size)
    rows = make_split(cfg.task, "train")
    state["phase"] = "saved_per_token"
    save()
    with cpu_threads(min(8, len(os.sched_getaffinity(0))) if ctx.device == "cuda" else None):  # a layer, on the CPU
        per_token = gm.saved_per_token(info.shape, cfg.lora.rank, cfg.model.dtype)
    state["saved_bytes_per_token_and_layer"] = per_token
    state["phase"] = "longest update"
    save()
    attempt(
        state,
        "longest update",
        lambda: state.update(
            longest_update=longest_update(
                LoopSetup(info, policy, backend, cfg, rows, per_token), mode, ctx.device == "cuda"
            )
        ),
    )
    state["phase"] = "probe"
    save()
    step_s = probe_step(backend, rows, policy.hold("actor"), mode, cfg)
    choice = choose_length(mode.lengths, step_s, ctx.deadline - time.time())
    cfg = policy_config(mode, info.folder, mode.loop_dtype, choice.answer)  # lengths only: `policy.cfg.train` holds
    state["length_choice"] = asdict(choice)
    state["settings"] = loop_settings(cfg)
    return LoopSetup(info, policy, backend, cfg, rows, per_token)


def part_loop(ctx: PartContext, state: dict, save: Callable[[], None]) -> None:
    """Part 1 (module docstring): `binac`, then `grpo` (from binac's actor, or the fresh one if binac failed)."""
    setup = setup_loop(ctx, state, save)
    actor, critic = setup.policy.hold("actor"), setup.policy.hold("critic")
    state["iterations"] = []
    for method in ("binac", "grpo"):
        state["phase"] = method
        save()

        def one(method=method, actor=actor):
            res, rec, wall = run_iteration(
                method,
                setup.policy,
                setup.backend,
                setup.cfg,
                setup.rows,
                actor,
                critic if method == "binac" else None,
                ctx.device == "cuda",
            )
            state["iterations"].append(
                iteration_summary(method, res, rec, wall, setup.info, setup.cfg, setup.per_token)
            )
            return res.actor

        actor = attempt(state, method, one) or actor


@contextlib.contextmanager
def cpu_threads(n: int | None) -> Iterator[None]:
    """torch's intra-op threads at `n` within the block (a CPU-side count on a device machine's idle cores); None
    leaves them as they are (`BINAC_TORCH_THREADS`, `runtime.configure_threads`)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n or before)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def loop_settings(cfg) -> dict:
    """The loop's settings as run, and where they depart from the preset's (`DEVIATIONS`)."""
    t, g = cfg.train, cfg.generation
    return {
        "preset": PRESET,
        "dtype": cfg.model.dtype,
        "backend": g.backend,
        "batch_problems": t.batch_problems,
        "group_size": t.group_size,
        "critic_group_size": t.critic_group_size,
        "max_new_tokens": g.max_new_tokens,
        "feedback_max_new_tokens": g.feedback_max_new_tokens,
        "generation_batch_size": g.batch_size,
        "micro_batch_size": t.micro_batch_size,
        "activation_checkpointing": t.activation_checkpointing,
        "lora": {"rank": cfg.lora.rank, "alpha": cfg.lora.alpha, "target_modules": list(cfg.lora.target_modules)},
        "kl_coef": t.kl_coef,
        "critic_kl_coef": t.critic_kl_coef,
        "deviations": [
            d.format(
                batch=t.batch_problems,
                attempts=t.batch_problems * t.group_size,
                micro_batch=t.micro_batch_size,
                kl=t.critic_kl_coef,
            )
            for d in DEVIATIONS
        ],
    }


# --------------------------------------------------------------------------- part 2: sampler against trainer


def synthetic_prompts(n: int, seed: int = 0) -> list[list[dict]]:
    """`n` actor prompts of the synthetic task (its train split)."""
    from binac_core import benchmarks
    from binac_core.benchmarks.synthetic import make_split
    from binac_core.foundation.config import TaskConfig

    rows = make_split(TaskConfig(n_train=max(n, 16), data_seed=1234 + seed), "train")
    bench = benchmarks.get("synthetic")
    return [bench.actor_messages(rows[i % len(rows)]) for i in range(n)]


def judged_row(label: str, sampler: str, dtype: str, policy, gens, adapter, temperature: float) -> dict:
    """A sampler's log-probs of its own tokens against the trainer's recomputation (`gpu_check.trainer_logprobs`),
    judged with `dtype`'s tolerance; the adapter's own effect on the same tokens makes the row conclusive."""
    import gpu_check as gc

    prompts, tokens = [g.prompt_ids for g in gens], [list(g.token_ids) for g in gens]
    trainer = gc.trainer_logprobs(policy, adapter, prompts, tokens, temperature, len(gens))
    base = gc.trainer_logprobs(policy, None, prompts, tokens, temperature, len(gens))
    stats = compare_logprobs(trainer, [list(g.logprobs) for g in gens])
    effect = mean_abs_difference(trainer, base)
    reasons = judge(stats, tolerance_for(dtype), effect)
    return {
        "label": label,
        "sampler": sampler,
        "dtype": dtype,
        "temperature": temperature,
        **stats,
        "adapter_effect_mean_abs": effect,
        "tolerance": asdict(tolerance_for(dtype)),
        "ok": not reasons,
        "reasons": reasons,
    }


def load_policy(info: ModelInfo, mode: Mode, dtype: str):
    from binac_core.model.policy import Policy

    answer = max(mode.logprob_tokens, mode.speed_tokens)
    return Policy(info.folder, policy_config(mode, info.folder, dtype, answer), seed=0)


def release_memory() -> None:
    """Hand the device memory of dropped policies back (after their last reference went) before the next loads."""
    import gc as garbage

    import torch

    garbage.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def float32_checks(ctx: PartContext, state: dict, info: ModelInfo, msgs):
    """The decode loop's row and the greedy agreement in float32, on an actor adapter perturbed and saved as
    `gpu_check.make_adapters` does; returns the adapter's reference (for the half-dtype row)."""
    import gpu_check as gc

    from binac_core.model import decode
    from binac_core.model.generation import HFBackend, SamplingParams

    mode = ctx.mode
    policy = load_policy(info, mode, "float32")
    sampler = HFBackend(policy, batch_size=len(msgs))
    made = gc.make_adapters(
        policy,
        ctx.work / "adapters",
        [sampler.render(m, mode.logprob_tokens) for m in msgs],
        gc.Settings(recompute_batch=len(msgs)),
    )
    actor = made.pop("refs")["actor"]
    state["adapter"] = made
    state["decode_loop_supported"] = decode.supports(policy.model)
    params = SamplingParams(mode.logprob_tokens, 1.0, 1.0, seed=0)
    greedy = replace(params, temperature=0.0)

    def decode_loop_row():
        gens = sampler.generate(msgs, actor, params)
        state["rows"].append(judged_row("decode loop T=1", "decode loop", "float32", policy, gens, actor, 1.0))

    def greedy_agreement():
        ours = [list(g.token_ids) for g in sampler.generate(msgs, actor, greedy)]
        theirs = [list(g.token_ids) for g in HFBackend(policy, len(msgs), lean=False).generate(msgs, actor, greedy)]
        state["greedy_agreement"] = prefix_agreement(ours, theirs)

    attempt(state, "decode loop float32", decode_loop_row)
    attempt(state, "greedy", greedy_agreement)
    return actor


def half_row(ctx: PartContext, state: dict, info: ModelInfo, msgs, actor) -> None:
    """`generate`'s row in the half dtype (the GPU presets' HF path), with the same adapter."""
    from binac_core.model.generation import HFBackend, SamplingParams

    dtype = ctx.mode.half_dtype
    policy = load_policy(info, ctx.mode, dtype)
    gens = HFBackend(policy, len(msgs), lean=False).generate(
        msgs, actor, SamplingParams(ctx.mode.logprob_tokens, 1.0, 1.0, seed=0)
    )
    state["rows"].append(judged_row(f"generate T=1 ({dtype})", "generate", dtype, policy, gens, actor, 1.0))


def part_logprobs(ctx: PartContext, state: dict, save: Callable[[], None]) -> None:
    """Part 2 (module docstring): the float32 checks, then the half dtype's row; a check that raises is recorded
    and the next one runs."""
    info = ensure_model(ctx.mode, ctx.work)
    msgs = synthetic_prompts(ctx.mode.logprob_prompts)
    state["rows"] = []
    state["phase"] = "float32"
    save()
    actor = float32_checks(ctx, state, info, msgs)
    release_memory()
    state["phase"] = ctx.mode.half_dtype
    save()
    attempt(state, f"generate {ctx.mode.half_dtype}", partial(half_row, ctx, state, info, msgs, actor))


# --------------------------------------------------------------------------- part 3: generation speed


def speed_rows(policy, sampler: str, dtype: str, mode: Mode, msgs, adapter) -> list[dict]:
    """Tokens/s of `sampler` ("decode loop" or "generate") at each of `mode.speed_batches` (batch 1: prompts one at
    a time), T = 1, after an untimed warm-up call."""
    from binac_core.model import decode
    from binac_core.model.generation import HFBackend, SamplingParams

    lean = sampler == "decode loop"
    if lean and not decode.supports(policy.model):
        raise RuntimeError(f"the decode loop does not support this model in {dtype}")
    params = SamplingParams(mode.speed_tokens, 1.0, 1.0, seed=0)
    HFBackend(policy, 2, lean=lean).generate(msgs[:2], adapter, replace(params, max_new_tokens=8))
    rows = []
    for batch in mode.speed_batches:
        calls = [[m] for m in msgs[: mode.single_prompts]] if batch == 1 else [msgs[:batch]]
        backend = HFBackend(policy, batch, lean=lean)
        t0 = time.perf_counter()
        tokens = sum(len(g.token_ids) for call in calls for g in backend.generate(call, adapter, params))
        seconds = time.perf_counter() - t0
        rows.append(
            {
                "sampler": sampler,
                "dtype": dtype,
                "batch": batch,
                "prompts": sum(len(c) for c in calls),
                "tokens": tokens,
                "seconds": round(seconds, 4),
                "tokens_per_s": round(tokens / seconds, 1) if seconds > 0 else None,
            }
        )
    return rows


def speed_of(ctx: PartContext, state: dict, save: Callable[[], None], info: ModelInfo, dtype: str, msgs) -> None:
    """The speed rows of one dtype's samplers (float32: the decode loop and `generate`; else `generate`)."""
    policy = load_policy(info, ctx.mode, dtype)
    adapter = policy.hold("actor")  # fresh LoRA weights: the same work as trained ones
    for sampler in ["decode loop", "generate"] if dtype == "float32" else ["generate"]:
        state["phase"] = f"{sampler} {dtype}"
        save()
        rows = attempt(state, state["phase"], partial(speed_rows, policy, sampler, dtype, ctx.mode, msgs, adapter))
        state["rows"] += rows or []


def part_speed(ctx: PartContext, state: dict, save: Callable[[], None]) -> None:
    """Part 3 (module docstring): float32, then the half dtype; a sampler that raises is recorded and the next one
    runs."""
    info = ensure_model(ctx.mode, ctx.work)
    msgs = synthetic_prompts(max(ctx.mode.speed_batches), seed=1)
    state["rows"] = []
    state["note"] = "the actor adapter active; random weights rarely end a completion, so rows run at full length"
    for dtype in dict.fromkeys(["float32", ctx.mode.half_dtype]):
        attempt(state, dtype, partial(speed_of, ctx, state, save, info, dtype, msgs))
        release_memory()


# --------------------------------------------------------------------------- part 4: placement

VISIBILITY_PROBE = (
    "import json, torch; n = torch.cuda.device_count(); "
    "print(json.dumps({'count': n, 'uuid': str(torch.cuda.get_device_properties(0).uuid) if n else None}))"
)
"""A child's view of its devices: how many it sees, and the first one's UUID."""


def device_override(ctx: PartContext, state: dict, info: ModelInfo) -> None:
    """`model.device: cpu` on a machine whose torch may see a GPU: every weight of the policy on the CPU (gated)."""
    import torch

    from binac_core.model.policy import Policy

    cfg = policy_config(ctx.mode, info.folder, "float32", 8)
    cfg = cfg.model_copy(update={"model": cfg.model.model_copy(update={"device": "cpu"})})
    policy = Policy(info.folder, cfg, seed=0)
    where = sorted({p.device.type for p in policy.model.parameters()})
    state["rows"].append(
        {
            "label": "model.device=cpu beside a GPU",
            "cuda_visible": torch.cuda.is_available(),
            "devices": where,
            "ok": where == ["cpu"],
        }
    )


def worker_visibility(state: dict) -> None:
    """One child per device (the first two), each started with `CUDA_VISIBLE_DEVICES=<i>` as `scripts/serve.py`
    starts a worker: each sees one device, and not the same one (gated where there are two)."""
    import torch

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if n < 2:
        state["visibility_note"] = f"{n} CUDA device(s) here: one worker per GPU needs two to be checked"
        return
    seen = []
    for i in range(2):
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(i)}
        out = subprocess.run(
            [sys.executable, "-c", VISIBILITY_PROBE], env=env, capture_output=True, text=True, timeout=120, check=True
        )
        seen.append(json.loads(out.stdout.strip().splitlines()[-1]))
    ok = all(v["count"] == 1 for v in seen) and seen[0]["uuid"] != seen[1]["uuid"]
    state["rows"].append({"label": "CUDA_VISIBLE_DEVICES=0 / =1", "seen": seen, "ok": ok})


def sleep_mode(ctx: PartContext, state: dict, info: ModelInfo) -> None:
    """vLLM's engine at the preset's settings (bf16, `max_model_len` from the prompt budget, sleep mode) on the
    random model: free device memory asleep and awake, the wake's seconds, greedy tokens before and after a
    sleep (gated: identical). Reported, not gated, where vLLM or a sleep mode is missing."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        state["sleep_note"] = "vLLM is not installed here: sleep mode is checked where it is (make gpu-check's host)"
        return
    import torch

    from binac_core.model.generation import SamplingParams
    from binac_core.model.generation_vllm import VLLMBackend, shutdown_engine
    from binac_core.model.policy import Policy

    cfg = policy_config(ctx.mode, info.folder, ctx.mode.half_dtype, ctx.mode.logprob_tokens)
    cfg = cfg.model_copy(update={"generation": cfg.generation.model_copy(update={"backend": "vllm", "batch_size": 32})})
    policy = Policy(info.folder, cfg, seed=0)
    backend = VLLMBackend(info.folder, cfg, policy)
    try:
        settings = backend.describe()
        state["engine"] = settings
        if not settings["sleep_mode"]:
            state["sleep_note"] = "this vLLM build has no sleep mode"
            return
        msgs = synthetic_prompts(8, seed=2)
        greedy = SamplingParams(16, 0.0, 1.0, seed=0)
        before = [g.token_ids for g in backend.generate(msgs, None, greedy)]
        asleep = torch.cuda.mem_get_info()[0]
        t0 = time.perf_counter()
        with backend.engine.awake():
            wake_s = time.perf_counter() - t0
            awake = torch.cuda.mem_get_info()[0]
        after = [g.token_ids for g in backend.generate(msgs, None, greedy)]
        state["rows"].append(
            {
                "label": "vLLM sleep mode (level 1)",
                "free_bytes_asleep": asleep,
                "free_bytes_awake": awake,
                "returned_bytes": asleep - awake,
                "wake_s": round(wake_s, 3),
                "same_greedy_tokens": before == after,
                "ok": before == after and asleep > awake,
            }
        )
    finally:
        shutdown_engine()


def part_placement(ctx: PartContext, state: dict, save: Callable[[], None]) -> None:
    """Part 4 (module docstring): the device override, one device per worker, vLLM's sleep mode; a check that
    raises is recorded and the next one runs."""
    info = ensure_model(ctx.mode, ctx.work)
    state["rows"] = []
    for name, check in (
        ("device override", partial(device_override, ctx, state, info)),
        ("worker visibility", partial(worker_visibility, state)),
        ("sleep mode", partial(sleep_mode, ctx, state, info)),
    ):
        state["phase"] = name
        save()
        attempt(state, name, check)
        release_memory()


PART_FUNCTIONS = {"loop": part_loop, "logprobs": part_logprobs, "speed": part_speed, "placement": part_placement}


# --------------------------------------------------------------------------- a part's child process


def attempt(state: dict, where: str, check: Callable[[], object]):
    """`check()`; if it raises, its error and traceback go into `state["errors"]` and None is returned, so that the
    part goes on with its next check."""
    try:
        return check()
    except Exception as exc:  # noqa: BLE001 - recorded, with where it happened
        state.setdefault("errors", []).append(
            {"where": where, "error": error_text(where, exc), "traceback": traceback.format_exc()}
        )
        return None


def part_status(state: dict) -> str:
    """fail: a gated row failed; error: a check raised; else pass."""
    if any(not r.get("ok", True) for r in state.get("rows", [])):
        return "fail"
    return "error" if state.get("errors") else "pass"


class InjectedFailure(RuntimeError):
    """Raised by `--inject-failure PART` once the part's checks have run (tests of the reporting)."""


def environment() -> dict:
    """Versions and device (never raises)."""
    env: dict = {"python": sys.version.split()[0], "cpu_cores": len(os.sched_getaffinity(0))}
    for mod in ("torch", "transformers", "peft", "pydantic", "tokenizers"):
        try:
            env[mod] = __import__(mod).__version__
        except Exception as exc:  # noqa: BLE001
            env[mod] = f"not importable ({type(exc).__name__})"
    try:
        import torch

        env["cuda_available"] = torch.cuda.is_available()
        if env["cuda_available"]:
            props = torch.cuda.get_device_properties(0)
            env.update(
                device=props.name,
                device_memory_bytes=props.total_memory,
                cuda=torch.version.cuda,
                tf32_matmul=torch.backends.cuda.matmul.allow_tf32,
            )
    except Exception as exc:  # noqa: BLE001
        env["cuda_available"] = f"unknown ({type(exc).__name__})"
    return env


def error_text(phase: str | None, exc: BaseException) -> str:
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{phase}: {type(exc).__name__}: {first}"


def child_main(args) -> int:
    """One part in this process: its results into --out/<part>/result.json after every step."""
    from binac_core.model.runtime import configure_threads

    mode = MODES[args.device]
    deadline = args.deadline or time.time() + mode.budget(args.part)
    ctx = PartContext(mode, Path(args.out) / args.part, Path(args.work), deadline, args.inject_failure == args.part)
    ctx.out.mkdir(parents=True, exist_ok=True)
    state: dict = {"part": args.part, "mode": ctx.mode.name, "status": "running", "phase": "start"}
    t0 = time.perf_counter()

    def save() -> None:
        state["wall_s"] = round(time.perf_counter() - t0, 2)
        write_json(ctx.out / "result.json", state)

    try:
        state["torch_threads"] = configure_threads()
        state["environment"] = environment()
        save()
        state["phase"] = "model"
        PART_FUNCTIONS[args.part](ctx, state, save)
        state["phase"] = "done"
        if ctx.inject_failure:
            raise InjectedFailure(f"injected by --inject-failure {args.part}")
        state["status"] = part_status(state)
        if state.get("errors"):
            state["error"] = "; ".join(e["error"] for e in state["errors"])
    except Exception as exc:  # noqa: BLE001 - every failure is this part's result
        state.update(status="error", error=error_text(state.get("phase"), exc), traceback=traceback.format_exc())
    save()
    return {"pass": EXIT_PASS, "fail": EXIT_FAIL}.get(state["status"], EXIT_ERROR)


# --------------------------------------------------------------------------- the parent: parts under budgets

FINAL = ("pass", "fail", "error")
GRACE_S = 5.0
"""Past its budget, how long a part may take to exit before its process group is stopped."""


def run_part(
    cmd: list[str], result: Path, budget_s: float, log: Path, grace_s: float = GRACE_S, env: dict | None = None
) -> dict:
    """`cmd` (a part's child) in a process group of its own, with `env` added to the environment, stopped after
    `budget_s` + `grace_s`; returns the result it wrote at `result`, completed with its exit status, or with a
    timeout or a crash as its error."""
    result.unlink(missing_ok=True)  # never read a previous run's
    result.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    timed_out = False
    with open(log, "w") as fh:
        proc = start_in_group(
            cmd,
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=REPO,
            env={**os.environ, **OFFLINE_ENV, **(env or {})},
        )
        try:
            proc.wait(timeout=budget_s + grace_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            stop_group(proc, term_grace_s=2.0)  # also what the child left behind
    state = _read(result) or {"phase": "start"}
    state.update(wall_s=round(time.perf_counter() - t0, 1), exit_code=proc.returncode, budget_s=budget_s)
    if timed_out and state.get("status") not in FINAL:
        state.update(status="error", error=f"timed out after {budget_s:.0f} s in phase {state.get('phase')}")
    elif state.get("status") not in FINAL:
        state.update(
            status="error",
            error=f"the child exited with status {proc.returncode} in phase {state.get('phase')} (see {log})",
        )
    return state


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def child_command(args, part: str, deadline: float) -> list[str]:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--part",
        part,
        "--out",
        str(args.out),
        "--device",
        args.device,
        "--work",
        str(args.work),
        "--deadline",
        f"{deadline:.3f}",
    ]
    return cmd + (["--inject-failure", args.inject_failure] if args.inject_failure else [])


def run_parts(args, mode: Mode, results: dict, report: Callable[[], None]) -> None:
    """Each of `args.parts` in turn, under its budget and what is left of `args.budget_s`."""
    started = time.time()
    for part in args.parts:
        left = args.budget_s - (time.time() - started) - GRACE_S
        budget = min(mode.budget(part), left)
        if budget < 10:
            results["parts"][part] = {"part": part, "status": "error", "error": "not run: --budget-s was spent"}
            continue
        say(f"{part}: running (limit {budget:.0f} s; log {args.out / part / 'log.txt'})")
        results["running"] = part
        report()
        hidden = {"CUDA_VISIBLE_DEVICES": ""} if mode.name == "cpu" else {}  # --cpu: the CPU even beside a GPU
        state = run_part(
            child_command(args, part, time.time() + budget),
            args.out / part / "result.json",
            budget,
            args.out / part / "log.txt",
            env=hidden,
        )
        results.pop("running")
        results["parts"][part] = state
        say(f"{part}: {state.get('status')}" + (f" ({state['error']})" if state.get("error") else ""))
        report()


def cuda_problem() -> str | None:
    """None when torch sees a CUDA device, else the one line saying so."""
    try:
        import torch

        if torch.cuda.is_available():
            return None
        return (
            f"no CUDA device (torch.cuda.is_available() is False, torch {torch.__version__}): run it on a CUDA "
            "machine, or pass --cpu for the CPU mode"
        )
    except Exception as exc:  # noqa: BLE001
        return f"no CUDA device (torch: {type(exc).__name__}: {exc}): pass --cpu for the CPU mode"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", required=True, help="folder for results.json, results.md and each part's folder")
    p.add_argument(
        "--device",
        choices=tuple(MODES),
        default="cuda",
        help="cuda (default): the Llama-3.2-1B shape; cpu: a tiny shape (seconds a part)",
    )
    p.add_argument("--cpu", dest="device", action="store_const", const="cpu", help="the same as --device cpu")
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, in order (default {','.join(PARTS)})")
    p.add_argument(
        "--work", help="where the model and adapters go (default: the temporary folder on CUDA, OUT/work on CPU)"
    )
    p.add_argument("--budget-s", type=float, help="the whole check's limit (default 400 on CUDA, 1000 on CPU)")
    p.add_argument("--inject-failure", choices=PARTS, help="make this part raise once its checks ran (tests)")
    p.add_argument("--part", choices=PARTS, help=argparse.SUPPRESS)
    p.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.parts = [s.strip() for s in args.parts.split(",") if s.strip()]
    bad = [s for s in args.parts if s not in PARTS]
    if bad or not args.parts:
        p.error(f"--parts: unknown {', '.join(bad) or '(none)'} (known: {', '.join(PARTS)})")
    args.out = Path(args.out).expanduser().resolve()
    default_work = Path(tempfile.gettempdir()) / "binac-device-check" if args.device == "cuda" else args.out / "work"
    args.work = Path(args.work).expanduser().resolve() if args.work else default_work
    args.budget_s = args.budget_s or MODES[args.device].budget_s
    return args


def main(argv=None) -> int:
    for key, value in OFFLINE_ENV.items():
        os.environ.setdefault(key, value)
    args = parse_args(argv)
    if args.part:
        return child_main(args)
    args.out.mkdir(parents=True, exist_ok=True)
    mode = MODES[args.device]
    results: dict = {
        "status": "running",
        "exit_code": None,
        "mode": mode.name,
        "parts_asked": args.parts,
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "budget_s": args.budget_s,
        "parts": {},
    }

    def report() -> None:
        write_json(args.out / "results.json", results)
        (args.out / "results.md").write_text(render_markdown(results))

    problem = cuda_problem() if mode.name == "cuda" else None
    if problem:
        say(problem)
        results.update(status="unavailable", exit_code=EXIT_UNAVAILABLE, message=problem)
        report()
        return EXIT_UNAVAILABLE
    previous = signal.signal(signal.SIGTERM, _terminated)  # the running part's group is stopped, results kept
    try:
        run_parts(args, mode, results, report)
    except (KeyboardInterrupt, SystemExit):
        results.update(status="error", exit_code=EXIT_ERROR, message=f"interrupted in {results.pop('running', '?')}")
        report()
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    status, code = overall_status(list(results["parts"].values()))
    results.update(status=status, exit_code=code)
    report()
    for line in summary_lines(results):
        say(line)
    say(f"{status} (exit {code}); results in {args.out}/results.md")
    return code


def summary_lines(results: dict) -> list[str]:
    """The headline numbers: each update's peak memory against its count, each log-prob row, each speed row."""
    parts, out = results.get("parts", {}), []
    loop = parts.get("loop", {})
    updates = [(it["method"], u) for it in loop.get("iterations", []) for u in it["updates"]]
    updates += [("longest", loop["longest_update"])] if loop.get("longest_update") else []
    for method, u in updates:
        mb = u["micro_batch"]
        out.append(
            f"  {method} {u['adapter']} update, {mb['sequences']} x {mb['length']} tokens: peak "
            f"{_gib(u['peak_bytes'])} GiB, counted {_gib(u['predicted_bytes']['total'])} GiB"
        )
    for r in parts.get("logprobs", {}).get("rows", []):
        out.append(
            f"  {'ok  ' if r['ok'] else 'FAIL'} {r['label']}: mean {_fmt(r['mean_abs'])}, max "
            f"{_fmt(r['max_abs'])} over {r['tokens']} tokens" + ("" if r["ok"] else f" ({'; '.join(r['reasons'])})")
        )
    for r in parts.get("speed", {}).get("rows", []):
        out.append(f"  {r['sampler']} {r['dtype']} batch {r['batch']}: {_fmt(r['tokens_per_s'], 4)} tokens/s")
    return out


def _terminated(signum, frame):
    raise SystemExit(128 + signum)


# --------------------------------------------------------------------------- results.md


def _fmt(value, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def _gib(value) -> str:
    return "–" if value is None else f"{value / gm.GIB:.3g}"


def render_markdown(results: dict) -> str:
    """results.md: the status, then each part's tables."""
    lines = [
        "# device_check: the training loop on the accelerator",
        "",
        f"**Status: {results.get('status')}** (exit {results.get('exit_code')}); mode {results.get('mode')}, "
        f"started {results.get('started')}",
        "",
    ]
    if results.get("message"):
        lines += [results["message"], ""]
    env = next((p["environment"] for p in results.get("parts", {}).values() if p.get("environment")), None)
    if env:
        lines += ["Environment: " + ", ".join(f"{k} {v}" for k, v in env.items()), ""]
    for name, part in results.get("parts", {}).items():
        lines += [f"## {name}: {part.get('status')} ({_fmt(part.get('wall_s'))} s)", ""]
        if part.get("error"):
            lines += [f"Error: `{part['error']}`", ""]
        lines += RENDERERS[name](part) if name in RENDERERS else []
    return "\n".join(lines).rstrip() + "\n"


def _loop_lines(part: dict) -> list[str]:
    lines = []
    s, choice, model = part.get("settings"), part.get("length_choice"), part.get("model")
    if model:
        sh = model["shape"]
        lines += [
            f"Model: random weights, {sh['params']:,} parameters (hidden {sh['hidden']}, {sh['layers']} "
            f"layers, vocabulary {sh['vocab']}; the project tokenizer's {model['tokenizer_ids']} ids a "
            f"subset).",
            "",
        ]
    if s:
        lines += [
            f"Settings: `{s['preset']}`, {s['dtype']}, backend {s['backend']}, {s['batch_problems']} problems "
            f"x {s['group_size']} attempts x {s['critic_group_size']} feedbacks, answers {s['max_new_tokens']}"
            f" / feedback {s['feedback_max_new_tokens']} tokens, micro-batch {s['micro_batch_size']}, "
            f"activation checkpointing {s['activation_checkpointing']}, LoRA r {s['lora']['rank']}.",
            "",
        ]
        lines += [f"- {d}" for d in s["deviations"]] + [""]
    if choice:
        lines += [
            f"Answer length {choice['answer']}: {choice['reason']} (decode step "
            f"{_fmt(choice['decode_step_s'] * 1000)} ms).",
            "",
        ]
    for it in part.get("iterations", []):
        lines += [
            f"### {it['method']} ({_fmt(it['wall_s'])} s)",
            "",
            "Seconds per phase: " + ", ".join(f"{k} {_fmt(v)}" for k, v in it["phases_s"].items()),
            "",
            "| generation stage | prompts | tokens | s | tokens/s |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {g['stage']} | {g['prompts']} | {g['tokens']} | {_fmt(g['seconds'])} | {_fmt(g['tokens_per_s'], 4)} |"
            for g in it["generation"]
        ]
        lines += [""] + _update_table(it["updates"]) + [""]
    if part.get("longest_update"):
        lines += [
            "### One actor update at the longest micro-batch of docs/gpu.md's memory table (random tokens)",
            "",
            *_update_table([part["longest_update"]]),
            "",
        ]
    return lines


def _update_table(updates: list[dict]) -> list[str]:
    lines = [
        "| update | s | micro-batch (seqs x length) | peak GiB | reserved GiB | predicted GiB | measured / "
        "predicted | skipped steps |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for u in updates:
        mb = u["micro_batch"]
        peak = _gib(u["peak_bytes"]) if u["peak_bytes"] is not None else u["peak_note"]
        lines.append(
            f"| {u['adapter']} | {_fmt(u['seconds'])} | {mb['sequences']} x {mb['length']} | {peak} | "
            f"{_gib(u['peak_reserved_bytes'])} | {_gib(u['predicted_bytes']['total'])} | "
            f"{_fmt(u['measured_over_predicted'])} | {_fmt(u['skipped_steps'])} |"
        )
    return lines


def _logprob_lines(part: dict) -> list[str]:
    lines = []
    if part.get("rows"):
        lines += [
            "| row | dtype | tokens | mean | p99 | max | worst seq mean | adapter effect | ok |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in part["rows"]:
            verdict = "yes" if r["ok"] else "NO: " + "; ".join(r["reasons"]).replace("|", "\\|")
            lines.append(
                f"| {r['label']} | {r['dtype']} | {r['tokens']} | {_fmt(r['mean_abs'])} | "
                f"{_fmt(r['p99_abs'])} | {_fmt(r['max_abs'])} | {_fmt(r['seq_mean_abs_max'])} | "
                f"{_fmt(r['adapter_effect_mean_abs'])} | {verdict} |"
            )
        lines.append("")
    g = part.get("greedy_agreement")
    if g:
        lines += [
            f"Greedy, decode loop vs generate (float32): {_fmt(g['identical'])} identical, common prefix "
            f"{_fmt(g['mean_prefix_fraction'])} of the length (not gated).",
            "",
        ]
    return lines


def _speed_lines(part: dict) -> list[str]:
    if not part.get("rows"):
        return []
    lines = ["| sampler | dtype | batch | tokens | s | tokens/s |", "|---|---|---|---|---|---|"]
    lines += [
        f"| {r['sampler']} | {r['dtype']} | {r['batch']} | {r['tokens']} | {_fmt(r['seconds'])} | "
        f"{_fmt(r['tokens_per_s'], 4)} |"
        for r in part["rows"]
    ]
    return lines + ["", part.get("note", ""), ""]


def _placement_lines(part: dict) -> list[str]:
    lines = []
    for r in part.get("rows", []):
        facts = ", ".join(f"{k} {v}" for k, v in r.items() if k not in ("label", "ok"))
        lines.append(f"- {r['label']}: {'pass' if r['ok'] else 'FAIL'} ({facts})")
    lines += [f"- {part[k]}" for k in ("visibility_note", "sleep_note") if part.get(k)]
    return lines + [""]


RENDERERS = {"loop": _loop_lines, "logprobs": _logprob_lines, "speed": _speed_lines, "placement": _placement_lines}


if __name__ == "__main__":
    sys.exit(main())
