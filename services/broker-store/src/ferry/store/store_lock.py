"""Ownership of a store directory: the `lock` file and the `abort` marker.

The lock (an flock held while the store is open) keeps a second store off the same files; the
abort marker exists while the store runs and is removed on a clean stop, so its presence at
start-up means the last run ended in a crash.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from ferry.protocol.errors import ServiceNotAvailableError
from ferry.store.mapped_file import fsync_dir


class StoreLockedError(ServiceNotAvailableError):
    """Another store process holds this store directory."""


class StoreLock:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.lock_path = root / "lock"
        self.abort_path = root / "abort"
        self._fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._fd)
            raise StoreLockedError(
                f"store directory {root} is in use by another broker-store "
                f"(its lock file {self.lock_path} is held)"
            ) from None
        os.ftruncate(self._fd, 0)
        os.write(self._fd, f"{os.getpid()}\n".encode())

    def last_exit_clean(self) -> bool:
        return not self.abort_path.exists()

    def mark_running(self) -> None:
        self.abort_path.touch()
        fsync_dir(self.root)

    def mark_clean_stop(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.abort_path.unlink()
        fsync_dir(self.root)

    def release(self) -> None:
        with contextlib.suppress(OSError):
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
