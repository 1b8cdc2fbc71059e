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
