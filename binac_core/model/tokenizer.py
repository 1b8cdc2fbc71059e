"""A small BPE tokenizer trained in process on the synthetic corpus, wrapped as a ChatML `PreTrainedTokenizerFast`.

Pre-tokenization keeps every digit, space, newline and punctuation mark a token of its own, except that an
operator and the digit after it (`+5`, `-3`) may merge into one token: a step `2-3=9` is then `2`, `-3`, `=`,
`9`, so a result depends on two earlier tokens instead of three, which a tiny model learns much sooner.
BPE merges letters into words and nothing else. Spaces become `▁` through `Metaspace` with
`prepend_scheme="never"` (the default would add a space after every special token). The alphabet is printable
ASCII plus newline, so any ASCII text round-trips exactly; other characters become `<unk>`.
This module does not build or train models.
"""

from __future__ import annotations

import string
from collections.abc import Iterable

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

IM_START, IM_END, PAD, UNK = "<|im_start|>", "<|im_end|>", "<|pad|>", "<|unk|>"
SPECIAL_TOKENS = [PAD, UNK, IM_START, IM_END]
ALPHABET = sorted(set(string.printable) - set("\t\r\x0b\x0c") | {"\n"})
# ChatML, as Qwen2 writes it; `add_generation_prompt` opens the assistant turn.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def render_chat(messages: list[dict], add_generation_prompt: bool = False) -> str:
    """`CHAT_TEMPLATE` in plain Python (same text, ~100x faster than jinja for building a corpus)."""
    text = "".join(f"{IM_START}{m['role']}\n{m['content']}{IM_END}\n" for m in messages)
    return text + (f"{IM_START}assistant\n" if add_generation_prompt else "")


def _pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    # After Metaspace, a word is `▁` + letters and an operand is `+`/`-` + digit; every other character is
    # isolated so BPE never merges it.
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never", split=False),
            pre_tokenizers.Split(Regex("▁?[A-Za-z]+|[+-][0-9]|[^A-Za-z]"), behavior="isolated"),
        ]
    )


def train_tokenizer(texts: Iterable[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """Train BPE on `texts` (the rendered corpus) up to `vocab_size` entries and wrap it for transformers.

    The vocabulary never drops below the alphabet plus special tokens, whatever `vocab_size` says.
    """
    tok = Tokenizer(models.BPE(unk_token=UNK))
    tok.pre_tokenizer = _pre_tokenizer()
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="never", split=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=ALPHABET + ["▁"],
        limit_alphabet=len(ALPHABET) + 1,
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return wrap(tok)


def wrap(tok: Tokenizer) -> PreTrainedTokenizerFast:
    """The `tokenizers` object as a ChatML `PreTrainedTokenizerFast` (eos `<|im_end|>`, left padding)."""
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token=IM_END,
        pad_token=PAD,
        unk_token=UNK,
        additional_special_tokens=[IM_START],
        clean_up_tokenization_spaces=False,
        padding_side="left",  # batched generation pads on the left
        model_max_length=4096,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast
