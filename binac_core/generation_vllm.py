"""vLLM generation backend (GPU only): one engine over the base model serving the actor and critic LoRA adapters
per request, loaded from the same checkpoint folders the trainer writes (adapter-only sync: no merge, no weight
push). Same interface and outputs as `HFBackend`.

What it does not do: it was written against the vLLM 0.31 offline API (`LLM.chat`, `LoRARequest`, per-request
seeds, `logprobs_mode="processed_logprobs"` so log-probs are those of the temperature-scaled sampling
distribution, as `HFBackend` returns) but this project's CI has no GPU, so it is not exercised by `make test`.
It samples with vLLM's own defaults (`generation_config="vllm"`), never a checkpoint's shipped sampling settings,
and stops on every end-of-turn id `generation.eos_token_ids` finds. Adapter ranks must be allowed by vLLM (`max_lora_rank`: 8, 16, 32, 64, ...). The training model (transformers +
peft) shares the GPU: `generation.vllm_gpu_memory_utilization` leaves it room.
"""

from __future__ import annotations

from binac_core.generation import AdapterRef, Generation, SamplingParams


class VLLMBackend:
    def __init__(self, base_dir: str, cfg):
        from vllm import LLM

        self.llm = LLM(
            model=str(base_dir),
            enable_lora=True,
            max_lora_rank=max(cfg.lora.rank, 8),
            max_loras=2,
            dtype=cfg.model.dtype,
            seed=0,
            gpu_memory_utilization=cfg.generation.vllm_gpu_memory_utilization,
            logprobs_mode="processed_logprobs",
            # vLLM's defaults, not the checkpoint's shipped generation_config (repetition_penalty, top_k...): the
            # sampled distribution must be plain softmax(logits / T), the one the loss assumes (as HFBackend).
            generation_config="vllm",
        )
        self._ids: dict[str, int] = {}
        self._stop_ids = _end_ids(base_dir, self.llm.get_tokenizer())

    def _lora(self, ref: AdapterRef | None):
        if ref is None:
            return None
        from vllm.lora.request import LoRARequest

        key = f"{ref.name}-{ref.digest}"
        # A new digest is a new adapter to vLLM: a fresh integer id makes it load the new weights.
        lora_id = self._ids.setdefault(key, len(self._ids) + 1)
        return LoRARequest(key, lora_id, ref.path)

    def generate(self, prompts: list[list[dict]], adapter: AdapterRef | None, params: SamplingParams):
        from vllm import SamplingParams as VSP

        greedy = params.temperature == 0
        sps = [
            VSP(n=1, max_tokens=params.max_new_tokens, temperature=params.temperature,
                top_p=1.0 if greedy else params.top_p, seed=params.seed + i, logprobs=0,
                repetition_penalty=1.0, stop_token_ids=self._stop_ids)
            for i in range(len(prompts))
        ]
        outs = self.llm.chat(prompts, sampling_params=sps, lora_request=self._lora(adapter), use_tqdm=False)
        result = []
        for o in outs:
            c = o.outputs[0]
            ids = list(c.token_ids)
            lps = [step[t].logprob for step, t in zip(c.logprobs or [], ids, strict=False)]
            result.append(Generation(c.text, list(o.prompt_token_ids), ids, lps))
        return result


def _end_ids(base_dir: str, tokenizer) -> list[int]:
    """Every end-of-turn id, as `HFBackend` stops on (`generation.eos_token_ids`), read from the checkpoint's
    configs without loading its weights."""
    from types import SimpleNamespace

    from transformers import AutoConfig, GenerationConfig

    from binac_core.generation import eos_token_ids

    try:
        gen_cfg = GenerationConfig.from_pretrained(str(base_dir))
    except OSError:  # no generation_config.json
        gen_cfg = None
    model = SimpleNamespace(generation_config=gen_cfg, config=AutoConfig.from_pretrained(str(base_dir)))
    return eos_token_ids(tokenizer, model)
