"""One scheduler per broker: an flock on <store>/scheduler/lock, held while it runs."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from ferry.protocol.errors import ServiceNotAvailableError


class DirLockedError(ServiceNotAvailableError):
    """Another scheduler process holds this directory."""


class DirLock:
    def __init__(self, root: Path) -> None:
        self._fd = os.open(root / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._fd)
            raise DirLockedError(f"another scheduler runs on {root}") from None

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing drops the flock
            self._fd = -1
