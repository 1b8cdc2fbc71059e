"""Generation throughput of `HFBackend`: batch size 8 vs 64, the actor LoRA adapter active vs disabled, and binac's
decode loop vs transformers' `generate`.

Measured: generated tokens (completion tokens including the end-of-turn token, as binac counts them) per wall
second for the same 64 synthetic actor prompts, same sampling parameters, same seed; the four variants run
interleaved. Batch 8 = eight `generate` calls of 8 prompts, batch 64 = one call. Adapters disabled = the bare base
model through peft's `disable_adapter()` (the lean loop then reads the base weights as they are; with the actor it
merges the adapter into copies, binac_core/model/decode.py), which is what binac samples the KL reference and the
untrained baselines with. The `generate` variant is `HFBackend(lean=False)`, the path of non-Llama models. Included: chat-template rendering and decoding
(both part of `generate`); not included: model loading.

On the `smol` model (`smol_variants`, bench/smol.py): batch 1 vs 32 vs 64 with the actor adapter, and batch 32 (the
preset's generation batch) with adapters disabled. Batch 1 runs `SMOL_BATCH1_PROMPTS` prompts (one `generate` call
each) rather than 64: a tokens/s figure needs no more, and 64 single-prompt calls take minutes on a CPU. Batch 32
and 64 generate 32 and 64 prompts in one call each. Every call includes its prompt's prefill, as in the loop.

Optional (`--compare-threads`): the run's torch thread count vs the other of 1 and 2, on 16 prompts. Tiny
matrices gain little from intra-op threads, and on a busy machine OpenMP threads that spin-wait for a
descheduled sibling can cost far more than they give.
"""

from __future__ import annotations

import time

import torch

from binac_core.benchmarks.synthetic import actor_messages
from binac_core.foundation.config import Config
from binac_core.model.generation import AdapterRef, HFBackend, SamplingParams

PROMPTS = 64
THREAD_PROMPTS = 16
SMOL_BATCH1_PROMPTS = 4


def _variant(backend: HFBackend, prompts, adapter: AdapterRef | None, params: SamplingParams, threads=None):
    """A measurement callable: one full `generate` over `prompts`, returning tokens per second; with
    `threads`, torch's intra-op thread count is switched for this call only (outside the timed part)."""

    def run() -> float:
        before = torch.get_num_threads()
        torch.set_num_threads(threads or before)
        try:
            t0 = time.perf_counter()
            gens = backend.generate(prompts, adapter, params)
            return sum(len(g.token_ids) for g in gens) / (time.perf_counter() - t0)
        finally:
            torch.set_num_threads(before)

    return run


def other_threads(threads: int) -> int:
    """The thread count compared against the run's: 2 when the run uses 1, else 1."""
    return 2 if threads == 1 else 1


def _prompts(rows: list[dict], n: int) -> list[list[dict]]:
    """Actor prompts of the first `n` train rows (cycled if there are fewer)."""
    return [actor_messages(rows[i % len(rows)]) for i in range(n)]


def _params(cfg: Config) -> SamplingParams:
    g = cfg.generation
    return SamplingParams(g.max_new_tokens, g.temperature, g.top_p, seed=1)


def variants(cfg: Config, policy, actor: AdapterRef, rows: list[dict]) -> dict:
    """{name: callable}: batch 8 and batch 64 with the actor, batch 64 with adapters disabled, and batch 64 with the
    actor through transformers' `generate` instead of binac's decode loop (`HFBackend(lean=False)`); 64 prompts."""
    prompts, params = _prompts(rows, PROMPTS), _params(cfg)
    small, large = HFBackend(policy, batch_size=8), HFBackend(policy, batch_size=PROMPTS)
    return {
        "batch8_actor": _variant(small, prompts, actor, params),
        "batch64_actor": _variant(large, prompts, actor, params),
        "batch64_base": _variant(large, prompts, None, params),
        "batch64_actor_generate": _variant(HFBackend(policy, batch_size=PROMPTS, lean=False), prompts, actor, params),
    }


def thread_variants(cfg: Config, policy, actor: AdapterRef, rows: list[dict]) -> dict:
    """{name: callable}: one batch of `THREAD_PROMPTS` with the actor, at the run's thread count and at
    `other_threads(...)`. Fewer prompts than above because the slow side can be 10x slower on a busy machine."""
    prompts, params = _prompts(rows, THREAD_PROMPTS), _params(cfg)
    backend = HFBackend(policy, batch_size=THREAD_PROMPTS)
    return {
        "run_threads": _variant(backend, prompts, actor, params),
        "other_threads": _variant(backend, prompts, actor, params, other_threads(torch.get_num_threads())),
    }


def smol_variants(cfg: Config, policy, actor: AdapterRef, rows: list[dict]) -> dict:
    """{name: callable} of the smol bench (module docstring): batch 1 / 32 / 64 with the actor adapter, batch 32
    with adapters disabled. The first prompts of each are the same problems."""
    params = _params(cfg)
    one, b32, b64 = (HFBackend(policy, batch_size=n) for n in (1, 32, 64))
    p32 = _prompts(rows, 32)
    return {
        "batch1_actor": _variant(one, _prompts(rows, SMOL_BATCH1_PROMPTS), actor, params),
        "batch32_actor": _variant(b32, p32, actor, params),
        "batch64_actor": _variant(b64, _prompts(rows, 64), actor, params),
        "batch32_base": _variant(b32, p32, None, params),
    }


def warm_up(cfg: Config, policy, actor: AdapterRef, rows: list[dict], prompts: int = 4, new_tokens: int = 4) -> None:
    """A short generation (4 prompts, 4 new tokens) with and without the adapter, instead of a full discarded round
    (minutes at batch 64 on a CPU): first-call costs only; the GRPO comparison before it has generated already."""
    params = SamplingParams(new_tokens, cfg.generation.temperature, cfg.generation.top_p, seed=1)
    backend = HFBackend(policy, batch_size=prompts)
    for adapter in (actor, None):
        backend.generate(_prompts(rows, prompts), adapter, params)
