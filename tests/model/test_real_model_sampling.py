"""Sampling and training see one distribution on a checkpoint that ships a hostile `generation_config`
(repetition penalty, top-k, top-p, temperature, min_new_tokens, no_repeat_ngram_size), with LoRA dropout on and two
end-of-turn tokens: the backend samples from softmax(logits / T) exactly, stores that distribution's log-probs,
stops on either end-of-turn token, and the real `policy_update` recomputes the same log-probs (ratio 1, nothing
clipped). Also: the chunked log-prob computation, and answer budgets that do not fit the context."""

import pytest
import torch
from tiny_checkpoint import EOT, build_checkpoint

from binac_core.errors import BinacError
from binac_core.foundation.config import load_config
from binac_core.model.generation import HFBackend, SamplingParams
from binac_core.rl import update as upd
from binac_core.rl.update import Sample, UpdateSettings, policy_update, sequence_logprobs

TEMPERATURE = 0.8
RATIO_TOL = 1e-5
"""|log ratio| allowed on the first pass: bitwise equality is not achievable, generation runs with a KV cache and
left padding, the update over whole right-padded sequences (measured: at most ~1e-6 on this model, about half
of the tokens bitwise equal)."""


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return build_checkpoint(tmp_path_factory.mktemp("hostile") / "model", hostile=True, eos_logit=4.0)


@pytest.fixture(scope="module")
def loaded(ckpt):
    from binac_core.model.runtime import policy_and_backend

    cfg = load_config("micro", {"lora.dropout": 0.2, "generation.temperature": TEMPERATURE})
    policy, backend = policy_and_backend(ckpt, cfg, seed=0)
    # Make the actor adapter far from the identity, so that LoRA dropout would change its outputs.
    with torch.no_grad():
        for n, p in policy.model.named_parameters():
            if ".actor." in n and "lora_B" in n:
                p.normal_(0.0, 0.1)
    return policy, backend


def _prompts(n=16):
    return [[{"role": "user", "content": f"Solve: {k}+3-{k % 3}"}] for k in range(n)]


def _spy_sampler(monkeypatch, lean: bool) -> list[dict[int, torch.Tensor]]:
    """The distributions the sampler draws from, one {batch row: [V] tensor} per step: the probabilities handed to
    `torch.multinomial` (transformers' sampler, every row at every step) or the differences of the cumulative sums
    handed to `torch.searchsorted` by `binac_core.model.decode._draw`, for the rows its `rows` argument names (the
    decode loop stops computing finished rows)."""
    from binac_core.model import decode

    drawn, computed = [], []
    name = "searchsorted" if lean else "multinomial"
    real, real_draw = getattr(torch, name), decode._draw

    def draw(logits, temperature, gen, rows, *rest):
        computed.append(rows.tolist())
        return real_draw(logits, temperature, gen, rows, *rest)

    def spy(probs, *a, **k):
        dist = torch.diff(probs, dim=-1, prepend=probs[:, :1] * 0) if lean else probs.detach().clone()
        drawn.append(dict(zip(computed[-1] if lean else range(len(dist)), dist, strict=True)))
        return real(probs, *a, **k)

    monkeypatch.setattr(torch, name, spy)
    monkeypatch.setattr(decode, "_draw", draw)
    return drawn


@pytest.mark.parametrize("lean", [True, False])
def test_sampling_ignores_the_shipped_generation_config_and_stops_on_both_end_tokens(
    loaded, tmp_path, monkeypatch, lean
):
    policy, backend = loaded
    backend = HFBackend(policy, backend.batch_size, lean=lean)
    ref = policy.save("actor", tmp_path / "actor")
    drawn = _spy_sampler(monkeypatch, lean)
    gens = backend.generate(_prompts(), ref, SamplingParams(16, TEMPERATURE, 1.0, seed=3))
    monkeypatch.undo()
    assert drawn, "the sampler never ran"
    vocab = drawn[0][0].shape[-1]
    beyond_top3 = 0
    for i, g in enumerate(gens):
        for t, (tok, lp) in enumerate(zip(g.token_ids, g.logprobs, strict=True)):
            row = drawn[t][i]
            # The stored log-prob is that of the distribution actually drawn from ...
            assert row[tok].item() == pytest.approx(float(torch.tensor(lp).exp()), rel=1e-5, abs=1e-7)
            # ... which is untruncated (no top-k / top-p of the checkpoint's generation config).
            assert int((row > 0).sum()) == vocab
            beyond_top3 += int((row > row[tok]).sum()) >= 3
    assert beyond_top3 > 0, "no token outside the top 3 was ever sampled"
    # Each completion ends at its first end-of-turn token, and both end-of-turn tokens end some completion.
    tok = policy.tokenizer
    ends = {tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids(EOT)}
    assert all(not set(g.token_ids[:-1]) & ends for g in gens)
    assert {g.token_ids[-1] for g in gens} >= ends
    # The same stored log-probs are those the update recomputes (adapter active, eval mode).
    samples = [Sample(g.prompt_ids, g.token_ids, g.logprobs, 1.0) for g in gens]
    with policy.using(ref), torch.no_grad():
        logp, mask = sequence_logprobs(policy.model, samples, tok.pad_token_id, TEMPERATURE)
    for i, g in enumerate(gens):
        assert torch.allclose(logp[i, : len(g.token_ids)], torch.tensor(g.logprobs), atol=RATIO_TOL, rtol=0)


@pytest.mark.parametrize("lean", [True, False])
def test_sampling_is_seeded_by_its_params_and_leaves_the_global_rng_as_it_found_it(loaded, tmp_path, monkeypatch, lean):
    """transformers' sampler draws from torch's global RNG: a generation seeds it from `SamplingParams.seed` and
    restores it afterwards, so the samples are those of the old, leaking implementation (the restore skipped
    here) and the caller's random stream goes on as if no generation had run. The lean loop (`binac_core.model.decode`)
    draws from a generator of its own: the same holds without any restore."""
    import contextlib

    from binac_core.model import generation

    policy, backend = loaded
    backend = HFBackend(policy, backend.batch_size, lean=lean)
    ref = policy.save("actor", tmp_path / "actor")
    params = SamplingParams(12, TEMPERATURE, 1.0, seed=5)
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    first = backend.generate(_prompts(8), ref, params)
    assert torch.equal(torch.rand(3), expected_next), "generation moved the caller's random stream"
    monkeypatch.setattr(generation, "_private_global_rng", contextlib.nullcontext)
    leaking = backend.generate(_prompts(8), ref, params)
    assert [g.token_ids for g in first] == [g.token_ids for g in leaking]
    assert [g.logprobs for g in first] == [g.logprobs for g in leaking]


def test_first_pass_ratio_is_one_with_dropout(loaded, tmp_path, monkeypatch):
    policy, backend = loaded
    assert policy.cfg.lora.dropout > 0
    ref = policy.save("actor", tmp_path / "actor")
    gens = backend.generate(_prompts(), ref, SamplingParams(16, TEMPERATURE, 1.0, seed=4))
    samples = [Sample(g.prompt_ids, g.token_ids, g.logprobs, a) for g, a in zip(gens, [1.0, -1.0] * 8, strict=True)]
    seen = []
    real = upd.clipped_policy_loss

    def capture(logp, old, adv, mask, *a, **k):
        seen.append((logp.detach().clone(), old.clone(), mask.clone()))
        return real(logp, old, adv, mask, *a, **k)

    monkeypatch.setattr(upd, "clipped_policy_loss", capture)
    stats = policy_update(policy, "actor", samples, UpdateSettings.of(policy.cfg, "actor", passes=1, kl_coef=0.0))
    assert stats["clip_frac"] == 0.0 and stats["tokens"] == sum(len(g.token_ids) for g in gens)
    for logp, old, mask in seen:
        dev = ((logp - old).abs() * mask).max().item()
        assert dev <= RATIO_TOL, f"first-pass |log ratio| {dev}"


def test_chunked_logprobs_match_a_full_log_softmax():
    from binac_core.rl.update import chunked_token_logprobs

    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(11, 37, generator=gen) * 5
    logits[3, 7] = 80.0  # a peaked row
    targets = torch.randint(0, 37, (11,), generator=gen)
    for temperature in (1.0, 0.7, 0.0):
        naive = torch.log_softmax(logits / (temperature or 1.0), -1).gather(-1, targets[:, None]).squeeze(-1)
        for chunk in (1, 3, 11, 64):
            got = chunked_token_logprobs(logits, torch.nn.Identity(), targets, temperature, chunk)
            assert torch.allclose(got, naive, atol=1e-6, rtol=1e-6)
    # Gradients through the checkpointed chunks are those of the naive computation.
    a, b = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    chunked_token_logprobs(a, torch.nn.Identity(), targets, 0.7, 4).sum().backward()
    torch.log_softmax(b / 0.7, -1).gather(-1, targets[:, None]).sum().backward()
    assert torch.allclose(a.grad, b.grad, atol=1e-6)


def test_sequence_logprobs_run_the_lm_head_on_completion_positions_only(loaded):
    policy, _ = loaded
    model = policy.model
    samples = [
        Sample([5, 6, 7, 8, 9], [10, 11, 3], [], 0.0),
        Sample([5, 6], [12, 13, 14, 15], [], 0.0),
        Sample([5, 6, 7], [], [], 0.0),
    ]
    rows = []
    head = model.get_base_model().get_output_embeddings()
    handle = head.register_forward_hook(lambda m, inp, out: rows.append(inp[0].shape[:-1].numel()))
    try:
        with torch.no_grad():
            logp, mask = sequence_logprobs(model, samples, policy.tokenizer.pad_token_id, TEMPERATURE, chunk=3)
    finally:
        handle.remove()
    assert rows == [3, 3, 1]  # 7 completion tokens, in chunks of 3
    # The same values as a full forward and a full log-softmax.
    with torch.no_grad():
        for i, s in enumerate(samples):
            ids = torch.tensor([s.prompt_ids + s.token_ids])
            full = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float() / TEMPERATURE, -1)
            want = full.gather(-1, ids[0, 1:, None]).squeeze(-1)[len(s.prompt_ids) - 1 :]
            assert torch.allclose(logp[i, : len(s.token_ids)], want, atol=1e-5, rtol=0)
            assert mask[i].sum() == len(s.token_ids)


def test_end_of_turn_tokens_are_collected_from_tokenizer_model_and_vocabulary(loaded):
    from binac_core.model.generation import eos_token_ids

    policy, _ = loaded
    tok = policy.tokenizer
    im_end, eot = tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids(EOT)
    assert tok.eos_token_id == im_end
    assert eos_token_ids(tok) == sorted({im_end, eot})  # <|eot_id|> found in the vocabulary
    assert eos_token_ids(tok, policy.model) == sorted({im_end, eot})


@pytest.mark.parametrize("field", ["generation.max_new_tokens", "generation.feedback_max_new_tokens"])
@pytest.mark.parametrize("value", [256, 1000])
def test_an_answer_budget_that_does_not_fit_the_context_is_refused_before_compute(field, value):
    from binac_core.runs.plans import plan

    with pytest.raises(BinacError) as exc:
        plan("micro", "grpo", 1, 0, {field: value}, None)
    msg = str(exc.value)
    assert "\n" not in msg and field in msg and "256" in msg
    plan("micro", "grpo", 1, 0, {field: 255}, None)  # the largest that fits


def test_a_local_hub_model_is_checked_from_its_config_and_the_backend_checks_again(ckpt):
    from types import SimpleNamespace

    from binac_core.runs.plans import plan_evaluate

    with pytest.raises(BinacError, match=r"^invalid config micro: generation.max_new_tokens \(128\) must be smaller"):
        plan_evaluate("synthetic", str(ckpt), None, None, "single", 1, 1, "micro", None, 128)
    # A hub id whose context is only known once loaded: the backend refuses it at construction.
    cfg = load_config(
        "micro", {"model.source": "hub", "model.hub_id": "some-org/some-model", "generation.max_new_tokens": 200}
    )
    policy = SimpleNamespace(
        cfg=cfg, model=SimpleNamespace(config=SimpleNamespace(max_position_embeddings=128)), tokenizer=None
    )
    with pytest.raises(BinacError, match=r"generation.max_new_tokens \(200\) must be smaller .* 128 tokens"):
        HFBackend(policy)


def test_top_p_below_one_is_refused():
    with pytest.raises(BinacError, match="generation.top_p"):
        load_config("micro", {"generation.top_p": 0.9})


def test_greedy_decoding_ignores_the_shipped_generation_config(loaded):
    """T = 0: each token is the argmax of the raw logits (no repetition penalty, no forced minimum length)."""
    policy, backend = loaded
    gens = backend.generate(_prompts(4), None, SamplingParams(6, 0.0, 1.0, seed=0))
    with policy.using(None), torch.no_grad():
        for g in gens:
            ids = torch.tensor([g.prompt_ids + g.token_ids])
            logits = policy.model(input_ids=ids).logits[0, len(g.prompt_ids) - 1 : -1].float()
            assert logits.argmax(-1).tolist() == g.token_ids
            want = torch.log_softmax(logits, -1).gather(-1, ids[0, len(g.prompt_ids) :, None]).squeeze(-1)
            assert torch.allclose(want, torch.tensor(g.logprobs), atol=RATIO_TOL, rtol=0)
