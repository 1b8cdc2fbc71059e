"""The decode loop's roofline on `smol`: what this machine can do on one thread, and what share of it binac's decode
loop (`binac_core.model.decode`) and transformers' `generate` achieve; plus the loop against an older checkout's.

    python -m bench.roofline [--repeats 3] [--new-tokens 64] [--before TREE] [--out bench/results.md]
    python -m bench.run --roofline [--repeats N] [--out FILE]        (the same, from the harness)

The limits, measured in the same process and interleaved with the samplers (one probe of each per round), on
`BINAC_TORCH_THREADS` torch threads (default 1), the loop's own setting:
- the matmul rate (GFLOP/s) of the model's own shapes, as a decode step runs them: `F.linear` of an [M, in] input
  with every projection weight of the model in turn (q/k/v fused, o, gate/up fused, down, for each layer; then the
  LM head), the weights streamed from memory as in the loop (`matmul_seconds`). At M = `PEAK_ROWS` the inputs
  are reused enough for the rate to be compute bound: that is the compute ceiling; at M = 1 / 32 / 64 it is what
  the matmuls of a decode step of that batch cost alone;
- the memory bandwidth (GB/s): one streaming read of `STREAM_MIB` MiB (far beyond the last-level cache), `sum`
  (`read_bandwidth`).
Neither is the hardware's nameplate: they are what torch's kernels reach on these shapes, which is the ceiling a
loop built on them can reach.
The roofline of a sampling call (`Work`): per phase, the prefill and each decode step, the longer of its FLOPs at
the compute ceiling and its bytes at the bandwidth (the weights, plus the KV cache its rows read), summed. FLOPs
and bytes are counted from the model's shapes (`Shapes`) over the work its output needs: the real prompt tokens,
then one forward per generated token but each row's last, attending over that row's own context; no padding, no
finished rows. That is the same work whichever sampler produced the tokens (a call's lengths are its own: all run
the same prompts, seed and sampling distribution), so share = roofline seconds / seconds taken compares them.
Seconds: the limits and the shares are in CPU seconds of this process (`time.process_time`; one thread, so the
time it held a core): on a shared machine wall seconds also count the waits for a core, which move with the other
jobs' load; tokens/s are given both per wall second (as in the other rows of the results) and per CPU second.
Tokens count completion tokens including the end-of-turn token, as binac does; prompt rendering and decoding are
included, model loading is not. Batch 1 is `BATCH1_PROMPTS` prompts in one `generate` call of batch size 1.

The samplers: `HFBackend` (this checkout's decode loop), `HFBackend(lean=False)` (transformers' `generate`), and,
with `--before TREE`, TREE's `binac_core/model/decode.py` run by this checkout's `HFBackend` (one `sample` call per
batch, as its own backend called it). The model: smol with the actor LoRA adapter perturbed away from its identity
start (|scale B A| = 0.05 |W|, as scripts/gpu_check.py builds it), T = 1.

Also, with `--before`: the testbed-shaped case (`testbed_model`): a random Llama of the `testbed` preset's shapes
(hidden 64, 2 layers, 4 heads, vocabulary ~200 characters), batch 64, prompts of 100-200 tokens, up to 96 new
tokens, an end-of-turn bias giving about 25 tokens on average (the critic's feedback) or 50 (the refinements) with
the longest rows at the budget; wall and CPU seconds per call of the loop against TREE's, interleaved.

The results are the `roofline` section of the results file, between markers, replaced by the next run.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import importlib.util
import os
import sys
import time
import types
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812

from bench.common import interleave, load_average, machine, median, paired_ratio, write_section

REPO = Path(__file__).resolve().parent.parent
BATCHES = (1, 32, 64)
BATCH1_PROMPTS = 4
PEAK_ROWS = 256
"""Rows of the matmul-rate probe taken as the compute ceiling (arithmetic intensity ~128 FLOP per weight byte)."""
STREAM_MIB = 512
TESTBED_BIAS = {"feedback": 13.75, "refinement": 10.0}
"""End-of-turn logit bias of the testbed-shaped model giving ~25 and ~50 tokens on average, the longest rows at the
96-token budget (measured on `testbed_prompts`, seed 0: 24.3 and 49.0)."""


# ------------------------------------------------------------------------------------------------ counting work


@dataclass(frozen=True)
class Shapes:
    """A Llama model's sizes, for counting FLOPs and bytes (float32)."""

    hidden: int
    inter: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int

    @staticmethod
    def of(config) -> Shapes:
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        return Shapes(
            config.hidden_size,
            config.intermediate_size,
            config.num_hidden_layers,
            config.num_attention_heads,
            config.num_key_value_heads,
            head_dim,
            config.vocab_size,
        )

    def matmuls(self) -> list[tuple[str, int, int, int]]:
        """(name, in, out, count) of the loop's matmuls: q/k/v fused, o, gate/up fused, down per layer; the head."""
        qkv = (self.heads + 2 * self.kv_heads) * self.head_dim
        return [
            ("qkv", self.hidden, qkv, self.layers),
            ("o", self.heads * self.head_dim, self.hidden, self.layers),
            ("gate_up", self.hidden, 2 * self.inter, self.layers),
            ("down", self.inter, self.hidden, self.layers),
            ("head", self.hidden, self.vocab, 1),
        ]

    def layer_weights(self) -> int:
        """Weights of the per-layer projections, all layers (norms not counted: < 0.1 %)."""
        return sum(i * o * c for name, i, o, c in self.matmuls() if name != "head")

    def weight_bytes(self) -> int:
        return 4 * (self.layer_weights() + self.hidden * self.vocab)

    def attention_flops(self, context: int) -> int:
        """One query position against `context` keys, every layer: q k^T and the weights times v."""
        return 4 * self.layers * self.heads * self.head_dim * context

    def kv_bytes(self, context: int) -> int:
        """The keys and values one position reads over `context` cached positions, every layer."""
        return 4 * 2 * self.layers * self.kv_heads * self.head_dim * context


@dataclass
class Work:
    """A sampling call's FLOPs and roofline seconds, phase by phase (module docstring)."""

    flops: float = 0.0
    floor_s: float = 0.0

    def phase(self, flops: float, nbytes: float, peak: float, bandwidth: float) -> None:
        self.flops += flops
        self.floor_s += max(flops / peak, nbytes / bandwidth)

    def batch(self, s: Shapes, prompts: list[int], completions: list[int], peak: float, bandwidth: float) -> None:
        """Add one batch: prompt lengths and completion lengths (tokens, the end-of-turn token included) per row;
        `peak` in FLOP/s, `bandwidth` in bytes/s."""
        per_token = 2 * s.layer_weights()
        prefill = sum(per_token * n + sum(s.attention_flops(k + 1) for k in range(n)) for n in prompts)
        self.phase(prefill + 2 * s.hidden * s.vocab * len(prompts), s.weight_bytes(), peak, bandwidth)
        head = 2 * s.hidden * s.vocab
        for t in range(max(completions) - 1):
            rows = [p + t + 1 for p, c in zip(prompts, completions, strict=True) if c > t + 1]
            flops = sum(per_token + head + s.attention_flops(ctx) for ctx in rows)
            self.phase(flops, s.weight_bytes() + sum(s.kv_bytes(ctx) for ctx in rows), peak, bandwidth)


# ------------------------------------------------------------------------------------------------ machine limits


def matmul_seconds(weights: list[torch.Tensor], rows: int) -> float:
    """CPU seconds of `F.linear` of one [rows, in] input with each weight [out, in] in turn (one decode step's
    matmuls when `weights` are the model's, in the loop's order)."""
    inputs = {w.shape[1]: torch.randn(rows, w.shape[1]) for w in weights}
    t0 = time.process_time()
    for w in weights:
        F.linear(inputs[w.shape[1]], w)
    return time.process_time() - t0


def step_weights(policy) -> list[torch.Tensor]:
    """The merged weights a decode step multiplies by, in its order (`decode.llama_weights`)."""
    from binac_core.model import decode

    w = decode.llama_weights(policy.model)
    out = [m.weight for lw in w.layers for m in (lw.qkv, lw.o, lw.gate_up, lw.down)]
    return out + [w.head]


def read_bandwidth(buffer: torch.Tensor) -> float:
    """Bytes per CPU second of one streaming read of `buffer` (`sum`)."""
    t0 = time.process_time()
    buffer.sum()
    return buffer.numel() * buffer.element_size() / (time.process_time() - t0)


def limit_probes(weights: list[torch.Tensor]) -> dict:
    """{name: callable returning one measurement}: matmul seconds at each batch and at `PEAK_ROWS`, bandwidth."""
    buffer = torch.ones(STREAM_MIB << 18)
    probes = {f"matmul@{m}": functools.partial(matmul_seconds, weights, m) for m in (*BATCHES, PEAK_ROWS)}
    return probes | {"bandwidth": functools.partial(read_bandwidth, buffer)}


# ------------------------------------------------------------------------------------------------ samplers


def load_before(tree: Path) -> types.ModuleType:
    """`TREE/binac_core/model/decode.py` as a module of its own (this checkout's imports otherwise)."""
    spec = importlib.util.spec_from_file_location("decode_before", tree / "binac_core" / "model" / "decode.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def as_backend_module(module: types.ModuleType) -> types.SimpleNamespace:
    """`module` seen by this checkout's `HFBackend`: its `sample` called without the `weights` argument, which the
    backend's `llama_weights` here does not compute (an older loop merges the adapter itself, once per call)."""

    def sample(*args, weights=None, **kwargs):
        return module.sample(*args, **kwargs)

    return types.SimpleNamespace(supports=module.supports, llama_weights=lambda model: None, sample=sample)


def timed(fn) -> tuple[float, float, object]:
    """(wall seconds, CPU seconds of this process, result) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, out


def sampler_variant(backend, prompts, adapter, params, module=None):
    """A measurement callable: one `generate` over `prompts`; returns `timed`'s (wall s, CPU s, generations).
    With `module`, the backend's decode module is that one for the call."""
    from binac_core.model import generation

    def run():
        real = generation.decode
        generation.decode = module or real
        try:
            return timed(lambda: backend.generate(prompts, adapter, params))
        finally:
            generation.decode = real

    return run


def smol_setup(new_tokens: int):
    """(policy, actor adapter ref, prompts, params) of the smol measurement (module docstring)."""
    sys.path.insert(0, str(REPO / "scripts"))
    import gpu_check as gc

    from binac_core.foundation.config import load_config
    from binac_core.model.generation import SamplingParams
    from binac_core.model.policy import Policy
    from binac_core.model.smol import checkpoint

    policy = Policy(checkpoint(), load_config("smol-synthetic"), seed=0)
    gc.perturb_adapter(policy, "actor", 0.05, seed=1)
    actor = policy.save("actor", Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-roofline-{os.getpid()}" / "actor")
    prompts = gc.build_prompts(max(BATCHES), seed=1, role="actor")
    return policy, actor, prompts, SamplingParams(new_tokens, 1.0, 1.0, seed=0)


def smol_variants(policy, actor, prompts, params, before=None) -> dict:
    """{f"{sampler}@{batch}": callable} for every batch size and sampler (module docstring)."""
    from binac_core.model.generation import HFBackend

    out = {}
    for b in BATCHES:
        chunk = prompts[: BATCH1_PROMPTS if b == 1 else b]
        out[f"loop@{b}"] = sampler_variant(HFBackend(policy, b), chunk, actor, params)
        out[f"generate@{b}"] = sampler_variant(HFBackend(policy, b, lean=False), chunk, actor, params)
        if before is not None:
            out[f"before@{b}"] = sampler_variant(HFBackend(policy, b), chunk, actor, params, before)
    return out


# ------------------------------------------------------------------------------------------------ testbed shape


def testbed_model(eos_bias: float, seed: int = 0):
    """A random Llama of the `testbed` preset's shapes whose end-of-turn token (id 1) gets about `eos_bias` added
    to its logit at every position (a constant residual feature read by the LM head, as tests/tiny_checkpoint.py)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from binac_core.foundation.config import load_config

    m = load_config("testbed").model
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=200,
        hidden_size=m.hidden_size,
        intermediate_size=m.intermediate_size,
        num_hidden_layers=m.num_layers,
        num_attention_heads=m.num_heads,
        num_key_value_heads=m.num_heads,
        max_position_embeddings=m.max_positions,
        initializer_range=0.2,
        bos_token_id=None,
        eos_token_id=1,
        pad_token_id=0,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        model.model.embed_tokens.weight[:, 0] = 20.0
        model.lm_head.weight[:, 0] = 0.0
        model.lm_head.weight[1, 0] = eos_bias / m.hidden_size**0.5
    return model


def testbed_prompts(batch: int = 64, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded random prompts of 100-200 tokens: (input ids, attention mask)."""
    from binac_core.model.generation import left_padded

    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(100, 201, (batch,), generator=g).tolist()
    return left_padded([torch.randint(2, 200, (n,), generator=g).tolist() for n in lengths], 0)


def testbed_variants(before: types.ModuleType, new_tokens: int = 96) -> dict:
    """{f"{sampler}@{case}": callable returning (wall s, CPU s, mean completion tokens)}: the loop and TREE's."""
    from binac_core.model import decode

    ids, mask = testbed_prompts()

    def variant(module, model):
        def run():
            gen = torch.Generator().manual_seed(0)
            wall, cpu, out = timed(lambda: module.sample(model, ids, mask, new_tokens, 1.0, [1], gen))
            ends = (out.tokens == 1).int().argmax(-1)
            n = torch.where((out.tokens == 1).any(-1), ends + 1, out.tokens.shape[1])
            return wall, cpu, float(n.float().mean())

        return run

    out = {}
    for case, bias in TESTBED_BIAS.items():
        model = testbed_model(bias)
        out[f"loop@{case}"] = variant(decode, model)
        out[f"before@{case}"] = variant(before, model)
    return out


# ------------------------------------------------------------------------------------------------ the run


def measure(repeats: int, new_tokens: int, before_tree: Path | None, log) -> dict:
    from binac_core.model.runtime import configure_threads

    threads = configure_threads()
    before = load_before(before_tree) if before_tree else None
    policy, actor, prompts, params = smol_setup(new_tokens)
    shapes = Shapes.of(policy.model.get_base_model().config)
    samplers = smol_variants(policy, actor, prompts, params, before and as_backend_module(before))
    probes = limit_probes(step_weights(policy))
    load_before_run = load_average()
    log("warm-up: every sampler on 2 prompts, 4 tokens")
    warm = dataclasses.replace(params, max_new_tokens=4)
    before_module = before and as_backend_module(before)
    for run in smol_variants(policy, actor, prompts[:2], warm, before_module).values():
        run()
    log(f"{repeats} interleaved rounds of {len(samplers)} samplers and {len(probes)} probes")
    runs = interleave(samplers | probes, repeats, warmup=0)
    testbed = interleave(testbed_variants(before), repeats + 2) if before else {}
    return {
        "runs": runs,
        "testbed": testbed,
        "shapes": shapes,
        "threads": threads,
        "repeats": repeats,
        "new_tokens": new_tokens,
        "before": str(before_tree) if before_tree else None,
        "load_before": load_before_run,
        "load_after": load_average(),
        "machine": machine(),
    }


# ------------------------------------------------------------------------------------------------ analysis


def limits(r: dict, i: int) -> tuple[float, float]:
    """(compute ceiling in FLOP/s, bandwidth in bytes/s) of round `i`."""
    s: Shapes = r["shapes"]
    step = 2 * PEAK_ROWS * (s.layer_weights() + s.hidden * s.vocab)
    return step / r["runs"][f"matmul@{PEAK_ROWS}"][i], r["runs"]["bandwidth"][i]


def call_work(r: dict, batch: int, gens, i: int) -> Work:
    """The roofline work of one call of `batch`-sized batches over `gens`, at round `i`'s limits."""
    peak, bandwidth = limits(r, i)
    work = Work()
    for k in range(0, len(gens), batch):
        chunk = gens[k : k + batch]
        work.batch(r["shapes"], [len(g.prompt_ids) for g in chunk], [len(g.token_ids) for g in chunk], peak, bandwidth)
    return work


def sampler_rounds(r: dict, name: str, batch: int) -> dict[str, list[float]]:
    """Per round, for one sampler: tokens per wall second and per CPU second, achieved GFLOP per CPU second,
    roofline GFLOP/s and the share of the roofline (roofline seconds / CPU seconds)."""
    out = {"tok_s": [], "tok_cpu_s": [], "gflops": [], "roof_gflops": [], "share": []}
    for i, (wall, cpu, gens) in enumerate(r["runs"][f"{name}@{batch}"]):
        work = call_work(r, batch, gens, i)
        tokens = sum(len(g.token_ids) for g in gens)
        out["tok_s"].append(tokens / wall)
        out["tok_cpu_s"].append(tokens / cpu)
        out["gflops"].append(work.flops / cpu / 1e9)
        out["roof_gflops"].append(work.flops / work.floor_s / 1e9)
        out["share"].append(work.floor_s / cpu)
    return out


def matmul_gflops(r: dict, rows: int) -> list[float]:
    s: Shapes = r["shapes"]
    flops = 2 * rows * (s.layer_weights() + s.hidden * s.vocab)
    return [flops / t / 1e9 for t in r["runs"][f"matmul@{rows}"]]


# ------------------------------------------------------------------------------------------------ report


def _ratio(x) -> str:
    return "–" if x is None else f"{x[0]:.2f} [{x[1]:.2f}, {x[2]:.2f}]"


def limits_lines(r: dict) -> list[str]:
    s: Shapes = r["shapes"]
    bw = [b / 1e9 for b in r["runs"]["bandwidth"]]
    rates = {m: median(matmul_gflops(r, m)) for m in (*BATCHES, PEAK_ROWS)}
    lines = [
        "| limit (1 thread) | median [min, max] over rounds |",
        "|---|---|",
        f"| compute ceiling: matmul rate of the model's shapes at {PEAK_ROWS} rows | "
        f"{rates[PEAK_ROWS]:.1f} GFLOP/s [{min(matmul_gflops(r, PEAK_ROWS)):.1f}, "
        f"{max(matmul_gflops(r, PEAK_ROWS)):.1f}] |",
        f"| memory bandwidth: streaming read of {STREAM_MIB} MiB | {median(bw):.1f} GB/s [{min(bw):.1f}, "
        f"{max(bw):.1f}] |",
    ]
    for m in BATCHES:
        step_ms = median(r["runs"][f"matmul@{m}"]) * 1e3
        lines.append(
            f"| a decode step's matmuls alone at batch {m} (weights streamed as in the loop) | "
            f"{rates[m]:.1f} GFLOP/s ({step_ms:.0f} ms a step; {s.weight_bytes() / step_ms / 1e6:.1f} GB/s of "
            "weights) |"
        )
    return lines


def sampler_table(r: dict) -> list[str]:
    names = ["loop", "generate"] + (["before"] if r["before"] else [])
    lines = [
        "| batch | sampler | tokens/s (wall) | tokens per CPU s | achieved GFLOP per CPU s | roofline GFLOP/s | "
        "share of the roofline | loop / this, wall | loop / this, CPU |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for b in BATCHES:
        per = {n: sampler_rounds(r, n, b) for n in names}
        for n in names:
            m = {k: median(v) for k, v in per[n].items()}
            shares = per[n]["share"]
            vs = (
                ["", ""]
                if n == "loop"
                else [_ratio(paired_ratio(per["loop"][k], per[n][k])) for k in ("tok_s", "tok_cpu_s")]
            )
            lines.append(
                f"| {b} | {n} | {m['tok_s']:.1f} | {m['tok_cpu_s']:.1f} | {m['gflops']:.1f} | {m['roof_gflops']:.1f} "
                f"| **{100 * m['share']:.0f} %** [{100 * min(shares):.0f}, {100 * max(shares):.0f}] | {vs[0]} | {vs[1]} |"
            )
    return lines


def testbed_lines(r: dict) -> list[str]:
    if not r["testbed"]:
        return []
    lines = [
        "",
        "Testbed-shaped model (random weights of the `testbed` preset's shapes, batch 64, prompts of 100-200 "
        "tokens, up to 96 new tokens, T = 1), the loop against the `--before` tree's, seconds per call:",
        "",
        "| case | mean completion tokens | before: wall s / CPU s | loop: wall s / CPU s | before / loop, wall | "
        "before / loop, CPU |",
        "|---|---|---|---|---|---|",
    ]
    for case in TESTBED_BIAS:
        loop, old = r["testbed"][f"loop@{case}"], r["testbed"][f"before@{case}"]
        cells = []
        for k in (0, 1):
            cells.append(_ratio(paired_ratio([x[k] for x in old], [x[k] for x in loop])))
        lines.append(
            f"| {case}-like | {loop[0][2]:.1f} | {median([x[0] for x in old]):.3f} / {median([x[1] for x in old]):.3f} "
            f"| {median([x[0] for x in loop]):.3f} / {median([x[1] for x in loop]):.3f} | {cells[0]} | **{cells[1]}** |"
        )
    return lines


def render(r: dict) -> str:
    mach = r["machine"]
    before = f"; before = `{r['before']}`" if r["before"] else ""
    lines = [
        "## The decode loop's roofline on `smol` (`python -m bench.roofline`)",
        "",
        f"{datetime.date.today()}, {mach['nproc']} cores ({mach['cpu']}), torch {mach['torch']}, "
        f"{r['threads']} torch thread(s); load average {r['load_before']} before and {r['load_after']} after "
        f"(1 / 5 / 15 min); smol (SmolLM2-135M-Instruct, float32) with the actor LoRA adapter, T = 1, "
        f"{r['new_tokens']} new tokens at most; {r['repeats']} interleaved rounds (samplers and probes) after "
        f"one warm-up; medians, ratios paired per round (median [min, max]){before}. Definitions: the module "
        "docstring.",
        "",
        *limits_lines(r),
        "",
        *sampler_table(r),
        *testbed_lines(r),
    ]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--before", type=Path, help="an older checkout (e.g. a `git worktree`) whose decode loop to compare")
    p.add_argument("--out", default=str(REPO / "bench" / "results.md"), help="results file ('-': print only)")
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    t0 = time.perf_counter()

    def log(msg):
        print(f"[roofline {time.perf_counter() - t0:5.0f}s] {msg}", file=sys.stderr, flush=True)

    body = render(measure(args.repeats, args.new_tokens, args.before, log))
    print(body)
    if args.out != "-":
        write_section(Path(args.out), "roofline", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
