"""The tokenizer trained here: exact round trips, ChatML special tokens, chat template, save/reload."""

import random

import pytest
from transformers import AutoTokenizer

from binac_core.benchmarks import synthetic as syn
from binac_core.benchmarks.prompts import SELF_CORRECT_FEEDBACK
from binac_core.model import pretrain_teacher as teacher
from binac_core.model.tokenizer import IM_END, IM_START, PAD, render_chat, train_tokenizer


def conversations(n: int = 40) -> list[list[dict]]:
    rng = random.Random(0)
    out = []
    for q in syn.sample_questions(0, 4, "train", n):
        row, attempt = syn.make_row(q), teacher.teacher_solve(q, rng, 0.3)
        feedback = teacher.teacher_critique(q, attempt, rng, 0.4, 0.3)
        refined = teacher.teacher_refine(q, attempt, feedback, rng, 0.3)
        out.append(syn.refine_messages(row, attempt, feedback) + [{"role": "assistant", "content": refined}])
        out.append(syn.critic_messages(row, attempt) + [{"role": "assistant", "content": feedback}])
    return out


@pytest.fixture(scope="module")
def tok():
    convs = conversations()
    return train_tokenizer([m["content"] for c in convs for m in c] + [SELF_CORRECT_FEEDBACK], 256)


def test_chatml_conversations_round_trip(tok):
    for conv in conversations(10):
        for gen in (False, True):
            text = tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=gen)
            assert text == render_chat(conv, add_generation_prompt=gen)
            assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text


@pytest.mark.parametrize("text", ["a  b\n\nc ", " 7 leading space", "x\n", "Re-check: {}[]~!", "\n\n"])
def test_plain_text_round_trips(tok, text):
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text


def test_special_tokens_are_single_ids(tok):
    for special in (IM_START, IM_END, PAD):
        ids = tok(special, add_special_tokens=False)["input_ids"]
        assert len(ids) == 1 and tok.convert_ids_to_tokens(ids[0]) == special
    assert tok.eos_token == IM_END and tok.pad_token == PAD
    assert len({tok.convert_tokens_to_ids(t) for t in (IM_START, IM_END, PAD)}) == 3


def test_newline_digits_and_operands_are_own_tokens(tok):
    ids = tok("7+5=2\n2-3=9 x", add_special_tokens=False)["input_ids"]
    assert tok.convert_ids_to_tokens(ids) == ["7", "+5", "=", "2", "\n", "2", "-3", "=", "9", "▁", "x"]


def test_generation_prompt_and_decoding_of_a_completion(tok):
    conv = syn.actor_messages(syn.make_row("7+5"))
    prompt = tok.apply_chat_template(conv, add_generation_prompt=True, tokenize=False)
    assert prompt.endswith(f"{IM_START}assistant\n")
    full = tok(prompt + "7+5=2 A: 2" + IM_END, add_special_tokens=False)["input_ids"]
    p_len = len(tok(prompt, add_special_tokens=False)["input_ids"])
    assert tok.decode(full[p_len:], skip_special_tokens=True) == "7+5=2 A: 2"


def test_save_and_reload(tok, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    conv = conversations(1)[0]
    text = again.apply_chat_template(conv, tokenize=False)
    assert text == render_chat(conv)
    assert again(text)["input_ids"] == tok(text)["input_ids"]
    assert again.eos_token == IM_END and again.padding_side == "left"
