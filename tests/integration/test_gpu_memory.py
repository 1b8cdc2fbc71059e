"""`scripts/gpu_memory.py`'s count of the trainer's memory for any shape and lengths (`trainer_parts`), against
the rows of its table (`budget`) at the same shape."""

import sys

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import gpu_memory as gm  # noqa: E402


def test_trainer_parts_are_budgets_trainer_rows_for_any_lengths(monkeypatch):
    shape = gm.Shape("t", 10_000, 64, 2, 4, 2, 16, 128, 512)
    rows = gm.budget(shape, rank=4, e=2, micro_batch=2, prompt=6, answer=10, gen_batch=1, chunk=8)
    per_token = gm.saved_per_token(shape, 4)
    kept = gm.trainer_parts(shape, 4, 2, 16, 20, e=2, checkpointing=False, chunk=8, per_token=per_token)
    checkpointed = gm.trainer_parts(shape, 4, 2, 16, 20, e=2, checkpointing=True, chunk=8, per_token=per_token)
    assert kept["base weights"] / gm.GIB == rows["trainer: base weights"]
    assert kept["activations"] / gm.GIB == rows["trainer: activations, micro-batch 2 x 16 tokens"]
    assert (
        checkpointed["activations (checkpointed)"] / gm.GIB == rows["trainer: the same with activation checkpointing"]
    )
    assert (
        kept["LM head chunk (fp32 logits, softmax, grad)"] / gm.GIB
        == rows["trainer: LM head chunk (fp32 logits, softmax, grad)"]
    )
    few = gm.trainer_parts(shape, 4, 1, 16, 3, chunk=8, per_token=per_token)  # fewer completion rows than a chunk
    assert few["LM head chunk (fp32 logits, softmax, grad)"] == 3 * 3 * 512 * 4
    monkeypatch.setattr(gm, "saved_per_token", lambda *a, **k: pytest.fail("per_token given: no layer to count"))
    assert gm.trainer_parts(shape, 4, 2, 16, 20, e=2, chunk=8, per_token=per_token) == checkpointed
