"""A service's freed frames stay in the process: the same frames again fault no pages in."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

# Four 300 KB frames made and freed, a hundred times over, as a request loop does; prints the
# page faults that took. argv[1] == "keep": with the services' thresholds set first.
PROGRAM = """
import sys
from ferry.runtime.allocator import keep_freed_memory

def minor_faults():
    with open("/proc/self/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])

if sys.argv[1] == "keep":
    assert keep_freed_memory()
before = minor_faults()
for _ in range(100):
    frames = [bytes(300_000) for _ in range(4)]
    del frames
print(minor_faults() - before)
"""


def faults(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", PROGRAM, mode], capture_output=True, text=True, check=True
    )
    return int(out.stdout)


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="glibc's mallopt and /proc page-fault counts are Linux with glibc only",
)
def test_freed_frames_are_reused_without_faulting_pages_in_again() -> None:
    default, kept = faults("default"), faults("keep")
    # by default glibc trims the freed frames off the heap: ~73 pages per frame come back
    assert default > 5_000
    assert kept < default / 10
