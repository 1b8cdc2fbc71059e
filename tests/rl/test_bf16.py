"""bfloat16, the GPU presets' dtype, on the CPU: the LM head's logits in float32 (a hand-computed case, and a float32
head's log-probs bit-identical to the plain computation), the first-pass ratio of an update on samples that
transformers' `generate` drew in bf16 from logits of size up to 32, and one `binac` iteration of a bf16 tiny model
in process (the update with activation checkpointing and float32 LoRA weights on the bf16 base, the KL pass, both
adapters trained). `binac train` in bf16, end to end: tests/integration/test_train.py."""

import math

import pytest
import torch
from tiny_checkpoint import build_checkpoint

from binac_core.foundation.config import load_config
from binac_core.model import decode
from binac_core.model.generation import HFBackend, SamplingParams
from binac_core.model.lm_head import float32_lm_head, float32_logits
from binac_core.model.logprob_check import compare_logprobs, judge, tolerance_for
from binac_core.rl.update import Sample, UpdateSettings, chunked_token_logprobs, policy_update, sequence_logprobs


def _head(rows: list[list[float]], dtype) -> torch.nn.Linear:
    head = torch.nn.Linear(len(rows[0]), len(rows), bias=False)
    with torch.no_grad():
        head.weight.copy_(torch.tensor(rows))
    return head.to(dtype).requires_grad_(False)


def test_a_bf16_heads_logits_are_computed_in_float32():
    """Hidden [1, 1] and head rows [16, 0.0625], [0, 0], every number exact in bf16: the logits are 16.0625 and 0.
    A bf16 product rounds 16.0625 to 16 (the grid is 0.125 in [16, 32), a tie to even), so token 1's log-prob would
    be -16.0 instead of -(16.0625 + log(1 + e^-16.0625))."""
    hidden = torch.tensor([[1.0, 1.0]], dtype=torch.bfloat16)
    head = _head([[16.0, 0.0625], [0.0, 0.0]], torch.bfloat16)
    want = -(16.0625 + math.log1p(math.exp(-16.0625)))
    got = chunked_token_logprobs(hidden, head, torch.tensor([1]), 1.0)
    assert got.dtype == torch.float32 and got.item() == pytest.approx(want, abs=1e-6)
    assert head(hidden)[0, 0].item() == 16.0  # the rounding the float32 head avoids
    assert float32_logits(head)(hidden).dtype == torch.float32
    hidden.requires_grad_(True)  # differentiable in the hidden states, which stay bf16
    chunked_token_logprobs(hidden, head, torch.tensor([1]), 1.0).sum().backward()
    assert hidden.grad.dtype == torch.bfloat16 and hidden.grad.abs().sum() > 0


def test_a_float32_heads_log_probs_are_computed_exactly_as_before():
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(7, 8, generator=gen)
    head = torch.nn.Linear(8, 11, bias=False)
    targets = torch.randint(0, 11, (7,), generator=gen)
    assert float32_logits(head) is head
    for chunk in (3, 1024):
        got = chunked_token_logprobs(hidden, head, targets, 0.7, chunk)
        plain = []
        for s in range(0, 7, chunk):  # the head's own output, chunk by chunk, as the update computed it
            logits = head(hidden[s : s + chunk]).float() / 0.7
            t = targets[s : s + chunk, None]
            plain.append(logits.gather(-1, t).squeeze(-1) - torch.logsumexp(logits, -1))
        assert torch.equal(got, torch.cat(plain))


@pytest.fixture(scope="module")
def bf16_policy(tmp_path_factory):
    """The micro preset's settings on a tiny checkpoint in bfloat16, its LM head scaled so that logits reach 16-32
    (the range where a bf16 head's rounding is 0.06-0.125)."""
    from binac_core.model.policy import Policy

    base = build_checkpoint(tmp_path_factory.mktemp("bf16") / "model", hostile=False, eos_logit=0.0)
    # Both KL terms on: a random model's rewards are all 0, and a batch without signal takes no step (`zero_signal`).
    kl = {"train.kl_coef": 0.1, "train.critic_kl_coef": 0.1}
    cfg = load_config("micro", {"model.dtype": "bfloat16", "train.activation_checkpointing": True, **kl})
    policy = Policy(base, cfg, seed=0)
    with torch.no_grad():
        policy.model.get_base_model().lm_head.weight.mul_(8.0)
    return policy


PROMPTS = [[{"role": "user", "content": f"Solve: {d} +3 *2"}] for d in range(16)]


def test_the_first_pass_ratio_of_bf16_samples_is_one_within_bf16_rounding(bf16_policy):
    """Samples from `generate` in bf16 (the decode loop is float32-only) against the update's recomputation: the
    log-ratio per token within the bf16 tolerances of `logprob_check` and within bf16 rounding of the logits, and an
    update's first pass clips at most 1 % of the tokens (at ratio 1 ± 0.2)."""
    policy = bf16_policy
    assert not decode.supports(policy.model), "bf16 samples through transformers' generate"
    ref = policy.hold("actor")
    gens = HFBackend(policy, 16).generate(PROMPTS, ref, SamplingParams(32, 1.0, 1.0, seed=1))
    samples = [Sample(g.prompt_ids, g.token_ids, g.logprobs, a) for g, a in zip(gens, [1.0, -1.0] * 8, strict=True)]
    with torch.no_grad():
        logp, mask = sequence_logprobs(policy.model, samples, policy.tokenizer.pad_token_id, 1.0)
        ids = torch.tensor([gens[0].prompt_ids + gens[0].token_ids])
        with float32_lm_head(policy.model):
            largest = policy.model(input_ids=ids).logits.abs().max().item()
    assert 16 <= largest <= 64, largest
    trainer = [logp[i, : len(s.token_ids)].tolist() for i, s in enumerate(samples)]
    stats = compare_logprobs(trainer, [s.logprobs for s in samples])
    assert stats["tokens"] >= 200 and judge(stats, tolerance_for("bfloat16")) == [], stats
    # What is left is the bf16 hidden states' own rounding (a cached, left-padded decode against a right-padded
    # forward), carried into the logits: at most two bf16 roundings (2^-8 relative) of the largest logit per token.
    assert stats["mean_abs"] < 0.01 and stats["max_abs"] <= 2 * largest * 2**-8, stats
    first = policy_update(policy, "actor", samples, UpdateSettings.of(policy.cfg, "actor", passes=1))
    assert first["clip_frac"] <= 0.01 and math.isfinite(first["loss"]), first


def test_one_binac_iteration_of_a_bf16_model_trains_both_adapters(bf16_policy):
    from binac_core.benchmarks.synthetic import make_split
    from binac_core.rl.loop import iteration
    from binac_core.rl.methods import method_spec

    policy = bf16_policy
    cfg = policy.cfg
    base = policy.model.get_base_model()
    assert base.lm_head.weight.dtype == torch.bfloat16
    assert {p.dtype for n, p in policy.model.named_parameters() if "lora_" in n} == {torch.float32}
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():  # adapters away from the base, so that the KL terms (the only signal here) have a gradient
        for n, p in policy.model.named_parameters():
            if "lora_B" in n:
                p.copy_(0.05 * torch.randn(p.shape, generator=gen))
    before = {name: policy.adapter_state(name) for name in ("actor", "critic")}
    res = iteration(
        policy,
        HFBackend(policy, cfg.generation.batch_size),
        cfg,
        method_spec("binac"),
        make_split(cfg.task, "train"),
        seed=0,
        step=1,
        actor=policy.hold("actor"),
        critic=policy.hold("critic"),
    )
    for upd in (res.actor_update, res.critic_update):
        assert upd.tokens > 0 and upd.skipped_steps == 0 and math.isfinite(upd.loss) and upd.kl >= 0
    for name in ("actor", "critic"):
        after = policy.adapter_state(name)
        assert any(not torch.equal(after[k], v) for k, v in before[name].items()), f"{name} did not move"
