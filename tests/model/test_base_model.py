"""The from-scratch base model: builds in seconds (micro), reloads like a hub model, and builds atomically."""

import hashlib
import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from binac_core.benchmarks import synthetic as syn
from binac_core.foundation.config import load_config
from binac_core.model import pretrain

FAST = {"model.pretrain_steps": 12, "model.pretrain_examples": 400}
TINIEST = {"model.pretrain_steps": 2, "model.pretrain_examples": 100}


def micro(**extra):
    return load_config("micro", {**FAST, **extra})


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    out = tmp_path_factory.mktemp("models") / "base"
    logs: list[str] = []
    assert pretrain.build_base_model(micro(), out, log=logs.append) == out
    return out, logs


def test_reloads_through_auto_classes_and_generates(base, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out, _ = base
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    prompts = [syn.actor_messages(syn.make_row(q)) for q in ("7+5-3", "1-2-3+4")]
    enc = tok(
        [tok.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in prompts],
        return_tensors="pt",
        padding=True,
        add_special_tokens=False,
    )
    torch.manual_seed(0)
    seq = model.generate(**enc, max_new_tokens=6, do_sample=True, pad_token_id=tok.pad_token_id)
    assert seq.shape[0] == 2 and 1 <= seq.shape[1] - enc["input_ids"].shape[1] <= 6
    assert model.config.eos_token_id == tok.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>")


def test_meta_and_progress_log(base):
    out, logs = base
    meta = json.loads((out / "base_meta.json").read_text())
    assert meta["config_digest"] == micro().base_digest()
    assert len(meta["losses"]) >= 2 and meta["losses"][-1][0] == FAST["model.pretrain_steps"]
    assert meta["seconds"] > 0
    assert sum("ETA" in line for line in logs) >= 2
    # The base's identity, recorded where it is built: `sha256sum model.safetensors`.
    assert meta["weights_sha256"] == hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest()


def test_loss_only_on_assistant_turns():
    tok = pretrain.train_tokenizer(["Solve: 7+5", "7+5=2 A: 2", "Feedback: Looks correct."], 128)
    conv = syn.refine_messages(syn.make_row("7+5"), "7+5=2 A: 2", "Looks correct.")
    conv += [{"role": "assistant", "content": "7+5=2 A: 2"}]
    [(ids, mask)] = pretrain.encode(tok, [conv])
    trained = tok.decode([i for i, m in zip(ids, mask, strict=True) if m])
    assert trained == "7+5=2 A: 2<|im_end|>7+5=2 A: 2<|im_end|>"
    assert ids == tok(pretrain.render_chat(conv).removesuffix("\n"), add_special_tokens=False)["input_ids"]


def test_failed_build_leaves_no_partial_folder(tmp_path, monkeypatch):
    real = pretrain.train_tokenizer

    def tokenizer_that_fails_to_save(*args, **kwargs):
        tok = real(*args, **kwargs)

        def broken_save(folder, *a, **k):
            (folder / "tokenizer.json").write_text("{half")
            raise OSError("disk full")

        tok.save_pretrained = broken_save
        return tok

    monkeypatch.setattr(pretrain, "train_tokenizer", tokenizer_that_fails_to_save)
    out = tmp_path / "base"
    with pytest.raises(OSError, match="disk full"):
        pretrain.build_base_model(micro(**TINIEST), out, log=lambda _: None)
    assert list(tmp_path.iterdir()) == []
    # A previous model at the same place survives a failed rebuild.
    out.mkdir()
    (out / "config.json").write_text("{}")
    with pytest.raises(OSError):
        pretrain.build_base_model(micro(**TINIEST), out, log=lambda _: None)
    assert [p.name for p in tmp_path.iterdir()] == ["base"] and (out / "config.json").read_text() == "{}"


def test_leftovers_of_a_killed_build_are_removed(tmp_path):
    stale = tmp_path / ".base.tmp-4194301"  # a pid that does not run
    stale.mkdir()
    (stale / "model.safetensors").write_text("partial")
    out = pretrain.build_base_model(micro(**TINIEST), tmp_path / "base", log=lambda _: None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base"]
    assert (out / "config.json").exists()
