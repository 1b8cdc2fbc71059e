"""The vLLM engine's settings (`binac_core.model.generation_vllm.engine_settings`, `engine_kwargs`), pure: what the CPU
build and a GPU are started with, and why each differs; no vLLM needed."""

import pytest

from binac_core.errors import BinacError
from binac_core.foundation.config import load_config
from binac_core.model.generation import AdapterRef
from binac_core.model.generation_vllm import GIB, Engine, engine_kwargs, engine_settings


def test_the_cpu_build_gets_chunked_prefill_off_an_explicit_kv_cache_and_bound_threads(monkeypatch):
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    monkeypatch.setenv("BINAC_TORCH_THREADS", "1")
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {3, 1, 2})
    s = engine_settings("/m", load_config("smol-synthetic"), 8192, cpu=True)
    assert (s.kv_cache_bytes, s.gpu_memory_utilization, s.cpu_threads_bind) == (4 * GIB, None, "1")
    kw = engine_kwargs(s)
    assert kw["enable_chunked_prefill"] is False and kw["max_num_batched_tokens"] == kw["max_model_len"] == 8192
    assert kw["kv_cache_memory_bytes"] == 4 * GIB and "gpu_memory_utilization" not in kw
    assert kw["skip_tokenizer_init"] and kw["enable_lora"] and kw["max_lora_rank"] == 8
    assert kw["logprobs_mode"] == "processed_logprobs" and kw["generation_config"] == "vllm"
    monkeypatch.setenv("BINAC_TORCH_THREADS", "2")
    assert engine_settings("/m", load_config("smol-synthetic"), 8192, cpu=True).cpu_threads_bind == "1,2"
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0-7")
    assert engine_settings("/m", load_config("smol-synthetic"), 8192, cpu=True).cpu_threads_bind == "0-7"


def test_a_gpu_gets_its_memory_share_and_vllms_own_scheduling():
    cfg = load_config("llama1b-math")
    s = engine_settings("/m", cfg, 131072, cpu=False)
    kw = engine_kwargs(s)
    assert kw["gpu_memory_utilization"] == cfg.generation.vllm_gpu_memory_utilization
    assert "kv_cache_memory_bytes" not in kw and "enable_chunked_prefill" not in kw
    assert kw["max_lora_rank"] == 16 and kw["dtype"] == "bfloat16" and s.cpu_threads_bind is None
    sized = engine_settings("/m", load_config("llama1b-math", {"generation.vllm_kv_cache_gib": 20}), 131072, False)
    assert engine_kwargs(sized)["kv_cache_memory_bytes"] == 20 * GIB


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
