"""The vLLM engine's settings (`binac_core.model.generation_vllm.engine_settings`, `engine_kwargs`), pure: what the CPU
build and a GPU are started with, and why each differs; no vLLM needed."""

import pytest

from binac_core.errors import BinacError
from binac_core.foundation.config import load_config
from binac_core.model.generation import AdapterRef
from binac_core.model.generation_vllm import GIB, Engine, engine_kwargs, engine_settings, model_len


def test_the_cpu_build_gets_chunked_prefill_off_an_explicit_kv_cache_and_bound_threads(monkeypatch):
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    monkeypatch.setenv("BINAC_TORCH_THREADS", "1")
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {3, 1, 2})
    s = engine_settings("/m", load_config("smol-synthetic"), 8192, cpu=True)
    assert (s.kv_cache_bytes, s.gpu_memory_utilization, s.cpu_threads_bind) == (4 * GIB, None, "1")
    kw = engine_kwargs(s)
    assert kw["enable_chunked_prefill"] is False and kw["max_num_batched_tokens"] == kw["max_model_len"] == 8192
    assert "enable_sleep_mode" not in kw and "hf_overrides" not in kw  # no sleep mode on CPU; a float32 head
    assert kw["kv_cache_memory_bytes"] == 4 * GIB and "gpu_memory_utilization" not in kw
    assert kw["skip_tokenizer_init"] and kw["enable_lora"] and kw["max_lora_rank"] == 8
    assert kw["logprobs_mode"] == "processed_logprobs" and kw["generation_config"] == "vllm"
    monkeypatch.setenv("BINAC_TORCH_THREADS", "2")
    assert engine_settings("/m", load_config("smol-synthetic"), 8192, cpu=True).cpu_threads_bind == "1,2"
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0-7")
    assert engine_settings("/m", load_config("smol-synthetic"), 8192, cpu=True).cpu_threads_bind == "0-7"


def test_a_gpu_gets_its_memory_share_sleep_mode_and_a_float32_head():
    cfg = load_config("llama1b-math")
    s = engine_settings("/m", cfg, 3072, cpu=False, sleep_available=True)
    kw = engine_kwargs(s)
    assert kw["gpu_memory_utilization"] == cfg.generation.vllm_gpu_memory_utilization
    assert "kv_cache_memory_bytes" not in kw and "enable_chunked_prefill" not in kw
    assert kw["max_lora_rank"] == 16 and kw["dtype"] == "bfloat16" and s.cpu_threads_bind is None
    assert kw["enable_sleep_mode"] is True and kw["hf_overrides"] == {"head_dtype": "float32"}
    assert "enable_sleep_mode" not in engine_kwargs(engine_settings("/m", cfg, 3072, cpu=False))  # a build without
    off = load_config("llama1b-math", {"generation.vllm_sleep_mode": False})
    assert "enable_sleep_mode" not in engine_kwargs(engine_settings("/m", off, 3072, False, sleep_available=True))
    sized = engine_settings("/m", load_config("llama1b-math", {"generation.vllm_kv_cache_gib": 20}), 3072, False)
    assert engine_kwargs(sized)["kv_cache_memory_bytes"] == 20 * GIB


def test_max_model_len_and_the_running_batch_follow_the_preset():
    """llama1b-math: a prompt budget of 2048 and answers of 1024 (feedback 512): 3072 tokens, not Llama-3.2's
    131 072; its generation.batch_size of 256 is vLLM's max_num_seqs. Without a prompt budget, the context."""
    cfg = load_config("llama1b-math")
    assert model_len(cfg, 131072) == 2048 + 1024
    assert model_len(load_config("llama1b-math", {"generation.feedback_max_new_tokens": 1500}), 131072) == 2048 + 1500
    assert model_len(cfg, 2500) == 2500  # never beyond the model's context
    assert model_len(load_config("smol-synthetic"), 8192) == 8192
    kw = engine_kwargs(engine_settings("/m", cfg, model_len(cfg, 131072), cpu=False))
    assert (kw["max_model_len"], kw["max_num_seqs"]) == (3072, 256)
    small = load_config("smol-synthetic", {"generation.batch_size": 3})
    assert engine_kwargs(engine_settings("/m", small, 8192, cpu=True))["max_num_seqs"] == 3


class FakeLLM:
    """Records what the engine is asked: sleep, wake_up, generate."""

    def __init__(self):
        self.calls = []

    def sleep(self, level):
        self.calls.append(f"sleep {level}")

    def wake_up(self):
        self.calls.append("wake_up")


def test_with_sleep_mode_the_engine_sleeps_between_calls_and_wakes_for_each(monkeypatch):
    """verl's order around each generation: wake up (after torch hands back its cached blocks), generate, sleep at
    level 1; asleep from its start, and asleep again after a call that raised. Without sleep mode: no call."""
    emptied = []
    monkeypatch.setattr("torch.cuda.empty_cache", lambda: emptied.append(1))
    cfg = load_config("llama1b-math")
    llm = FakeLLM()
    engine = Engine(engine_settings("/m", cfg, 3072, cpu=False, sleep_available=True), llm, {})
    engine.sleep()  # as `shared_engine` leaves a new engine
    for _ in range(2):
        with engine.awake() as awake:
            assert awake is llm and not engine.asleep
            llm.calls.append("generate")
    with pytest.raises(RuntimeError), engine.awake():
        raise RuntimeError("a request failed")
    assert llm.calls == ["sleep 1", *["wake_up", "generate", "sleep 1"] * 2, "wake_up", "sleep 1"]
    assert engine.asleep and len(emptied) == 3
    plain = Engine(engine_settings("/m", cfg, 3072, cpu=True), FakeLLM(), {})
    plain.sleep()
    with plain.awake():
        pass
    assert plain.llm.calls == [] and not plain.asleep


def test_engine_settings_are_equal_for_equal_configs_and_differ_by_model():
    cfg = load_config("smol-synthetic")
    assert engine_settings("/m", cfg, 8192, True) == engine_settings("/m", load_config("smol-synthetic"), 8192, True)
    assert engine_settings("/m", cfg, 8192, True) != engine_settings("/other", cfg, 8192, True)


def test_vllm_that_cannot_run_here_is_refused_in_one_line_before_any_compute(monkeypatch):
    import pytest

    from binac_core.errors import BinacError
    from binac_core.model import generation_vllm as gv

    def missing():
        raise ImportError("No module named 'vllm'")

    monkeypatch.setattr(gv, "on_cpu", missing)
    with pytest.raises(BinacError, match=r"^generation.backend=vllm: vLLM is not installed \(pip install"):
        gv.check_runnable(load_config("smol-synthetic"))
    monkeypatch.setattr(gv, "on_cpu", lambda: False)
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    with pytest.raises(BinacError, match="GPU build and there is no CUDA device"):
        gv.check_runnable(load_config("smol-synthetic"))


def test_binac_train_with_vllm_absent_or_a_head_size_it_lacks_exits_2_with_one_line(tmp_path):
    import importlib.util
    import os
    import subprocess
    import sys

    from conftest import REPO

    env = {**os.environ, "BINAC_HOME": str(tmp_path / "home")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "flows.cli",
            "train",
            "--preset",
            "micro",
            "--steps",
            "1",
            "--set",
            "generation.backend=vllm",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.strip()][-1:]
    if importlib.util.find_spec("vllm") is None:
        assert "vLLM is not installed" in line
    else:  # the CPU build here: micro's head size 16 has no kernel
        assert "head size 16" in line or "no CUDA device" in line
    assert not (tmp_path / "home" / "models").exists()  # refused before any compute: no base was built


def test_an_adapter_without_its_weights_fails_in_one_line_before_vllm_is_asked(tmp_path):
    """`Engine.lora` checks the folder first (no vLLM needed to reach the error): a ref held in memory only, and a
    folder whose adapter_model.safetensors was deleted, each get one line naming the adapter."""
    engine = Engine(settings=None, llm=None, lora_ids={})
    assert engine.lora(None) is None
    with pytest.raises(BinacError, match="adapter critic 3f2a is held in memory only"):
        engine.lora(AdapterRef("critic", "", "3f2a"))
    with pytest.raises(BinacError, match=r"adapter actor missing: .*adapter_model.safetensors \(a cached stage"):
        engine.lora(AdapterRef("actor", str(tmp_path), "9c1d"))
    assert engine.lora_ids == {}, "no id is handed out for an adapter that cannot load"
