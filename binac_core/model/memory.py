"""Handing freed heap memory back to the operating system after a stage's large transient allocations.

glibc's malloc keeps freed memory mapped for reuse: after a generation batch or an update of a real model (gigabytes
of activations and logits), the process's resident size stays near its high-water mark, and with the varying sizes
of the next stages' tensors (other batch shapes, other lengths) the heap fragments and grows further. Measured on
`smol` (docs/results-smol.md): a `binac compare` of three methods in one process grew to 17.8 GB resident while its
live tensors between updates were under 2 GB. `malloc_trim(0)` returns every whole free page of every arena to the
OS (`madvise(MADV_DONTNEED)` inside the heap, since glibc 2.8), so after each call the resident size is what is
live. The model-running stages call it once at their end (`HFBackend.generate`, `update.policy_update`); it costs
one pass over the heap, milliseconds, plus the page faults of re-touching the returned pages in the next stage.

It is a no-op where glibc is not the allocator (macOS, musl): those allocators return memory on their own terms.
It does not collect garbage: tensors are freed by reference counting when a stage's locals go away.

Returning memory at the end of a stage is not enough: within one stage (an update over several micro-batches, a
generation over several batches) tensors of changing sizes fragment the heap, and the same comparison still peaked
at 17.4 GB inside one stage. `map_large_blocks` therefore has glibc serve every block of 4 MiB or more (activations,
attention scores, logits of a real model) with its own `mmap`, unmapped the moment it is freed, instead of from the
heap, where glibc's default raises that threshold up to 32 MiB as large blocks are freed and keeps them. Measured
side by side on `smol` (three fresh models, two GRPO iterations each, docs/results-smol.md): peak 7.3 GB with
glibc's defaults, 7.3 GB with `malloc_trim` at stage ends, 5.5 GB with both (+5.6 % CPU time, the page faults of
fresh mappings); a 128 KiB threshold gave 4.8 GB at +16 %. `Policy` sets it when it loads a model.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.cache
def _malloc_trim():
    """glibc's `malloc_trim`, or None where the C library has none."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


def return_freed_memory() -> bool:
    """Give the heap's free pages back to the OS (glibc `malloc_trim(0)`); False where that is not available."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


LARGE_BLOCK = 4 << 20
"""Blocks of this size or more get their own mapping (`map_large_blocks`)."""
_M_MMAP_THRESHOLD = -3  # glibc malloc.h


def map_large_blocks() -> bool:
    """glibc `mallopt(M_MMAP_THRESHOLD, LARGE_BLOCK)`: large blocks are mapped alone and unmapped when freed (module
    docstring); process-wide, and idempotent. False where glibc's `mallopt` is not there."""
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, LARGE_BLOCK))
