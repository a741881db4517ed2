"""Ownership of a service's directory: a `lock` file, and an `abort` marker naming the boot.

The lock (an flock held while the service runs, with the owner's pid in the file) keeps a
second process off the same files. The abort marker exists while a service that keeps one
runs and holds the machine's boot id: found at start-up, it means the last run did not stop
cleanly, and its boot id tells a killed process (the page cache, and so every byte written to
the mappings, survived) from a machine crash (writes since the last sync may be lost in any
order).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
from enum import Enum
from pathlib import Path

from ferry.protocol.errors import ServiceNotAvailableError
from ferry.runtime.files import fsync_dir

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")

log = logging.getLogger("ferry.runtime.dir_lock")


class DirLockedError(ServiceNotAvailableError):
    """Another process holds this directory."""


class LastStop(Enum):
    CLEAN = "clean"
    PROCESS_CRASH = "process crash"
    MACHINE_CRASH = "machine crash"


def boot_id() -> str:
    try:
        return BOOT_ID.read_text().strip()
    except OSError:
        return ""  # unknown: every unclean stop is then treated as a machine crash


class DirLock:
    """Takes <root>/lock or raises DirLockedError naming `owner`, the kind of process that
    holds it (e.g. "broker-store")."""

    def __init__(self, root: Path, owner: str) -> None:
        self.root = root
        self.lock_path = root / "lock"
        self.abort_path = root / "abort"
        self._fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._fd)
            self._fd = -1
            raise DirLockedError(
                f"directory {root} is in use by another {owner} "
                f"(its lock file {self.lock_path} is held)"
            ) from None
        os.ftruncate(self._fd, 0)
        os.write(self._fd, f"{os.getpid()}\n".encode())

    def last_stop(self) -> LastStop:
        try:
            marker = self.abort_path.read_text().strip()
        except FileNotFoundError:
            return LastStop.CLEAN
        now = boot_id()
        return LastStop.PROCESS_CRASH if now and marker == now else LastStop.MACHINE_CRASH

    def mark_running(self) -> None:
        tmp = self.abort_path.with_suffix(".tmp")
        try:
            tmp.write_text(boot_id() + "\n")
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            if exc.errno != errno.ENOSPC or not self.abort_path.exists():
                raise
            # A full disk after an unclean stop: the last run's marker stays. A crash of this
            # run still reads as one (as a machine crash if the boot differs: the careful way),
            # and a service that only reads must not be kept from starting by a page.
            log.warning("no space to rewrite %s: the last run's marker stays", self.abort_path)
            return
        os.replace(tmp, self.abort_path)
        fsync_dir(self.root)

    def mark_clean_stop(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.abort_path.unlink()
        fsync_dir(self.root)

    def release(self) -> None:
        """Drops the lock; a second call does nothing."""
        if self._fd < 0:
            return
        with contextlib.suppress(OSError):
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        with contextlib.suppress(OSError):
            os.close(self._fd)
        self._fd = -1
