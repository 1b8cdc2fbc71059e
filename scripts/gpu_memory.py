"""The memory of one binac run on one GPU, trainer and vLLM side by side, computed from a model's shape and a
preset's settings: the numbers behind `generation.vllm_gpu_memory_utilization` in docs/gpu.md.

    python scripts/gpu_memory.py [--check-on-cpu]

One column per GPU preset (`GPU_PRESETS`: every preset whose model is a hub id of `MODELS`, the public configs of
Llama-3.2-1B/3B-Instruct and Qwen2.5-1.5B/7B-Instruct), read from the preset itself (`plan`): its dtype, LoRA rank,
micro-batch, the prompts each generate call sends (attempts: `batch_problems` × `group_size`; feedbacks,
refinements and look-aheads: that × `critic_group_size`), vLLM's `max_num_seqs` (`generation.batch_size`) and
`max_model_len` (`generation.max_prompt_tokens` + the longer answer budget: `generation_vllm.model_len`). What is
counted:
- Trainer (transformers + peft): the base weights; both adapters' weights, gradients and AdamW moments in float32
  (peft keeps LoRA weights in float32 next to a bf16 base only under autocast, so this is the upper end; binac
  keeps an optimizer per adapter); the activations autograd saves for one micro-batch's backward (`activation_bytes`:
  the tensors each decoder layer saves, counted below, times tokens and layers, at the longest sequence,
  `max_model_len`), without and with activation checkpointing (`train.activation_checkpointing`, which the GPU presets
  set); the LM head's one live chunk (`update.LOGPROB_CHUNK` positions × vocabulary in float32: logits, their softmax
  and its gradient) and the float32 copy of its weight the update computes it with (`binac_core.model.lm_head`).
- vLLM: its own copy of the base weights; LoRA slots (`max_loras` 2 × the rank); the KV cache of `max_num_seqs`
  sequences at `max_model_len` (a call's other prompts wait in vLLM's queue, so this is the most it holds at once),
  and of one sequence at `max_model_len`, which vLLM must fit before it starts; CUDA graphs and sampler workspace are
  not counted (vLLM reports them at start; typically a few hundred MiB). With sleep mode (`generation.vllm_sleep_mode`)
  the engine's weights and KV cache leave the device while the trainer updates.

Saved per token and layer: whatever autograd keeps, counted on one layer of the real shape (`saved_per_token`): norm inputs and their
float32 upcasts, projection inputs, rotary intermediates, attention inputs and output, the MLP's gate and up
outputs, LoRA intermediates. Frozen base weights and buffers are not activations and are left out.

`--check-on-cpu` runs the same count against a measurement: the smol model (SmolLM2-135M, float32, the smol presets'
LoRA) one forward and backward of the actor loss on CPU, its peak memory growth against `activation_bytes` for that
shape. What it does not do: measure a GPU (none is available here; docs/gpu.md says what to check on one).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

GIB = 2**30
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class Shape:
    name: str
    params: int
    """total parameters (tied embeddings counted once)"""
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    architecture: str = "llama"
    """transformers' model type (`qwen2`: biases on q, k and v)"""
    hub_id: str = ""
    """the model's hub id, as the presets name it"""
    context: int = 0
    """`max_position_embeddings`"""

    @property
    def kv(self) -> int:
        return self.kv_heads * self.head_dim


MODELS = (
    # meta-llama/Llama-3.2-1B-Instruct and -3B-Instruct config.json (tied embeddings)
    Shape(
        "Llama-3.2-1B",
        1_235_814_400,
        2048,
        16,
        32,
        8,
        64,
        8192,
        128256,
        "llama",
        "meta-llama/Llama-3.2-1B-Instruct",
        131072,
    ),
    Shape(
        "Llama-3.2-3B",
        3_212_749_824,
        3072,
        28,
        24,
        8,
        128,
        8192,
        128256,
        "llama",
        "meta-llama/Llama-3.2-3B-Instruct",
        131072,
    ),
    # Qwen/Qwen2.5-1.5B-Instruct (tied embeddings) and -7B-Instruct (untied) config.json
    Shape(
        "Qwen2.5-1.5B", 1_543_714_304, 1536, 28, 12, 2, 128, 8960, 151936, "qwen2", "Qwen/Qwen2.5-1.5B-Instruct", 32768
    ),
    Shape("Qwen2.5-7B", 7_615_616_512, 3584, 28, 28, 4, 128, 18944, 152064, "qwen2", "Qwen/Qwen2.5-7B-Instruct", 32768),
)


def io_dims(s: Shape) -> dict[str, tuple[int, int]]:
    """(in, out) features of each LoRA-adapted projection."""
    h, kv, i = s.hidden, s.kv, s.intermediate
    return {
        "q_proj": (h, s.heads * s.head_dim),
        "k_proj": (h, kv),
        "v_proj": (h, kv),
        "o_proj": (s.heads * s.head_dim, h),
        "gate_proj": (h, i),
        "up_proj": (h, i),
        "down_proj": (i, h),
    }


def lora_params(s: Shape, rank: int) -> int:
    """Parameters of one adapter: r × (in + out) per projection and layer."""
    return s.layers * sum(rank * (a + b) for a, b in io_dims(s).values())


def saved_per_token(s: Shape, rank: int, dtype: str = "bfloat16", seq: int = 128, square: bool = False) -> int:
    """Bytes autograd keeps per token and decoder layer for the backward of a LoRA update, counted (not estimated):
    one decoder layer of this shape, the presets' LoRA (rank `rank` on the 7 projections) run as an update runs it
    (eval mode, so no dropout; `fused_lora.merged_lora_forward`),
    one forward of `seq` tokens on CPU under `torch.autograd.graph.saved_tensors_hooks`, each saved storage counted
    once, weights and buffers (saved for the input's gradient, not activations) left out. Tensors of shape [..., seq, seq] (attention probabilities, which CPU attention saves and the GPU's fused
    attention does not; it keeps its output and log-sum-exp) are left out unless `square`."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    from binac_core.model.fused_lora import merged_lora_forward

    cfg = AutoConfig.for_model(
        s.architecture,
        hidden_size=s.hidden,
        intermediate_size=s.intermediate,
        num_hidden_layers=1,
        num_attention_heads=s.heads,
        num_key_value_heads=s.kv_heads,
        head_dim=s.head_dim,
        vocab_size=256,
        max_position_embeddings=4 * seq,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg).to(getattr(torch, dtype))
    model = get_peft_model(
        model, LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.05, target_modules=list(PROJECTIONS))
    )
    model.eval()  # as `update.policy_update` runs it: no dropout, LoRA through `merged_lora_forward`
    layer = model.get_base_model().model.layers[0]
    weights = {q.untyped_storage().data_ptr() for q in model.parameters()}
    weights |= {b.untyped_storage().data_ptr() for b in model.buffers()}
    seen: dict[int, int] = {}
    inside = [False]

    def pack(t):
        if (
            inside[0]
            and t.untyped_storage().data_ptr() not in weights
            and (square or not (t.dim() >= 2 and t.shape[-1] == t.shape[-2] == seq))
        ):
            key = t.untyped_storage().data_ptr()
            seen[key] = max(seen.get(key, 0), t.untyped_storage().nbytes())
        return t

    layer.register_forward_pre_hook(lambda *a: inside.__setitem__(0, True))
    layer.register_forward_hook(lambda *a: inside.__setitem__(0, False))
    for name, q in model.named_parameters():
        q.requires_grad_("lora_" in name and ".default." in name)
    ids = torch.randint(0, 256, (1, seq))
    with merged_lora_forward(model), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=ids).logits.float().sum()
    return sum(seen.values()) // seq


def activation_bytes(s: Shape, rank: int, tokens: int, dtype: str = "bfloat16") -> int:
    return s.layers * saved_per_token(s, rank, dtype) * tokens


def kv_bytes_per_token(s: Shape, e: int) -> int:
    return 2 * s.layers * s.kv * e


@dataclass(frozen=True)
class Plan:
    """What one GPU preset asks of the device (`plan`)."""

    preset: str
    shape: Shape
    rank: int
    bytes_per_weight: int
    micro_batch: int
    max_model_len: int
    """the longest sequence, prompt and answer (vLLM's `max_model_len`, the update's longest micro-batch row)"""
    max_num_seqs: int
    """vLLM's running batch (`generation.batch_size`)"""
    attempts: int
    """prompts of the attempts' generate call"""
    second_turn: int
    """prompts of each feedback, refinement and look-ahead call"""


GPU_PRESETS = (
    "llama1b-math",
    "llama1b-mbpp",
    "llama3b-math",
    "llama3b-mbpp",
    "llama3b-gpqa",
    "qwen1_5b-math",
    "qwen7b-gpqa",
)
"""Every preset of a model in `MODELS` (tests/integration/test_gpu_memory.py checks there is no other)."""


def plan(preset: str) -> Plan:
    """The preset's settings that size its memory, with its model's shape (`MODELS`, by hub id)."""
    from binac_core.foundation.config import load_config
    from binac_core.model.generation_vllm import model_len

    cfg = load_config(preset)
    shape = next(m for m in MODELS if m.hub_id == cfg.model.hub_id)
    return Plan(
        preset,
        shape,
        cfg.lora.rank,
        2 if cfg.model.dtype != "float32" else 4,
        cfg.train.micro_batch_size,
        model_len(cfg, shape.context),
        cfg.generation.batch_size,
        *prompts_per_call(cfg),
    )


def prompts_per_call(cfg) -> tuple[int, int]:
    """(prompts of the attempts' generate call, of each feedback, refinement and look-ahead call) of one iteration
    under `cfg` (`binac_core.rl.episodes`: `group_size` attempts per problem, `critic_group_size` feedbacks per
    attempt, one refinement per feedback)."""
    t = cfg.train
    return t.batch_problems * t.group_size, t.batch_problems * t.group_size * t.critic_group_size


def budget(p: Plan, chunk: int = 1024, per_token: int | None = None) -> dict[str, float]:
    """GiB of each part for plan `p` (module docstring). With activation checkpointing a layer keeps only its
    input (h × e per token) and one layer's saved tensors live during its recomputation. `per_token`: the bytes
    `saved_per_token` counts for the shape and rank (computed here when None)."""
    s, e = p.shape, p.bytes_per_weight
    per_token = saved_per_token(s, p.rank) if per_token is None else per_token
    parts = trainer_parts(s, p.rank, p.micro_batch, p.max_model_len, chunk, e=e, chunk=chunk, per_token=per_token)
    kept = trainer_parts(
        s, p.rank, p.micro_batch, p.max_model_len, chunk, e=e, checkpointing=False, chunk=chunk, per_token=per_token
    )
    running = min(p.max_num_seqs, max(p.attempts, p.second_turn))
    return {
        k: v / GIB
        for k, v in {
            "trainer: base weights": parts["base weights"],
            "trainer: 2 adapters (weights, grads, AdamW, fp32)": parts["2 adapters (weights, grads, AdamW, fp32)"],
            "trainer: activations of a micro-batch at max_model_len": kept["activations"],
            "trainer: the same with activation checkpointing": parts["activations (checkpointed)"],
            "trainer: LM head chunk (fp32 logits, softmax, grad)": parts["LM head chunk (fp32 logits, softmax, grad)"],
            "trainer: LM head weight in fp32": parts["LM head weight in fp32"],
            "vLLM: base weights": s.params * e,
            f"vLLM: LoRA slots (2 x rank {p.rank})": 2 * lora_params(s, p.rank) * e,
            "vLLM: KV cache, max_num_seqs sequences at max_model_len": kv_bytes_per_token(s, e)
            * running
            * p.max_model_len,
            "vLLM: KV cache of one sequence at max_model_len (needed to start)": kv_bytes_per_token(s, e)
            * p.max_model_len,
            "vLLM: the same at the model's whole context": kv_bytes_per_token(s, e) * s.context,
        }.items()
    }


def trainer_parts(
    s: Shape,
    rank: int,
    sequences: int,
    length: int,
    completion_tokens: int,
    e: int = 2,
    checkpointing: bool = True,
    chunk: int = 1024,
    dtype: str = "bfloat16",
    per_token: int | None = None,
    head_in_fp32: bool = True,
) -> dict[str, int]:
    """Bytes the trainer holds at the peak of one micro-batch's forward and backward, part by part, for any shape
    and lengths: `sequences` sequences padded to `length` tokens (prompt + completion), `completion_tokens` of them
    scored (the LM head's rows). The same terms as `budget`'s trainer rows: base weights (`e` bytes a parameter),
    both adapters with gradients and AdamW moments in float32, the activations (with `checkpointing`, each layer's
    input plus one layer's saved tensors; without, every layer's), and the LM head's one live chunk of
    min(`chunk`, `completion_tokens`) rows, and the float32 copy of the head's weight it is computed with where the
    weights are not float32 (`head_in_fp32`; `binac_core.model.lm_head`). `per_token`: the bytes `saved_per_token`
    counts for this shape, rank and `dtype` (computed here when None). Counted, not measured: temporaries and
    allocator slack come on top."""
    per_token = saved_per_token(s, rank, dtype) if per_token is None else per_token
    tokens = sequences * length
    layer = per_token * tokens
    activations = s.layers * s.hidden * e * tokens + layer if checkpointing else s.layers * layer
    return {
        "base weights": s.params * e,
        "2 adapters (weights, grads, AdamW, fp32)": 2 * lora_params(s, rank) * 16,
        "activations" + (" (checkpointed)" if checkpointing else ""): activations,
        "LM head chunk (fp32 logits, softmax, grad)": 3 * min(chunk, completion_tokens) * s.vocab * 4,
        "LM head weight in fp32": s.vocab * s.hidden * 4 if head_in_fp32 and e < 4 else 0,
    }


SUMS = {
    "**trainer, without activation checkpointing**": ("activations of a micro-batch at max_model_len",),
    "**trainer, with activation checkpointing**": ("the same with activation checkpointing",),
}
"""Total rows: the trainer's fixed parts plus the activations named."""


def table(presets: tuple[str, ...] = GPU_PRESETS) -> str:
    """The markdown table of docs/gpu.md: one column per preset."""
    plans = [plan(name) for name in presets]
    per_token = {(p.shape.name, p.rank): saved_per_token(p.shape, p.rank) for p in plans}
    rows = [budget(p, per_token=per_token[(p.shape.name, p.rank)]) for p in plans]
    lines = [
        "| GiB | " + " | ".join(f"`{p.preset}`" for p in plans) + " |",
        "|---|" + "---|" * len(plans),
        "| model | " + " | ".join(p.shape.name for p in plans) + " |",
        "| prompts per call: attempts / feedback, refinement, look-ahead | "
        + " | ".join(f"{p.attempts} / {p.second_turn}" for p in plans)
        + " |",
        "| vLLM `max_num_seqs` / `max_model_len` (tokens) | "
        + " | ".join(f"{p.max_num_seqs} / {p.max_model_len}" for p in plans)
        + " |",
        "| update micro-batch (sequences) | " + " | ".join(str(p.micro_batch) for p in plans) + " |",
    ]
    for key in rows[0]:
        lines.append(f"| {key} | " + " | ".join(f"{r[key]:.2f}" for r in rows) + " |")
    fixed = [sum(v for k, v in r.items() if k.startswith("trainer") and "activ" not in k) for r in rows]
    for label, (part,) in SUMS.items():
        lines.append(
            f"| {label} | "
            + " | ".join(f"**{f + r['trainer: ' + part]:.1f}**" for f, r in zip(fixed, rows, strict=True))
            + " |"
        )
    engine = [
        sum(v for k, v in r.items() if k.startswith("vLLM") and ("one sequence" not in k and "whole context" not in k))
        for r in rows
    ]
    lines.append(
        "| **vLLM, `max_num_seqs` sequences at full length** | " + " | ".join(f"**{t:.1f}**" for t in engine) + " |"
    )
    lines.append(
        "| KV cache per token (KiB) | "
        + " | ".join(f"{kv_bytes_per_token(p.shape, p.bytes_per_weight) / 1024:.0f}" for p in plans)
        + " |"
    )
    lines.append(
        "| saved activations per token and layer (KiB) | "
        + " | ".join(f"{per_token[(p.shape.name, p.rank)] / 1024:.1f}" for p in plans)
        + " |"
    )
    return "\n".join(lines)


def check_on_cpu(batch: int = 4, prompt: int = 64, answer: int = 192) -> dict:
    """Peak RSS growth of one actor-loss forward + backward of smol (float32, the smol presets' LoRA) against
    `activation_bytes` for the same shape."""
    import resource  # noqa: F401

    import torch
    from transformers import AutoConfig

    from binac_core.foundation.config import load_config
    from binac_core.model.policy import Policy
    from binac_core.model.smol import checkpoint
    from binac_core.rl.update import Sample, sequence_logprobs

    cfg = load_config("smol-synthetic")
    base = checkpoint()
    c = AutoConfig.from_pretrained(str(base))
    shape = Shape(
        "smol",
        0,
        c.hidden_size,
        c.num_hidden_layers,
        c.num_attention_heads,
        c.num_key_value_heads,
        c.hidden_size // c.num_attention_heads,
        c.intermediate_size,
        c.vocab_size,
    )
    policy = Policy(base, cfg, seed=0)
    policy.train_mode("actor", cfg.train.actor_lr)
    policy.model.eval()  # as `update.policy_update`
    gen = torch.Generator().manual_seed(0)
    samples = [
        Sample(
            torch.randint(10, 1000, (prompt,), generator=gen).tolist(),
            torch.randint(10, 1000, (answer,), generator=gen).tolist(),
            [],
            0.0,
        )
        for _ in range(batch)
    ]
    torch.set_num_threads(1)
    before = _rss()
    from binac_core.model.fused_lora import merged_lora_forward

    with merged_lora_forward(policy.model):
        logp, mask = sequence_logprobs_with_grad(policy, samples, sequence_logprobs)
        after_forward = _rss()
        (logp * mask).sum().backward()
    seq = prompt + answer
    layers = shape.layers * saved_per_token(shape, cfg.lora.rank, "float32", seq, square=True) * batch * seq
    head = 3 * batch * answer * shape.vocab * 4  # the one LM-head chunk: logits, scaled logits, log-softmax
    return {
        "measured_forward_growth_mib": round((after_forward - before) / 2**20),
        "counted_layers_mib": round(layers / 2**20),
        "counted_lm_head_mib": round(head / 2**20),
        "tokens": batch * seq,
    }


def sequence_logprobs_with_grad(policy, samples, fn):
    import torch

    with torch.enable_grad():
        return fn(policy.model, samples, policy.tokenizer.pad_token_id, 1.0)


def _rss() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check-on-cpu", action="store_true")
    args = p.parse_args(argv)
    print(table())
    if args.check_on_cpu:
        print(check_on_cpu())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
