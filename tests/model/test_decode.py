"""The lean decode loop (`binac_core.model.decode`, what `HFBackend` runs on Llama models) against the model itself: its
log-probs are those the loss recomputes, greedy decoding is the argmax of a plain full forward, left padding and
batch composition change nothing for greedy decoding, rows stop at their first end-of-turn token, a seed
reproduces its samples, the base weights are never modified, and the first tokens drawn follow softmax(logits / T)
(a chi-square test that also rejects a wrong temperature)."""

import pytest
import torch
from tiny_checkpoint import build_checkpoint

from binac_core.foundation.config import load_config
from binac_core.model import decode
from binac_core.model.generation import HFBackend, SamplingParams
from binac_core.rl.update import Sample, sequence_logprobs

TEMPERATURE = 0.8
LOGP_TOL = 1e-5
"""|sampled - recomputed log-prob| allowed: the loop runs with a KV cache, left padding and LoRA merged into the
weights, the loss over whole sequences packed by shared prompt prefix (float rounding only)."""


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    from binac_core.model.policy import Policy

    base = build_checkpoint(tmp_path_factory.mktemp("decode") / "model", hostile=True, eos_logit=1.5)
    policy = Policy(base, load_config("micro", {"generation.temperature": TEMPERATURE}), seed=0)
    with torch.no_grad():  # an actor far from LoRA's identity start
        for n, p in policy.model.named_parameters():
            if ".actor." in n and "lora_B" in n:
                p.normal_(0.0, 0.1, generator=torch.Generator().manual_seed(p.numel()))
    ref = policy.save("actor", tmp_path_factory.mktemp("decode-actor") / "actor")
    return policy, ref


def _prompts(n=12):
    """Chat prompts of different lengths (so the batch is left-padded)."""
    return [[{"role": "user", "content": f"Solve: {k}+3" + " *2" * (k % 5)}] for k in range(n)]


def test_the_backend_runs_the_lean_loop_on_a_llama_model(loaded, monkeypatch):
    policy, ref = loaded
    assert decode.supports(policy.model)
    calls = []
    real = decode.sample
    monkeypatch.setattr(decode, "sample", lambda *a, **k: calls.append(1) or real(*a, **k))
    HFBackend(policy, 4).generate(_prompts(4), ref, SamplingParams(4, TEMPERATURE, 1.0, seed=0))
    assert calls


@pytest.mark.parametrize("adapter", ["actor", None])
@pytest.mark.parametrize("temperature", [TEMPERATURE, 1.0, 0.0])
def test_logprobs_are_those_the_loss_recomputes(loaded, adapter, temperature):
    policy, ref = loaded
    ref = ref if adapter else None
    gens = HFBackend(policy, 6).generate(_prompts(), ref, SamplingParams(12, temperature, 1.0, seed=2))
    assert sum(len(g.token_ids) for g in gens) > len(gens)
    samples = [Sample(g.prompt_ids, g.token_ids, g.logprobs, 0.0) for g in gens]
    with policy.using(ref), torch.no_grad():
        logp, _ = sequence_logprobs(policy.model, samples, policy.tokenizer.pad_token_id, temperature)
    for i, g in enumerate(gens):
        assert torch.allclose(logp[i, : len(g.token_ids)], torch.tensor(g.logprobs), atol=LOGP_TOL, rtol=0)


def test_greedy_is_the_argmax_of_a_full_forward_and_ignores_padding_and_batching(loaded):
    policy, ref = loaded
    params = SamplingParams(8, 0.0, 1.0, seed=0)
    batched = HFBackend(policy, 12).generate(_prompts(), ref, params)
    alone = HFBackend(policy, 1).generate(_prompts(), ref, params)
    assert [g.token_ids for g in batched] == [g.token_ids for g in alone]
    with policy.using(ref), torch.no_grad():
        for g in batched:
            ids = list(g.prompt_ids)
            for t in g.token_ids:  # one plain forward per step, no cache, no padding
                logits = policy.model(input_ids=torch.tensor([ids])).logits[0, -1]
                assert int(logits.argmax()) == t
                ids.append(t)


def test_repeated_prompts_are_prefilled_once_and_decode_as_their_unique_rows(loaded, monkeypatch):
    policy, ref = loaded
    prompts = [p for p in _prompts(4) for _ in range(3)]  # each prompt three times, as K feedbacks on one attempt
    prefilled = []
    real = decode.prefill
    monkeypatch.setattr(decode, "prefill", lambda w, ids, *a: prefilled.append(ids.shape) or real(w, ids, *a))
    greedy = HFBackend(policy, 12).generate(prompts, ref, SamplingParams(8, 0.0, 1.0, seed=0))
    assert prefilled == [(4, prefilled[0][1])]  # the prompt block: four rows, not twelve
    monkeypatch.setattr(decode, "prefill", real)
    unique = HFBackend(policy, 4).generate(_prompts(4), ref, SamplingParams(8, 0.0, 1.0, seed=0))
    assert [g.token_ids for g in greedy] == [g.token_ids for g in unique for _ in range(3)]
    sampled = HFBackend(policy, 12).generate(prompts, ref, SamplingParams(12, TEMPERATURE, 1.0, seed=3))
    samples = [Sample(g.prompt_ids, g.token_ids, g.logprobs, 0.0) for g in sampled]
    with policy.using(ref), torch.no_grad():
        logp, _ = sequence_logprobs(policy.model, samples, policy.tokenizer.pad_token_id, TEMPERATURE)
    for i, g in enumerate(sampled):
        assert torch.allclose(logp[i, : len(g.token_ids)], torch.tensor(g.logprobs), atol=LOGP_TOL, rtol=0)


def test_rows_stop_at_their_first_end_of_turn_token(loaded):
    policy, ref = loaded
    backend = HFBackend(policy, 16)
    gens = backend.generate(_prompts(16), ref, SamplingParams(10, 1.0, 1.0, seed=1))
    stops = set(backend.eos_ids)
    ended = [g for g in gens if g.token_ids and g.token_ids[-1] in stops]
    assert ended and len(ended) < len(gens), "the check needs rows that stop and rows that run to the budget"
    for g in gens:
        assert not set(g.token_ids[:-1]) & stops
        assert g.token_ids[-1] in stops or len(g.token_ids) == 10
        assert len(g.logprobs) == len(g.token_ids)
        assert g.text == policy.tokenizer.decode(g.token_ids, skip_special_tokens=True)


def test_a_seed_reproduces_its_samples_and_another_seed_does_not(loaded):
    policy, ref = loaded
    backend = HFBackend(policy, 6)

    def run(seed):
        return [
            (g.token_ids, g.logprobs)
            for g in backend.generate(_prompts(), ref, SamplingParams(12, 1.0, 1.0, seed=seed))
        ]

    assert run(7) == run(7)
    assert run(7) != run(8)


def test_generation_leaves_the_base_weights_untouched(loaded):
    policy, ref = loaded
    before = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    HFBackend(policy, 6).generate(_prompts(), ref, SamplingParams(6, 1.0, 1.0, seed=0))
    assert all(torch.equal(before[n], p) for n, p in policy.model.named_parameters())


def _chi_square(counts: torch.Tensor, probs: torch.Tensor) -> tuple[float, int]:
    """Pearson's statistic and degrees of freedom, tokens of expected count < 5 pooled into one cell."""
    expected = probs.double() * counts.sum()
    small = expected < 5
    obs = torch.cat([counts[~small].double(), counts[small].double().sum()[None]])
    exp = torch.cat([expected[~small], expected[small].sum()[None]])
    keep = exp > 0
    return float(((obs[keep] - exp[keep]) ** 2 / exp[keep]).sum()), int(keep.sum()) - 1


def test_first_tokens_follow_softmax_of_logits_over_temperature(loaded):
    """20,000 first tokens of one prompt (one batch: each row draws its own number) against softmax(logits / T)
    of a full forward. Bound: df + 6 sqrt(2 df), about 6 standard deviations of the statistic under the null (a
    false alarm below 1e-6 for a fixed seed anyway); the same counts against T = 1 must exceed it, so the check
    has the power to see a wrong temperature."""
    policy, ref = loaded
    n = 20_000
    ids = policy.tokenizer.apply_chat_template(
        _prompts(1)[0], add_generation_prompt=True, tokenize=True, return_dict=False
    )
    with policy.using(ref), torch.no_grad():
        logits = policy.model(input_ids=torch.tensor([ids])).logits[0, -1].float()
        out = decode.sample(
            policy.model,
            torch.tensor([ids] * n),
            torch.ones(n, len(ids), dtype=torch.long),
            1,
            TEMPERATURE,
            [],
            torch.Generator().manual_seed(0),
        )
    counts = torch.bincount(out.tokens[:, 0], minlength=logits.shape[0])
    stat, df = _chi_square(counts, torch.softmax(logits / TEMPERATURE, -1))
    assert df >= 10, "too few well-populated tokens for the test to mean anything"
    assert stat < df + 6 * (2 * df) ** 0.5, f"chi-square {stat:.1f} on {df} df"
    wrong, wrong_df = _chi_square(counts, torch.softmax(logits, -1))
    assert wrong > wrong_df + 6 * (2 * wrong_df) ** 0.5, "the test cannot tell T = 1 from T = 0.8"
    # The recorded log-probs are those of that distribution.
    want = torch.log_softmax(logits / TEMPERATURE, -1)[out.tokens[:, 0]]
    assert torch.allclose(out.logprobs[:, 0], want, atol=LOGP_TOL, rtol=0)


def test_leaving_out_finished_rows_and_padding_changes_no_number(loaded, monkeypatch):
    """The loop stops computing finished rows (`KVCache.rows`), skips the prompts' padding in the prefill
    (`_packed_prompt`) and prefills a few prompts at a time (`_prompt_chunks`); none of it changes a computed
    number: every row's tokens and log-probs, up to its first end-of-turn token, are bitwise those of the batch
    computed whole (`decode.MIN_ROWS` says why; on the CPU)."""
    from binac_core.model.generation import left_padded

    policy, ref = loaded
    if policy.device.type != "cpu":
        pytest.skip("bitwise row independence is measured for the CPU's BLAS only")
    tok = policy.tokenizer
    rendered = [
        tok.apply_chat_template(m, add_generation_prompt=True, tokenize=True, return_dict=False) for m in _prompts(16)
    ]
    ids, mask = left_padded(rendered, tok.pad_token_id)
    eos = HFBackend(policy, 1).eos_ids

    def run():
        with policy.using(ref):
            out = decode.sample(policy.model, ids, mask, 12, TEMPERATURE, eos, torch.Generator().manual_seed(3))
        ends = [next((j + 1 for j, t in enumerate(row) if t in eos), len(row)) for row in out.tokens.tolist()]
        return [(out.tokens[i, :n], out.logprobs[i, :n]) for i, n in enumerate(ends)]

    monkeypatch.setattr(decode, "PREFILL_POSITIONS", 3 * ids.shape[1])  # chunks of 3 prompts
    kept, real_rows = [], decode.KVCache.rows
    monkeypatch.setattr(
        decode.KVCache, "rows", lambda self, index, end: kept.append(index.numel()) or real_rows(self, index, end)
    )
    lean = run()
    assert kept and min(kept) >= decode.MIN_ROWS, "the check needs rows that finish early"
    assert decode._packed_prompt(mask.bool()) is not None
    assert len(decode._prompt_chunks(mask.bool())) > 1
    compactions = len(kept)
    monkeypatch.setattr(decode, "COMPACT_AT", 0.0)
    monkeypatch.setattr(decode, "_packed_prompt", lambda keep: None)
    monkeypatch.setattr(decode, "PREFILL_POSITIONS", 10**9)
    whole = run()
    assert len(kept) == compactions  # computed whole this time
    for (t1, l1), (t2, l2) in zip(lean, whole, strict=True):
        assert torch.equal(t1, t2) and torch.equal(l1, l2)
