"""The vLLM engine's settings (`binac_core.generation_vllm.engine_settings`, `engine_kwargs`), pure: what the CPU
build and a GPU are started with, and why each differs; no vLLM needed."""

from binac_core.config import load_config
from binac_core.generation_vllm import GIB, engine_kwargs, engine_settings


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
