"""Build the tiny preset's base model from scratch on CPU: teacher corpus -> tokenizer -> Llama/Qwen2 -> pretrain.

The corpus covers the three roles one base model plays (solve; critique an attempt; solve again given a
critique) on the synthetic task family (`binac_core.benchmarks.synthetic`), written by the noisy teacher of
`binac_core.model.pretrain_teacher`: the attempts to critique and refine are noisy teacher traces, the critiques mix
helpful, misleading and vague ones. The result is saved with `save_pretrained` (model + tokenizer +
`base_meta.json`, which records the sha256 of the weights it saved: `binac_core.model.weights`) so that
`AutoModelForCausalLM` / `AutoTokenizer` load it like any hub model. It does not set
torch's thread count (the caller does) and does not cache: callers decide whether an existing folder is reused.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from binac_core.benchmarks import synthetic as syn
from binac_core.foundation.config import Config
from binac_core.model import pretrain_teacher as teacher
from binac_core.model import weights
from binac_core.model.tokenizer import IM_END, IM_START, render_chat, train_tokenizer

ROLE_MIX = (("solve", 0.2), ("critique", 0.3), ("refine", 0.5))
"""Share of each role in the corpus. A refine example also trains its first turn (a solve), so solving is
seen in 70 % of the examples; critiques are the only role whose prompt holds an untrained attempt."""
TOKENIZER_SAMPLE = 2000
"""Corpus examples the tokenizer is trained on (the vocabulary is tiny, more text changes nothing)."""

Conversation = list[dict]
"""Chat messages ending with an assistant message; the loss covers every assistant message and its end token."""


def teacher_example(task, question: str, rng: random.Random) -> Conversation:
    """One corpus conversation of a randomly chosen role, for one train-side question."""
    role = rng.choices([r for r, _ in ROLE_MIX], weights=[w for _, w in ROLE_MIX])[0]
    row = syn.make_row(question)
    solve = teacher.teacher_solve(question, rng, task.step_error_rate, task.carry_error_rate)
    if role == "solve":
        return syn.actor_messages(row) + [_assistant(solve)]
    feedback = teacher.teacher_critique(
        question,
        solve,
        rng,
        task.critic_helpful_rate,
        task.critic_misleading_rate,
        task.critic_false_approval_rate,
        task.critic_checks,
    )
    if role == "critique":
        return syn.critic_messages(row, solve) + [_assistant(feedback)]
    refined = teacher.teacher_refine(
        question,
        solve,
        feedback,
        rng,
        task.step_error_rate,
        task.approval_refinement,
        task.carry_error_rate,
        task.careful_after_hint,
    )
    return syn.refine_messages(row, solve, feedback) + [_assistant(refined)]


def _assistant(text: str) -> dict:
    return {"role": "assistant", "content": text}


def teacher_corpus(task, n: int) -> list[Conversation]:
    """`n` conversations from train-side questions only (drawn with replacement), deterministic in `task.data_seed`.
    Each question's difficulty is `task.difficulty`, or drawn uniformly from `task.pretrain_difficulties`."""
    mix = task.pretrain_difficulties
    rng = random.Random(f"teacher:{task.data_seed}:{task.difficulty if mix is None else '-'.join(map(str, mix))}")
    out: list[Conversation] = []
    while len(out) < n:
        question = syn.random_question(rng, task.difficulty if mix is None else rng.choice(mix), task.modulus)
        if syn.split_of(question) == "train":
            out.append(teacher_example(task, question, rng))
    return out


def _segments(conv: Conversation) -> list[tuple[str, bool]]:
    """The ChatML text of `conv` cut into (text, trained) pieces; assistant contents and their end token train."""
    segs = []
    for i, m in enumerate(conv):
        segs.append((f"{IM_START}{m['role']}\n", False))
        segs.append((m["content"] + IM_END, m["role"] == "assistant"))
        if i + 1 < len(conv):
            segs.append(("\n", False))
    return segs


def encode(tok, corpus: list[Conversation]) -> list[tuple[list[int], list[int]]]:
    """(token ids, 0/1 loss mask) per conversation, tokenized piecewise in one batch call.

    Pieces are cut at special tokens and newlines, which the pre-tokenizer always splits at, so the
    concatenated ids equal those of the whole text (checked on a sample).
    """
    segs = [_segments(c) for c in corpus]
    flat = tok([t for s in segs for t, _ in s], add_special_tokens=False)["input_ids"]
    out, k = [], 0
    for s in segs:
        ids, mask = [], []
        for _, trained in s:
            ids += flat[k]
            mask += [int(trained)] * len(flat[k])
            k += 1
        out.append((ids, mask))
    for conv, (ids, _) in list(zip(corpus, out, strict=True))[:64]:
        assert tok(render_chat(conv), add_special_tokens=False)["input_ids"][: len(ids)] == ids
    return out


def make_model(cfg: Config, tok) -> torch.nn.Module:
    """A randomly initialised Llama or Qwen2 causal LM with `cfg.model` sizes and the tokenizer's special ids."""
    m = cfg.model
    kwargs = dict(
        vocab_size=len(tok),
        hidden_size=m.hidden_size,
        intermediate_size=m.intermediate_size,
        num_hidden_layers=m.num_layers,
        num_attention_heads=m.num_heads,
        num_key_value_heads=m.num_heads,
        max_position_embeddings=m.max_positions,
        tie_word_embeddings=True,  # a quarter of a tiny model's parameters otherwise
        bos_token_id=None,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    config = LlamaConfig(**kwargs) if m.architecture == "llama" else Qwen2Config(**kwargs)
    model = (LlamaForCausalLM if m.architecture == "llama" else Qwen2ForCausalLM)(config)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    return model


def batches(data: list[tuple[list[int], list[int]]], batch_size: int, steps: int, rng: random.Random, pad_id: int):
    """`steps` right-padded batches (input_ids, attention_mask, labels); epochs reshuffle.

    Within chunks of 16 batches, examples are sorted by length so that padding stays small; the batch order is
    shuffled again so that the loss does not follow the length.
    """
    chunk = batch_size * 16
    made = 0
    while True:
        order = list(range(len(data)))
        rng.shuffle(order)
        for start in range(0, len(order), chunk):
            group = sorted(order[start : start + chunk], key=lambda i: len(data[i][0]))
            bs = [group[i : i + batch_size] for i in range(0, len(group), batch_size)]
            rng.shuffle(bs)
            for b in bs:
                if made == steps:
                    return
                made += 1
                yield collate([data[i] for i in b], pad_id)


def collate(items: list[tuple[list[int], list[int]]], pad_id: int):
    """Right-padded (input_ids, attention_mask, labels); labels are -100 outside the loss mask."""
    width = max(len(ids) for ids, _ in items)
    input_ids = torch.full((len(items), width), pad_id, dtype=torch.long)
    labels = torch.full((len(items), width), -100, dtype=torch.long)
    attention = torch.zeros((len(items), width), dtype=torch.long)
    for row, (ids, mask) in enumerate(items):
        t = torch.tensor(ids)
        input_ids[row, : len(ids)] = t
        labels[row, : len(ids)] = torch.where(torch.tensor(mask, dtype=torch.bool), t, -100)
        attention[row, : len(ids)] = 1
    return input_ids, attention, labels


def lr_at(step: int, steps: int, peak: float) -> float:
    """Linear warmup over 5 % of the steps, then cosine decay to 10 % of the peak."""
    warm = max(1, steps // 20)
    if step < warm:
        return peak * (step + 1) / warm
    t = (step - warm) / max(1, steps - warm)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def train(model, data, cfg: Config, log: Callable[[str], None], pad_id: int, device: str) -> list[tuple[int, float]]:
    """AdamW on the completion tokens; returns (step, mean loss since last log) every ~10 % of the steps."""
    m = cfg.model
    opt = torch.optim.AdamW(model.parameters(), lr=m.pretrain_lr, betas=(0.9, 0.95), weight_decay=0.01)
    rng = random.Random(m.pretrain_seed)
    every = max(1, m.pretrain_steps // 10)
    losses, window, t0 = [], [], time.monotonic()
    model.train()
    for step, (ids, mask, labels) in enumerate(batches(data, m.pretrain_batch_size, m.pretrain_steps, rng, pad_id)):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, m.pretrain_steps, m.pretrain_lr)
        ids, mask, labels = ids.to(device), mask.to(device), labels.to(device)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        window.append(loss.item())
        if (step + 1) % every == 0 or step + 1 == m.pretrain_steps:
            losses.append((step + 1, sum(window) / len(window)))
            window = []
            spent = time.monotonic() - t0
            eta = spent / (step + 1) * (m.pretrain_steps - step - 1)
            log(f"pretrain step {step + 1}/{m.pretrain_steps} loss {losses[-1][1]:.4f} ({spent:.0f}s, ETA {eta:.0f}s)")
    model.eval()
    return losses


def build_base_model(cfg: Config, out_dir: Path, log: Callable[[str], None] = print, device: str = "cpu") -> Path:
    """Build, pretrain and save the tiny base model into `out_dir` (replacing it); returns `out_dir`.

    `device` only changes where the training runs (the saved weights are on CPU, float32).
    Writes into a temporary sibling folder and renames it at the end, so a killed or failed build never
    leaves a partial model at `out_dir`.
    """
    out_dir = Path(out_dir)
    t0 = time.monotonic()
    torch.manual_seed(cfg.model.pretrain_seed)
    corpus = teacher_corpus(cfg.task, cfg.model.pretrain_examples)
    tok = train_tokenizer(_texts(corpus[:TOKENIZER_SAMPLE]), cfg.model.vocab_size)
    data = encode(tok, corpus)
    model = make_model(cfg, tok).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"pretrain: {len(data)} examples, vocab {len(tok)}, {n_params / 1e6:.2f}M parameters")
    losses = train(model, data, cfg, log, tok.pad_token_id, device)
    model.to("cpu")
    meta = {
        "config_digest": cfg.base_digest(),
        "preset": cfg.name,
        "parameters": n_params,
        "vocab_size": len(tok),
        "examples": len(data),
        "losses": losses,
        "seconds": round(time.monotonic() - t0, 1),
    }
    _save_atomically(model, tok, meta, out_dir)
    log(f"pretrain: saved {out_dir} in {meta['seconds']}s (final loss {losses[-1][1] if losses else float('nan'):.4f})")
    return out_dir


def _texts(corpus: list[Conversation]) -> list[str]:
    return [m["content"] for conv in corpus for m in conv]


def _save_atomically(model, tok, meta: dict, out_dir: Path) -> None:
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(out_dir)
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}"
    old = out_dir.parent / f".{out_dir.name}.old-{os.getpid()}"
    try:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        meta = {
            **meta,
            weights.RECORD: weights.weights_sha256(tmp),
        }  # the base's identity (binac_core/model/weights.py)
        (tmp / weights.META).write_text(json.dumps(meta, indent=1))
        if out_dir.exists():
            out_dir.rename(old)  # a folder cannot be renamed onto a non-empty one
        tmp.rename(out_dir)
    finally:
        if old.exists() and not out_dir.exists():
            old.rename(out_dir)  # the swap failed half-way: put the previous model back
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)


def _remove_stale(out_dir: Path) -> None:
    """Delete temporary siblings left by builds that were killed (their process no longer exists)."""
    for path in out_dir.parent.glob(f".{out_dir.name}.*-*"):
        pid = path.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
