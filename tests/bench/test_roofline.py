"""The roofline bench's bookkeeping (`bench/roofline.py`): its FLOP count is that of the decode loop's own matmuls,
and its report has every row. No timing is asserted: speed is measured by the bench, never in tests."""

import sys
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # `bench` is a folder of the repository, not an installed package
    sys.path.insert(0, str(REPO))

from bench import roofline  # noqa: E402
from binac_core.model import decode  # noqa: E402
from binac_core.model.generation import Generation  # noqa: E402


def test_flop_count_is_that_of_the_loops_matmuls():
    """A call of 4 unpadded prompts of 10 tokens and 3 new tokens each, no end-of-turn: the matmul FLOPs the loop
    runs (torch's flop counter) are the counted work, plus the prefill's masked upper triangle of attention and
    each decode step's masked positions not yet written (a step attends over the cache's whole capacity), which the
    loop computes and the count leaves out (no output needs them), plus the RoPE table's."""
    model = roofline.testbed_model(0.0)
    shapes = roofline.Shapes.of(model.config)
    b, p, new = 4, 10, 3
    ids = torch.randint(2, 200, (b, p), generator=torch.Generator().manual_seed(0))
    with FlopCounterMode(display=False) as counter:
        decode.sample(model, ids, torch.ones_like(ids), new, 1.0, [], torch.Generator().manual_seed(0))
    work = roofline.Work()
    work.batch(shapes, [p] * b, [new] * b, peak=1.0, bandwidth=float("inf"))
    masked = b * shapes.attention_flops(1) * (p * p - p * (p + 1) // 2)
    masked += b * shapes.attention_flops(1) * sum((p + new) - (p + t + 1) for t in range(new - 1))
    rope_table = 2 * (shapes.head_dim // 2) * (p + new)  # the rotary module's frequencies x positions, once a call
    assert counter.get_total_flops() == work.flops + masked + rope_table
    assert work.floor_s == work.flops  # at 1 FLOP/s and infinite bandwidth every phase is compute bound


def test_bandwidth_bound_phase_takes_its_bytes_over_the_bandwidth():
    work = roofline.Work()
    work.phase(flops=10.0, nbytes=1000.0, peak=10.0, bandwidth=100.0)
    assert work.floor_s == 10.0


def test_report_has_every_batch_sampler_and_limit():
    shapes = roofline.Shapes(64, 192, 2, 4, 4, 16, 200)
    gens = [Generation("", [1] * 20, [2] * 8, [0.0] * 8) for _ in range(64)]
    runs = {
        f"{n}@{b}": [(2.0, 1.0, gens[: 4 if b == 1 else b])] * 2
        for n in ("loop", "generate", "before")
        for b in (1, 32, 64)
    }
    runs |= {f"matmul@{m}": [0.01, 0.02] for m in (*roofline.BATCHES, roofline.PEAK_ROWS)}
    runs["bandwidth"] = [1e10, 2e10]
    r = {
        "runs": runs,
        "testbed": {f"{n}@{c}": [(0.5, 0.4, 25.0)] * 2 for n in ("loop", "before") for c in roofline.TESTBED_BIAS},
        "shapes": shapes,
        "threads": 1,
        "repeats": 2,
        "new_tokens": 8,
        "before": "/tmp/old",
        "load_before": "1 / 1 / 1",
        "load_after": "1 / 1 / 1",
        "machine": {"nproc": 2, "cpu": "cpu", "torch": torch.__version__},
    }
    text = roofline.render(r)
    for b in roofline.BATCHES:
        for n in ("loop", "generate", "before"):
            assert f"| {b} | {n} |" in text
    assert "compute ceiling" in text and "memory bandwidth" in text
    assert "feedback-like" in text and "refinement-like" in text


def test_an_older_loop_merges_the_adapter_once_per_call():
    """The `--before` loop runs through this checkout's `HFBackend`, whose lean path asks for merged weights once
    per call and passes them on: for an older `sample` (no `weights` argument) nothing is merged on its behalf."""
    import types

    calls = []
    older = types.SimpleNamespace(supports=lambda m: True, llama_weights=lambda m: calls.append("merge"), sample=None)
    older.sample = lambda *a, **k: calls.append(("sample", a, k))
    seen = roofline.as_backend_module(older)
    assert seen.llama_weights("model") is None and not calls
    seen.sample("model", 1, weights=None)
    assert calls == [("sample", ("model", 1), {})]
