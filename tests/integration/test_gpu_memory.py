"""`scripts/gpu_memory.py`'s count of the trainer's memory for any shape and lengths (`trainer_parts`), against
the rows of its table (`budget`) for a plan of the same shape; the table covers every GPU preset, and the prompts it
counts per generate call are those one iteration sends."""

import sys
from dataclasses import replace

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import gpu_memory as gm  # noqa: E402

SHAPE = gm.Shape("t", 10_000, 64, 2, 4, 2, 16, 128, 512, context=4096)


def test_trainer_parts_are_budgets_trainer_rows_for_any_lengths(monkeypatch):
    plan = gm.Plan("t", SHAPE, 4, 2, micro_batch=2, max_model_len=16, max_num_seqs=3, attempts=4, second_turn=8)
    per_token = gm.saved_per_token(SHAPE, 4)
    rows = gm.budget(plan, chunk=8, per_token=per_token)
    kept = gm.trainer_parts(SHAPE, 4, 2, 16, 20, e=2, checkpointing=False, chunk=8, per_token=per_token)
    checkpointed = gm.trainer_parts(SHAPE, 4, 2, 16, 20, e=2, checkpointing=True, chunk=8, per_token=per_token)
    assert kept["base weights"] / gm.GIB == rows["trainer: base weights"]
    assert kept["activations"] / gm.GIB == rows["trainer: activations of a micro-batch at max_model_len"]
    assert (
        checkpointed["activations (checkpointed)"] / gm.GIB == rows["trainer: the same with activation checkpointing"]
    )
    assert (
        kept["LM head chunk (fp32 logits, softmax, grad)"] / gm.GIB
        == rows["trainer: LM head chunk (fp32 logits, softmax, grad)"]
    )
    assert rows["trainer: LM head weight in fp32"] * gm.GIB == 512 * 64 * 4  # vocabulary x hidden x 4 bytes
    assert gm.trainer_parts(SHAPE, 4, 2, 16, 20, e=4, per_token=per_token)["LM head weight in fp32"] == 0
    # vLLM runs at most max_num_seqs (3) of a call's 8 prompts at once: 3 sequences of 16 tokens, 2 x 2 x 2 x 2 bytes
    assert rows["vLLM: KV cache, max_num_seqs sequences at max_model_len"] * gm.GIB == 3 * 16 * (2 * 2 * 2 * 16 * 2)
    assert rows["vLLM: KV cache of one sequence at max_model_len (needed to start)"] * gm.GIB == 16 * 256
    assert rows["vLLM: the same at the model's whole context"] * gm.GIB == 4096 * 256
    few = gm.trainer_parts(SHAPE, 4, 1, 16, 3, chunk=8, per_token=per_token)  # fewer completion rows than a chunk
    assert few["LM head chunk (fp32 logits, softmax, grad)"] == 3 * 3 * 512 * 4
    monkeypatch.setattr(gm, "saved_per_token", lambda *a, **k: pytest.fail("per_token given: no layer to count"))
    assert gm.trainer_parts(SHAPE, 4, 2, 16, 20, e=2, chunk=8, per_token=per_token) == checkpointed
    assert (
        gm.budget(replace(plan, max_num_seqs=100), chunk=8, per_token=per_token)[
            "vLLM: KV cache, max_num_seqs sequences at max_model_len"
        ]
        * gm.GIB
        == 8 * 16 * 256
    ), "never more sequences at once than a call sends"


def test_the_table_covers_every_gpu_preset_at_its_own_lengths():
    from binac_core.foundation.config import load_config, preset_names
    from binac_core.model.generation_vllm import model_len

    hub = [n for n in preset_names() if load_config(n).model.source == "hub"]
    assert sorted(gm.GPU_PRESETS) == sorted(hub)
    for name in hub:
        cfg, plan = load_config(name), gm.plan(name)
        assert plan.shape.hub_id == cfg.model.hub_id and plan.max_num_seqs == cfg.generation.batch_size
        g = cfg.generation
        assert plan.max_model_len == model_len(cfg, plan.shape.context) == g.max_prompt_tokens + g.max_new_tokens
    assert gm.plan("llama1b-math").max_model_len == 2048 + 1024


def test_the_prompts_per_call_are_those_an_iteration_sends(tmp_path):
    """One binac iteration of the micro preset on a tiny checkpoint, each generate call counted."""
    from tiny_checkpoint import build_checkpoint

    from binac_core.benchmarks.synthetic import make_split
    from binac_core.foundation.config import load_config
    from binac_core.model.generation import HFBackend
    from binac_core.model.policy import Policy
    from binac_core.rl.loop import iteration
    from binac_core.rl.methods import method_spec

    cfg = load_config("micro", {"train.critic_group_size": 3})
    policy = Policy(build_checkpoint(tmp_path / "model", hostile=False, eos_logit=2.0), cfg, seed=0)
    sent = []

    class Counting(HFBackend):
        def generate(self, prompts, adapter, params):
            sent.append(len(prompts))
            return super().generate(prompts, adapter, params)

    rows = make_split(cfg.task, "train")
    actor, critic = policy.hold("actor"), policy.hold("critic")
    iteration(policy, Counting(policy, 64), cfg, method_spec("binac"), rows, 0, 1, actor, critic)
    attempts, second = gm.prompts_per_call(cfg)
    assert (attempts, second) == (4 * 4, 4 * 4 * 3)
    assert sent == [attempts, second, second, second]  # attempts, feedback, refinements, look-ahead
