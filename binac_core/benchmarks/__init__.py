"""The benchmarks, by name: `get(name)` returns its `Benchmark` (binac_core/benchmarks/interface.py).

| name | module | rows | grader |
| --- | --- | --- | --- |
| `synthetic` | `synthetic` | generated (seeded), with an oracle critic and a first-error analysis | `A: <digit>` |
| `math`, `math500` | `math` | `binac_core.benchmarks.data` (same eval split, MATH-500) | `binac_core.grading.math` |
| `gsm8k` | `gsm8k` | `binac_core.benchmarks.data` | `binac_core.grading.gsm8k` |
| `mbpp` | `mbpp` | `binac_core.benchmarks.data`; the critic may see the execution result | `binac_core.grading.code` |
| `gpqa_diamond` | `gpqa` | `binac_core.benchmarks.data` (eval only) | `binac_core.grading.gpqa` |

Adding one: a module here that builds a `Benchmark`, and one `register(...)` line below (README, "Adding a
benchmark"). Nothing else in the pipeline names a benchmark.
"""

from __future__ import annotations

from collections.abc import Callable

from binac_core.benchmarks import gpqa, gsm8k, math, mbpp, synthetic
from binac_core.benchmarks.interface import Benchmark, FeedbackAnalysis
from binac_core.errors import BinacError

__all__ = ["Benchmark", "FeedbackAnalysis", "get", "names", "register"]

_REGISTRY: dict[str, Benchmark] = {}


def register(benchmark: Benchmark) -> Benchmark:
    """Make `benchmark` known by its name; a name registered twice is an error."""
    if benchmark.name in _REGISTRY:
        raise BinacError(f"benchmark {benchmark.name!r} is registered twice")
    _REGISTRY[benchmark.name] = benchmark
    return benchmark


def get(name: str) -> Benchmark:
    """The benchmark called `name`; an unknown name is a one-line `BinacError` listing the known ones."""
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise BinacError(f"unknown benchmark {name!r} (known: {', '.join(names())})") from None


def names(having: Callable[[Benchmark], object] | None = None) -> list[str]:
    """The registered benchmark names, sorted; with `having`, those whose benchmark it is true of (a capability,
    e.g. `lambda b: b.oracle_feedback is not None`)."""
    return sorted(n for n, b in _REGISTRY.items() if having is None or having(b))


register(synthetic.BENCHMARK)
register(math.MATH)
register(math.MATH500)
register(gsm8k.BENCHMARK)
register(mbpp.BENCHMARK)
register(gpqa.BENCHMARK)
