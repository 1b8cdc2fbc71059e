"""A tiny random Llama checkpoint saved like a hub model, for tests of the real loading/sampling/training paths
(no pretraining, seconds to build). Optionally hostile, as real checkpoints are: a shipped `generation_config.json`
with a repetition penalty, top-k, a temperature, `min_new_tokens` and `no_repeat_ngram_size`, and two end-of-turn
tokens (ChatML `<|im_end|>`, the tokenizer's eos, and Llama 3's `<|eot_id|>`)."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

from binac_core.model.tokenizer import IM_START, train_tokenizer

EOT = "<|eot_id|>"
TEXTS = ["Solve: 7+5-3 A: 9", "Feedback: step 2 is wrong.", "1+2=3 then 3*4=12 A: 12", "Looks correct."] * 4


def hostile_generation_config(eos_token_id: list[int], pad_token_id: int) -> GenerationConfig:
    """A hub checkpoint's generation settings, which binac must not sample with: sampling at T = 0.3 with top-k 3
    and top-p 0.5, and a repetition penalty, no repeated bigram and at least 4 new tokens."""
    sampling = dict(do_sample=True, temperature=0.3, top_k=3, top_p=0.5)
    constraints = dict(repetition_penalty=1.3, no_repeat_ngram_size=2, min_new_tokens=4)
    return GenerationConfig(**sampling, **constraints, eos_token_id=eos_token_id, pad_token_id=pad_token_id)


def build_checkpoint(
    out: Path, hostile: bool = True, eos_logit: float = 0.0, max_positions: int = 128, seed: int = 0
) -> Path:
    """Save tokenizer + model (+ a hostile generation config) into `out`. `eos_logit` > 0 adds about that much to
    the logits of both end-of-turn tokens at every position (a constant residual feature read by the LM head),
    so that samples end on either of them."""
    tok = train_tokenizer(TEXTS, 96)
    tok.add_special_tokens({"additional_special_tokens": [IM_START, EOT]})
    im_end, eot = tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids(EOT)
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=max_positions,
        initializer_range=0.2,
        bos_token_id=None,
        eos_token_id=im_end,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(cfg)
    if eos_logit:
        with torch.no_grad():
            model.model.embed_tokens.weight[:, 0] = 20.0  # residual dim 0 ~ constant, dominant after RMSNorm
            model.lm_head.weight[:, 0] = 0.0
            scale = eos_logit / cfg.hidden_size**0.5  # after RMSNorm, dim 0 ~ sqrt(hidden)
            model.lm_head.weight[[im_end, eot], 0] = scale
    if hostile:
        model.generation_config = hostile_generation_config([im_end, eot], tok.pad_token_id)
    else:
        model.generation_config = GenerationConfig(eos_token_id=im_end, pad_token_id=tok.pad_token_id)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return Path(out)
