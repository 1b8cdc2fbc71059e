"""`scripts/device_check.py` in its CPU mode, end to end: every part writes its results with the expected keys and
numbers of the right kind; a part made to fail (`--inject-failure logprobs`) is reported with its error and
traceback while the next part still runs; and it needs none of the packages a lent device lacks (they are hidden
from every process of the run). Also its pieces on hand-made inputs: the answer length it picks, the micro-batch it
measures, a check that raises inside a part, and a part that outruns its budget."""

import json
import math
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import device_check as dc  # noqa: E402

SCRIPT = REPO / "scripts" / "device_check.py"
ABSENT = (
    "prefect",
    "mlflow",
    "duckdb",
    "vllm",
    "math_verify",
    "pandas",
    "pyarrow",
    "scipy",
    "sklearn",
    "PIL",
    "cloudpickle",
    "colorama",
    "dateutil",
    "dill",
    "google",
    "h2",
    "joblib",
    "narwhals",
    "pytz",
    "six",
    "threadpoolctl",
    "charset_normalizer",
    "requests",
    "urllib3",
    "torchvision",
    "torchaudio",
    "boto3",
    "botocore",
    "s3transfer",
    "jmespath",
    "moto",
)
"""Packages a lent device does not have (it has torch, transformers, peft, accelerate, safetensors, tokenizers and
what they require; pydantic travels as wheels): hidden from the run (`HIDE`). Those that the dev install brings
and transformers or torch import when present are among them."""
HIDE = """import os, sys
ABSENT = set(os.environ["DEVICE_CHECK_ABSENT"].split(","))


class Hidden:
    '''A finder that finds nothing of ABSENT, as if it were not installed, and defers the rest to `inner`.'''

    def __init__(self, inner):
        self.inner = inner

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ABSENT:
            return None
        return self.inner.find_spec(name, path, target)

    def __getattr__(self, attr):
        return getattr(self.inner, attr)


sys.meta_path[:] = [Hidden(f) for f in sys.meta_path]
"""


def _env(tmp_path) -> dict:
    """The environment of a run whose every Python process (children included) lacks `ABSENT`: a sitecustomize
    on PYTHONPATH wraps the import finders."""
    site = tmp_path / "hide"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(HIDE)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, "PYTHONPATH": str(site), "DEVICE_CHECK_ABSENT": ",".join(ABSENT), "CUDA_VISIBLE_DEVICES": ""}


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory) -> dict:
    """One CPU-mode run of every part, part 2 made to fail once its checks ran."""
    tmp = tmp_path_factory.mktemp("device-check")
    out = tmp / "out"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--cpu", "--out", str(out), "--inject-failure", "logprobs"],
        cwd=REPO,
        env=_env(tmp),
        capture_output=True,
        text=True,
        timeout=600,
    )
    return {"proc": proc, "out": out, "results": json.loads((out / "results.json").read_text())}


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def test_the_absent_packages_are_hidden_from_the_run(tmp_path):
    probe = "import importlib.util as u; print([m for m in " + repr(ABSENT) + " if u.find_spec(m)])"
    proc = subprocess.run([sys.executable, "-c", probe], env=_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "[]", proc.stdout + proc.stderr


def test_every_part_reports_and_the_failing_part_does_not_stop_the_next(cpu_run):
    proc, results = cpu_run["proc"], cpu_run["results"]
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert results["status"] == "error" and results["exit_code"] == 2 and results["mode"] == "cpu"
    assert list(results["parts"]) == ["loop", "logprobs", "speed", "placement"]
    statuses = {name: part["status"] for name, part in results["parts"].items()}
    assert statuses == {"loop": "pass", "logprobs": "error", "speed": "pass", "placement": "pass"}, proc.stdout
    failed = results["parts"]["logprobs"]
    assert failed["error"] == "done: InjectedFailure: injected by --inject-failure logprobs"
    assert "Traceback" in failed["traceback"] and "InjectedFailure" in failed["traceback"]
    assert "device_check: logprobs: error (done: InjectedFailure" in proc.stdout
    md = (cpu_run["out"] / "results.md").read_text()
    assert all(f"## {p}: " in md for p in ("loop", "logprobs", "speed", "placement")) and "InjectedFailure" in md


def test_the_loop_part_times_each_phase_and_counts_each_updates_memory(cpu_run):
    loop = cpu_run["results"]["parts"]["loop"]
    assert loop["settings"]["preset"] == "llama1b-math" and loop["settings"]["activation_checkpointing"] is True
    assert loop["settings"]["backend"] == "hf" and loop["settings"]["max_new_tokens"] == loop["length_choice"]["answer"]
    assert loop["model"]["shape"]["vocab"] == 512 and loop["model"]["tokenizer_ids"] < 512
    assert loop["environment"]["cuda_available"] is False
    binac, grpo = loop["iterations"]
    assert (binac["method"], grpo["method"]) == ("binac", "grpo")
    assert set(binac["phases_s"]) >= {
        "attempts",
        "feedback",
        "refined",
        "lookahead",
        "score",
        "actor update",
        "critic update",
        "other",
    }
    assert all(_number(v) and v >= 0 for v in binac["phases_s"].values())
    assert [g["stage"] for g in binac["generation"]] == ["attempts", "feedback", "refined", "lookahead"]
    assert [g["stage"] for g in grpo["generation"]] == ["attempts"]
    for g in binac["generation"] + grpo["generation"]:
        assert isinstance(g["tokens"], int) and g["tokens"] > 0 and _number(g["tokens_per_s"]) and g["tokens_per_s"] > 0
    assert [u["adapter"] for u in binac["updates"]] == ["actor", "critic"]
    assert [u["adapter"] for u in grpo["updates"]] == ["actor"]
    for u in binac["updates"] + grpo["updates"]:
        assert u["peak_bytes"] is None and "not measured on CPU" in u["peak_note"]
        assert u["skipped_steps"] == 0 and _number(u["loss"]) and u["micro_batch"]["sequences"] > 0
        predicted = u["predicted_bytes"]
        assert isinstance(predicted["total"], int) and predicted["total"] == sum(
            v for k, v in predicted.items() if k != "total"
        )


def test_the_logprob_part_judges_both_samplers_before_its_injected_failure(cpu_run):
    part = cpu_run["results"]["parts"]["logprobs"]
    assert [(r["sampler"], r["dtype"]) for r in part["rows"]] == [("decode loop", "float32"), ("generate", "float32")]
    for r in part["rows"]:
        assert r["ok"] is True and r["reasons"] == [] and r["tokens"] > 0
        assert _number(r["mean_abs"]) and r["mean_abs"] <= r["tolerance"]["mean_abs"]
        assert r["adapter_effect_mean_abs"] >= r["tolerance"]["adapter_effect_factor"] * r["tolerance"]["mean_abs"]
    assert part["decode_loop_supported"] is True
    assert 0 <= part["greedy_agreement"]["identical"] <= 1


def test_the_speed_part_times_each_sampler_at_each_batch(cpu_run):
    rows = cpu_run["results"]["parts"]["speed"]["rows"]
    assert [(r["sampler"], r["batch"]) for r in rows] == [
        (s, b) for s in ("decode loop", "generate") for b in dc.CPU.speed_batches
    ]
    assert all(r["dtype"] == "float32" and r["tokens"] > 0 and _number(r["tokens_per_s"]) for r in rows)


def test_without_a_cuda_device_the_cuda_mode_says_so_in_one_line(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out)],
        cwd=REPO,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert proc.stdout.startswith("device_check: no CUDA device") and len(proc.stdout.strip().splitlines()) == 1
    assert json.loads((out / "results.json").read_text())["status"] == "unavailable"


# --------------------------------------------------------------------------- pieces


def test_the_answer_length_is_the_longest_that_fits_else_the_shortest():
    lengths = (1024, 512, 256)
    assert dc.choose_length(lengths, 0.01, 1000).answer == 1024
    picked = dc.choose_length(lengths, 0.01, 80)  # 4.5 x 512 x 0.01 x 1.5 = 34.6 s <= 60; 1024 needs 69
    assert (picked.answer, picked.feedback) == (512, 256) and "does not" in picked.reason
    assert dc.choose_length(lengths, 1.0, 10).answer == 256


def test_the_measured_micro_batch_is_the_one_with_most_padded_tokens():
    def sample(prompt: int, completion: int):  # what `update.Sample` holds that the count reads (no torch import)
        return SimpleNamespace(prompt_ids=[1] * prompt, token_ids=[2] * completion)

    samples = [sample(5, 3), sample(2, 0), sample(4, 10), sample(1, 2)]
    assert dc.largest_micro_batch(samples, 2) == dc.MicroBatch(2, 14, 13)  # the empty completion is dropped
    assert dc.largest_micro_batch(samples, 8) == dc.MicroBatch(3, 14, 15)


def test_a_check_that_raises_is_recorded_and_the_part_goes_on():
    state = {"rows": [{"ok": True}]}
    assert dc.attempt(state, "first", lambda: 1 / 0) is None
    assert dc.attempt(state, "second", lambda: 7) == 7
    (err,) = state["errors"]
    assert err["where"] == "first" and err["error"] == "first: ZeroDivisionError: division by zero"
    assert "Traceback" in err["traceback"] and dc.part_status(state) == "error"
    assert dc.part_status({"rows": [{"ok": False}], "errors": state["errors"]}) == "fail"
    assert dc.part_status({"rows": [{"ok": True}]}) == "pass"


def test_a_part_past_its_budget_is_stopped_with_its_phase(tmp_path):
    result = tmp_path / "part" / "result.json"
    child = (
        "import json, signal, sys; open(sys.argv[1], 'w').write(json.dumps({'status': 'running', "
        "'phase': 'decoding'})); signal.pause()"
    )
    state = dc.run_part([sys.executable, "-c", child, str(result)], result, 3.0, tmp_path / "log.txt", grace_s=0)
    assert state["status"] == "error" and state["error"].startswith("timed out after 3 s in phase")
    assert state["exit_code"] is not None and state["exit_code"] < 0  # stopped by a signal
    crashed = dc.run_part([sys.executable, "-c", "raise SystemExit(4)"], result, 30.0, tmp_path / "log.txt")
    assert crashed["status"] == "error" and crashed["error"].startswith("the child exited with status 4 in phase start")


def test_the_placement_part_keeps_the_cpu_override_and_reports_what_it_cannot_check(cpu_run):
    """No GPU is visible to the run: the override row passes (every weight on the CPU), one worker per GPU is reported
    as needing two devices, and sleep mode as needing vLLM (hidden here)."""
    part = cpu_run["results"]["parts"]["placement"]
    (row,) = part["rows"]
    assert row["label"] == "model.device=cpu beside a GPU" and row["ok"] and row["devices"] == ["cpu"]
    assert part["visibility_note"].startswith("0 CUDA device(s) here") and "vLLM is not installed" in part["sleep_note"]
    assert "model.device=cpu beside a GPU: pass" in (cpu_run["out"] / "results.md").read_text()
