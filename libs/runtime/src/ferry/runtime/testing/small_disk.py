"""A small tmpfs for tests whose disk must really fill up (mounting needs root).

Used by the store's unit tests and the integration tests of a full disk: a file system of a
few MiB fills in a second, and ENOSPC, not a ratio override, is what the code meets there.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def small_disk(where: Path, size: int) -> Iterator[str]:
    """Mounts a tmpfs of `size` bytes on `where` (created) for the block and yields "", or,
    when it cannot be mounted here, yields why (the caller skips, saying so)."""
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        yield done.stderr.strip() or f"mount exited with {done.returncode}"
        return
    try:
        yield ""
    finally:
        # lazy: a process of the test still holding a file there must not fail the unmount
        subprocess.run(["umount", "-l", str(where)], check=False)
