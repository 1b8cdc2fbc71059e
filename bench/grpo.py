"""One GRPO iteration, binac's own loop vs TRL 1.16's `GRPOTrainer`, on the same base model folder and tokenizer.

An iteration = sample B problems × G completions of the synthetic task with the actor's LoRA adapter, grade them
with binac's synthetic grader, and take one policy-gradient update (one optimizer step). Measured: wall seconds
per iteration, the two loops interleaved (binac, TRL, binac, TRL, ...) inside one TRL training run, where a
trainer callback runs binac's iteration between two of TRL's optimizer steps. Not measured here: imports and
construction (see `bench.memory`, which times them in fresh processes), writing adapters to disk (binac's pipeline
does it every iteration, TRL's save is off: timed separately by `save_seconds`), Prefect orchestration.

Where each loop's time goes (`Probe`): every measured iteration is also split into stages, the same hooks on both
sides: `generate` (the model's `generate` call, the sampling loop itself), `forward` (the training log-prob forward:
binac's `sequence_logprobs`, TRL's `_get_per_token_logps_and_entropies`, with gradients on), `nograd_forward` (the
same functions without gradients: reference or old-policy log-probs; none with `kl_coef` 0 and one pass),
`backward` (`Tensor.backward`, which includes recomputing checkpointed activations), `optimizer` (gradient clipping
and the optimizer step), and `other` = the iteration minus those (prompt rendering and tokenisation, decoding,
rewards, advantages, the loss arithmetic, batching and the trainer's bookkeeping: Python, mostly). The hooks add
two clock reads per hooked call.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import time
import traceback
from enum import Enum
from pathlib import Path
from unittest import mock

import torch

from binac_core.benchmarks.synthetic import actor_messages, make_split
from binac_core.foundation.config import Config
from binac_core.model.generation import HFBackend
from binac_core.rl import stage_functions
from binac_core.rl.batches import attempt_samples
from binac_core.rl.episodes import Scores
from binac_core.rl.loop import IterationResult, iteration
from binac_core.rl.methods import SPECS
from binac_core.rl.update import Sample

SEED = 0

UNMATCHED = [
    "TRL loads its own copy of the base model with one LoRA adapter; binac's `Policy` holds two (actor and "
    "critic) of the same rank, only the actor active.",
    "Problems per iteration are drawn from the same train split but not the same ones: binac by "
    "`sample_problems`, TRL by its shuffled `RepeatSampler` (completion lengths, hence time, differ per draw).",
    "binac's generation records the drawn token's log-prob step by step (its last logits processor) for the sampling "
    "log-probs its loss uses; "
    "TRL's does not (on-policy it reuses the detached training log-probs) but its training forward also computes "
    "per-token entropies.",
    "binac's training forward runs the LM head on the completion positions only (`sequence_logprobs`); TRL 1.16's "
    "fused LM head scores only the labelled positions on CUDA/XPU with Triton, but on other devices (this CPU) "
    "every position of the prompt+completion batch, the prompt's masked afterwards.",
    "TRL's own defaults changed to match binac: `gradient_checkpointing=False` (TRL defaults to True), "
    "`optim='adamw_torch'`, constant learning rate, `loss_type='dapo'` (binac's token-level mean), `beta` = "
    "binac's `kl_coef`, `top_k=0` (binac passes `top_k=None`, which transformers leaves unset: no top-k).",
]


class Reward(str, Enum):
    """The reward both loops give a completion in one comparison (the same function on both sides)."""

    VERIFIER = "verifier"
    """binac's synthetic grader (`benchmarks.grade.grade`): the task's own reward."""
    PARITY = "parity"
    """A bench-only reward (`parity_reward`): for a base that solves none of the task's problems (smol on the
    synthetic task), where the verifier gives every group equal rewards, binac's update skips the optimizer step
    (`rl.update.policy_update`: no signal) while TRL's runs its forward and backward anyway. This reward gives nearly
    every group of attempts unequal rewards, so both sides take a full update and the comparison is like for like."""


def parity_reward(text: str) -> float:
    """1.0 when the first byte of the completion text's sha256 is even, else 0.0: deterministic in the text, blind
    to the task, about half the completions each (a group of G has equal rewards with probability 2^(1-G))."""
    return float(hashlib.sha256(text.encode()).digest()[0] % 2 == 0)


def train_rows(cfg: Config) -> list[dict]:
    """The synthetic train split both loops draw problems from."""
    return make_split(cfg.task, "train")


STAGES = ("generate", "forward", "nograd_forward", "backward", "optimizer")
"""Hooked stages of an iteration (module docstring); `other` is the rest."""


class Probe:
    """Seconds per stage of the iteration in progress (`start` ... `stop`), from hooks both loops run through.

    Installed for a whole comparison (`install`); a hooked call outside an iteration, or nested inside a call of
    the same stage (accelerate's gradient clipping calling torch's), is not counted again."""

    def __init__(self):
        self.current: dict[str, float] | None = None
        self._active: set[str] = set()

    def start(self) -> None:
        self.current = dict.fromkeys(STAGES, 0.0)

    def stop(self, total: float) -> dict[str, float]:
        out, self.current = self.current or dict.fromkeys(STAGES, 0.0), None
        out["other"] = total - sum(out.values())
        out["total"] = total
        return out

    def add(self, stage: str, seconds: float) -> None:
        if self.current is not None:
            self.current[stage] += seconds

    @contextlib.contextmanager
    def timing(self, stage: str):
        if stage in self._active:
            yield
            return
        self._active.add(stage)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self._active.discard(stage)
            self.add(stage, time.perf_counter() - t0)

    def wrap(self, stage, fn):
        """`fn`, timed into `stage` (a callable of the arguments for a stage that depends on them)."""

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            name = stage() if callable(stage) else stage
            with self.timing(name):
                return fn(*args, **kwargs)

        return timed

    @contextlib.contextmanager
    def install(self):
        """The hooks shared by both loops: `Tensor.backward`, gradient clipping, optimizer steps, and binac's
        `sequence_logprobs` (its `policy_update` looks it up at call time); restored on exit."""
        import torch.optim.optimizer as optim

        from binac_core.rl import update

        def forward_stage():
            return "forward" if torch.is_grad_enabled() else "nograd_forward"

        saved = (torch.Tensor.backward, torch.nn.utils.clip_grad_norm_, update.sequence_logprobs)
        steps: list[float] = []

        def pre(*_):
            steps.append(time.perf_counter())

        def post(*_):
            if steps:
                self.add("optimizer", time.perf_counter() - steps.pop())

        handles = [optim.register_optimizer_step_pre_hook(pre), optim.register_optimizer_step_post_hook(post)]
        torch.Tensor.backward = self.wrap("backward", saved[0])
        torch.nn.utils.clip_grad_norm_ = self.wrap("optimizer", saved[1])
        update.sequence_logprobs = self.wrap(forward_stage, saved[2])
        try:
            yield self
        finally:
            torch.Tensor.backward, torch.nn.utils.clip_grad_norm_, update.sequence_logprobs = saved
            for h in handles:
                h.remove()

    def hook_trl(self, trainer) -> None:
        """TRL's own stages, on this trainer's instance: its generate call, its log-prob forward, its clipping."""
        model = trainer.model
        model.generate = self.wrap("generate", model.generate)
        trainer._get_per_token_logps_and_entropies = self.wrap(
            lambda: "forward" if torch.is_grad_enabled() else "nograd_forward",
            trainer._get_per_token_logps_and_entropies,
        )
        trainer.accelerator.clip_grad_norm_ = self.wrap("optimizer", trainer.accelerator.clip_grad_norm_)

    def hook_binac(self, loop: BinacGRPO) -> None:
        """binac's generation: its backend's per-batch sampling (`HFBackend._generate_ids`), whichever path
        (`decode.sample` or transformers' `generate`) it takes."""
        loop.backend._generate_ids = self.wrap("generate", loop.backend._generate_ids)


class BinacGRPO:
    """binac's GRPO iteration on an in-process `Policy`: the in-memory loop's iteration with the grpo spec
    (`binac_core.rl.loop.iteration`: HFBackend.generate → grade → advantages → update_adapter), whose numbers are
    the pipeline's (tests/integration/test_loop.py), without its Prefect wrapping and without saving the adapter (the updated
    actor stays in the policy, `Policy.hold`; see `save_seconds`). The task's benchmark is the config's
    (`train_rows`: the synthetic task).
    """

    def __init__(self, cfg: Config, base_dir: Path, work_dir: Path, rows: list[dict], reward: Reward = Reward.VERIFIER):
        from binac_core.model.policy import Policy

        self.cfg, self.rows, self.step, self.reward = cfg, rows, 0, reward
        self.policy = Policy(base_dir, cfg, SEED)
        self.backend = HFBackend(self.policy, cfg.generation.batch_size)
        self.work_dir = Path(work_dir)
        # Generation takes the actor as a checkpoint reference; saving once here makes later syncs no-ops.
        self.actor = self.policy.save("actor", self.work_dir / "actor-0")
        self.tokens: list[float] = []
        self.skipped: list[float] = []
        """Per iteration, the optimizer steps its update did not take (no signal in the batch)."""
        self.last: IterationResult | None = None

    @property
    def last_samples(self) -> list[Sample]:
        """The `Sample`s of the latest update (the smol bench's memory measurement reuses them): grpo's actor
        batch, its attempts with their group advantages (`batches.attempt_samples`, as the update computed them)."""
        if self.last is None:
            return []
        return attempt_samples(self.last.attempts, self.last.first_rewards.rewards, self.cfg.train.scale_rewards)

    def iteration(self) -> None:
        """One iteration at step 0, 1, ... of seed `SEED`; grpo never uses the critic (no critic reference). Under
        `Reward.PARITY` the score stage returns `parity_reward` of each answer instead of the verifier's."""
        with self._scoring():
            self.last = iteration(
                self.policy, self.backend, self.cfg, SPECS["grpo"], self.rows, SEED, self.step, self.actor, None
            )
        self.actor = self.last.actor
        self.tokens.append(self.last.actor_update.tokens / len(self.last.attempts))
        self.skipped.append(self.last.actor_update.skipped_steps)
        self.step += 1

    def _scoring(self):
        if self.reward is Reward.VERIFIER:
            return contextlib.nullcontext()
        return mock.patch.object(
            stage_functions,
            "score_stage",
            lambda cfg, problems, answers: Scores([parity_reward(a.text) for a in answers]),
        )

    def save_seconds(self) -> float:
        """What the real pipeline adds per iteration and this comparison leaves out: writing the actor adapter
        and its optimizer state (atomic folder swap + content digest). The saved reference (the same weights)
        replaces the in-memory one."""
        t0 = time.perf_counter()
        self.actor = self.policy.save("actor", self.work_dir / "actor-save")
        return time.perf_counter() - t0


# ---------------------------------------------------------------------------------------------------- TRL side


def batch_layout(cfg: Config) -> tuple[int, int, str]:
    """(per_device_train_batch_size, gradient_accumulation_steps, note) so that one TRL optimizer step = one
    generation of B×G completions, with binac's `micro_batch_size` as the micro-batch when it divides B×G."""
    n, mb = cfg.train.batch_problems * cfg.train.group_size, cfg.train.micro_batch_size
    if n <= mb:
        return n, 1, ""
    if n % mb == 0:
        return mb, n // mb, ""
    return n, 1, f"B×G={n} is not a multiple of micro_batch_size={mb}: TRL runs it as one micro-batch"


def trl_config(cfg: Config, out_dir: Path, max_steps: int):
    """GRPOConfig with binac's settings; see `UNMATCHED` for what differs anyway."""
    from trl import GRPOConfig

    per_device, accum, _ = batch_layout(cfg)
    t, g, n = cfg.train, cfg.generation, cfg.train.batch_problems * cfg.train.group_size
    return GRPOConfig(
        output_dir=str(out_dir),
        use_cpu=True,
        bf16=False,  # the bf16 default raises on CPU
        use_vllm=False,
        num_generations=t.group_size,
        per_device_train_batch_size=per_device,
        gradient_accumulation_steps=accum,
        generation_batch_size=n,
        num_iterations=t.t_low,
        max_completion_length=g.max_new_tokens,
        temperature=g.temperature,
        top_p=g.top_p,
        top_k=0,
        learning_rate=t.actor_lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        optim="adamw_torch",
        max_grad_norm=t.max_grad_norm,
        epsilon=t.clip_eps,
        beta=t.kl_coef,
        loss_type="dapo",
        scale_rewards="group" if t.scale_rewards else "none",
        gradient_checkpointing=False,
        model_init_kwargs={"dtype": cfg.model.dtype},
        max_steps=max_steps,
        seed=SEED,
        report_to="none",
        logging_strategy="no",
        save_strategy="no",
        eval_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )


def synthetic_reward(completions, answer, **_) -> list[float]:
    """TRL reward function = binac's synthetic grader (`benchmarks.grade.grade`), one float per completion."""
    from binac_core.benchmarks.grade import grade

    return [grade("synthetic", {"answer": a}, c[-1]["content"]) for c, a in zip(completions, answer, strict=True)]


def trl_parity_reward(completions, **_) -> list[float]:
    """TRL reward function = `parity_reward` of each completion's text."""
    return [parity_reward(c[-1]["content"]) for c in completions]


def trl_trainer(
    cfg: Config,
    base_dir: Path,
    rows: list[dict],
    out_dir: Path,
    max_steps: int,
    callbacks=(),
    reward: Reward = Reward.VERIFIER,
):
    """A GRPOTrainer on the base model folder (its tokenizer too) with a LoRA of binac's rank/alpha/targets."""
    from datasets import Dataset
    from transformers import AutoTokenizer, PrinterCallback
    from trl import GRPOTrainer

    tok = AutoTokenizer.from_pretrained(base_dir)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token  # as binac's Policy does
    data = Dataset.from_list([{"prompt": actor_messages(r), "answer": r["answer"]} for r in rows])
    from binac_core.model.policy import lora_config

    trainer = GRPOTrainer(
        model=str(base_dir),
        reward_funcs=synthetic_reward if reward is Reward.VERIFIER else trl_parity_reward,
        args=trl_config(cfg, out_dir, max_steps),
        train_dataset=data,
        processing_class=tok,
        peft_config=lora_config(cfg),
        callbacks=list(callbacks),
    )
    trainer.remove_callback(PrinterCallback)  # it prints the final metrics dict onto stdout, where the table goes
    return trainer


def last_completion_length(trainer) -> float | None:
    """TRL's mean completion length of its latest step, from its metric buffer (a private attribute, so None
    if that ever moves; the buffer is emptied at each log, which is off here)."""
    try:
        return float(trainer._metrics["train"]["completions/mean_length"][-1])
    except (AttributeError, KeyError, IndexError, TypeError):
        return None


def _interleave_callback(between, steps: int, threads: int, probe: Probe | None = None):
    """A TrainerCallback timing each TRL optimizer step and running `between()` after each but the last.

    A TRL step's time runs from the end of the previous `between()` to this step's `on_step_end`, so it holds
    everything TRL's loop does per step (data, generation, rewards, loss, backward, optimizer, bookkeeping). With a
    `probe`, each step's stages are recorded too (`profiles`).
    """
    from transformers import TrainerCallback

    class Interleave(TrainerCallback):
        def __init__(self):
            self.trl: list[float] = []
            self.profiles: list[dict[str, float]] = []
            self.lengths: list[float | None] = []
            self.trainer = None  # set once the trainer exists, to read its completion lengths
            self.error: BaseException | None = None
            self._resume = time.perf_counter()

        def _begin(self):
            if probe is not None:
                probe.start()
            self._resume = time.perf_counter()

        def on_train_begin(self, args, state, control, **kw):
            torch.set_num_threads(threads)  # the same thread count for both loops, whatever TRL's setup did
            self._begin()

        def on_step_end(self, args, state, control, **kw):
            self.trl.append(time.perf_counter() - self._resume)
            if probe is not None:
                self.profiles.append(probe.stop(self.trl[-1]))
            self.lengths.append(last_completion_length(self.trainer))
            if state.global_step < steps:
                try:
                    between()
                except BaseException as exc:  # binac's failure, not TRL's: stop and re-raise after train()
                    self.error = exc
                    control.should_training_stop = True
            self._begin()

    return Interleave()


def compare(
    cfg: Config,
    base_dir: Path,
    work_dir: Path,
    repeats: int,
    threads: int,
    log=print,
    reward: Reward = Reward.VERIFIER,
) -> dict:
    """Interleaved binac/TRL iterations: {"binac": [s...], "trl": [s...], "trl_error": str|None, ...}, with each
    measured iteration's stages in "binac_profile" / "trl_profile" (`Probe`), the `reward` both sides were given
    and "binac_skipped": the optimizer steps binac's measured updates did not take (no signal; TRL takes them all).

    One warm-up iteration of each is discarded. When TRL cannot be built or fails, binac is still measured
    alone and `trl_error` holds TRL's error text.
    """
    rows = train_rows(cfg)
    probe = Probe()
    with probe.install():
        binac = BinacGRPO(cfg, base_dir, work_dir / "binac", rows, reward)
        probe.hook_binac(binac)
        binac.iteration()  # warm-up (first-call allocations, optimizer state creation)
        binac_times: list[float] = []
        binac_profiles: list[dict[str, float]] = []

        def binac_step():
            probe.start()
            t0 = time.perf_counter()
            binac.iteration()
            binac_times.append(time.perf_counter() - t0)
            binac_profiles.append(probe.stop(binac_times[-1]))

        trl_times, trl_profiles, trl_error, lengths = [], [], None, []
        callback = _interleave_callback(binac_step, repeats + 1, threads, probe)
        try:
            log("grpo: building TRL GRPOTrainer")
            trainer = trl_trainer(cfg, base_dir, rows, work_dir / "trl", repeats + 1, [callback], reward)
            probe.hook_trl(trainer)
            callback.trainer = trainer
            log(f"grpo: {repeats} interleaved iterations (+1 warm-up each)")
            trainer.train()
            trl_times, trl_profiles = callback.trl[1:], callback.profiles[1:]
            lengths = [x for x in callback.lengths[1:] if x is not None]
        except Exception as exc:
            if callback.error is not None:
                raise callback.error from exc
            trl_error = " ".join(f"{type(exc).__name__}: {exc}".split())  # one line, for the table
            log(f"grpo: TRL failed, measuring binac alone: {trl_error}\n{traceback.format_exc(limit=3)}")
        if callback.error is not None:
            raise callback.error
        while len(binac_times) < repeats:
            binac_step()
    saves = [binac.save_seconds() for _ in range(max(1, min(repeats, 3)))]
    return {
        "binac": binac_times,
        "trl": trl_times,
        "trl_error": trl_error,
        "binac_tokens": binac.tokens[1:],
        "binac_skipped": binac.skipped[1:],
        "reward": reward.value,
        "trl_tokens": lengths,
        "binac_profile": binac_profiles,
        "trl_profile": trl_profiles,
        "save": saves,
        "layout_note": batch_layout(cfg)[2],
        "threads_end": torch.get_num_threads(),
        "binac_obj": binac,
    }
