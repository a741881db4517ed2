"""Keeps a service's freed buffers in the process instead of handing them back to the kernel.

Every request moves frames of 100 KiB to a few MiB (send batches, pulls, log reads). glibc
serves those from mmap, or trims them off the heap once freed, so the next frame of the same
size faults its pages in again. On this project's VMs a page touched afresh costs 2-9 µs
(bench/page_cache.py): remoting took 0.1-0.2 page faults per message that way. Services set
glibc's thresholds once at start; the SDK never changes its host's allocator.
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger("ferry.runtime.allocator")

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 8 << 20  # frames up to 8 MiB come from the heap, not from mmap
TRIM_THRESHOLD = 64 << 20  # up to 64 MiB freed at the heap's top is kept for the next frames


def keep_freed_memory() -> bool:
    """Sets glibc's mmap and trim thresholds; False where the C library has no mallopt
    (musl) or refuses the values."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    done = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    done = bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)) and done
    if not done:
        log.info("the C library kept its own allocation thresholds")
    return done
