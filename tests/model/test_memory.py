"""binac_core.model.memory: freed heap pages go back to the OS (glibc), which is what keeps a long `binac compare` on a
real model from growing stage after stage (docs/results-smol.md)."""

from __future__ import annotations

import ctypes.util
import platform
from pathlib import Path

import pytest

from binac_core.model.memory import return_freed_memory


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="malloc_trim is glibc's; other allocators return memory on their own terms",
)
def test_freed_heap_blocks_below_a_live_one_are_returned():
    assert ctypes.util.find_library("c")
    # 64 KiB blocks come from the heap (below glibc's mmap threshold); a block allocated after them pins the
    # heap's top, so freeing them leaves 400 MiB of free pages inside the heap that glibc keeps by itself.
    blocks = [bytearray(64 * 1024) for _ in range(6400)]
    pin = bytearray(64 * 1024)
    for b in blocks:
        b[::4096] = b"\x01" * len(b[::4096])  # touch every page
    del blocks
    kept = _rss_mib()
    assert return_freed_memory() is True
    returned = kept - _rss_mib()
    assert returned > 300, f"only {returned:.0f} MiB of ~400 MiB freed came back"
    del pin


_FREE_LARGE = """
import sys
from pathlib import Path
from binac_core.model.memory import map_large_blocks
def rss():
    return next(int(l.split()[1]) / 1024 for l in Path("/proc/self/status").read_text().splitlines()
                if l.startswith("VmRSS:"))
if sys.argv[1] == "map":
    assert map_large_blocks()
primer = bytearray(30 << 20)  # mapped (glibc's initial threshold is 128 KiB); freeing it raises the threshold
del primer
blocks = [bytearray(8 << 20) for _ in range(40)]  # 320 MiB of 8 MiB blocks
pin = bytearray(64 * 1024)
for b in blocks:
    b[::4096] = b"\\x01" * len(b[::4096])
before = rss()
del blocks
print(before - rss())
"""


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_large_blocks_are_unmapped_when_freed_only_with_map_large_blocks():
    import subprocess
    import sys

    def returned(variant: str) -> float:
        out = subprocess.run([sys.executable, "-c", _FREE_LARGE, variant], capture_output=True, text=True, check=True)
        return float(out.stdout.split()[-1])

    # glibc's default: after the 30 MiB block is freed, 8 MiB blocks come from the heap and stay there when freed
    assert returned("default") < 50
    assert returned("map") > 300
