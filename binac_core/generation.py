"""Generation backends: chat prompts + an adapter + sampling parameters in; texts, token ids and log-probs out.

Callers depend only on `GenerationBackend.generate`. Two implementations:
- `HFBackend` (here): transformers `generate` on the in-process PEFT model; batched, KV cache, left padding,
  seeded sampling (one torch generator seed per call, so a re-run reproduces the same samples on the same device).
- `VLLMBackend` (`binac_core.generation_vllm`, GPU only): one vLLM engine with `enable_lora=True` serving the
  actor and critic adapters per request from their checkpoint folders.

Log-probs are those of the sampling distribution (logits / temperature), which is what the training loss
recomputes (`binac_core.losses.sequence_logprobs`), so the PPO ratio starts at exactly 1 on-policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch


@dataclass(frozen=True)
class AdapterRef:
    """A LoRA adapter checkpoint: its name in the model (`actor`/`critic`), folder, and content digest."""

    name: str
    path: str
    digest: str


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
    """transformers generation over a `binac_core.policy.Policy` (base model + named LoRA adapters)."""

    def __init__(self, policy, batch_size: int = 64):
        self.policy = policy
        self.batch_size = batch_size
        self.truncated_prompts = 0

    def render(self, messages: list[dict], max_new_tokens: int) -> list[int]:
        """Chat-template token ids; a prompt longer than the model's context minus the answer budget keeps its
        end (the part nearest the answer) and is counted in `truncated_prompts`."""
        tok = self.policy.tokenizer
        ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
        room = self.policy.model.config.max_position_embeddings - max_new_tokens
        if len(ids) > room:
            self.truncated_prompts += 1
            ids = ids[-room:]
        return ids

    @torch.no_grad()
    def generate(self, prompts, adapter, params):
        out: list[Generation] = []
        gen = torch.Generator().manual_seed(params.seed)
        with self.policy.using(adapter):
            for start in range(0, len(prompts), self.batch_size):
                chunk = [self.render(m, params.max_new_tokens) for m in prompts[start : start + self.batch_size]]
                out.extend(self._generate_ids(chunk, params, gen))
        return out

    def _generate_ids(self, prompt_ids: list[list[int]], params: SamplingParams, gen: torch.Generator):
        model, tok = self.policy.model, self.policy.tokenizer
        pad, eos = tok.pad_token_id, tok.eos_token_id
        width = max(len(p) for p in prompt_ids)
        input_ids = torch.full((len(prompt_ids), width), pad, dtype=torch.long)
        mask = torch.zeros_like(input_ids)
        for i, p in enumerate(prompt_ids):
            input_ids[i, width - len(p) :] = torch.tensor(p)
            mask[i, width - len(p) :] = 1
        greedy = params.temperature == 0
        # transformers' sampler draws from the global torch RNG: seed it from our generator for reproducibility.
        torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=gen)))
        res = model.generate(
            input_ids=input_ids.to(self.policy.device),
            attention_mask=mask.to(self.policy.device),
            max_new_tokens=params.max_new_tokens,
            do_sample=not greedy,
            temperature=None if greedy else params.temperature,
            top_p=None if greedy else params.top_p,
            top_k=None,
            pad_token_id=pad,
            eos_token_id=eos,
            output_logits=True,
            return_dict_in_generate=True,
        )
        new = res.sequences[:, width:]
        logits = torch.stack(res.logits, dim=1).float()
        logp = torch.log_softmax(logits / (params.temperature or 1.0), dim=-1)
        tok_logp = logp.gather(-1, new.unsqueeze(-1)).squeeze(-1).cpu()
        new = new.cpu()
        out = []
        for i, p in enumerate(prompt_ids):
            ids = new[i].tolist()
            n = ids.index(eos) + 1 if eos in ids else len(ids)
            text = tok.decode(ids[:n], skip_special_tokens=True)
            out.append(Generation(text, p, ids[:n], tok_logp[i, :n].tolist()))
        return out
