"""Pulled records read from the store's CommitLog files, when they are on this machine.

A pull's records would otherwise cross ZeroMQ twice (store → remoting → client); RocketMQ's
broker serves them from its own mapped log. When remoting sees the store's files (one machine,
one storePathRootDir), the store answers a pull with the records' log ranges and remoting reads
them here. What is read is checked (each range starts with a record that names that offset as
its own), and a file replaced under the same name (a store wiped and restarted) is noticed by
its link count; anything amiss answers None, and the caller asks the store for the bytes.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from ferry.protocol import record

log = logging.getLogger("ferry.remoting")

RETRY_AFTER_S = 30.0  # after a miss, how long pulls go through the store before trying again
MAX_OPEN = 4  # segment files kept open (a consumer far behind reads an older one)


class LogReader:
    def __init__(self, directory: Path, segment_size: int, enabled: bool = True) -> None:
        self._dir = directory
        self._segment = segment_size
        self._enabled = enabled
        self._fds: dict[int, int] = {}  # segment start -> fd
        self._off_until = 0.0
        self.reads = 0
        self.misses = 0

    @property
    def active(self) -> bool:
        """Whether a pull should ask the store for ranges rather than records."""
        return self._enabled and time.monotonic() >= self._off_until

    def read(self, runs: list[tuple[int, int]]) -> bytearray | None:
        """The bytes of every [start, stop) range, joined; None when they cannot be trusted."""
        out = bytearray(sum(stop - start for start, stop in runs))
        view = memoryview(out)
        at = 0
        try:
            for run_start, stop in runs:
                first, start = at, run_start
                while start < stop:
                    seg = start - start % self._segment
                    n = min(stop, seg + self._segment) - start
                    got = os.preadv(self._fd(seg), [view[at : at + n]], start - seg)
                    if got != n:
                        self._miss(f"short read at {start}: {got} of {n} bytes")
                        return None
                    start += n
                    at += n
                if not _starts_a_record(out, first, run_start):
                    self._miss(f"no record of offset {run_start} where the store said")
                    return None
        except OSError as exc:
            self._miss(str(exc))
            return None
        finally:
            view.release()
        self.reads += 1
        return out

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def _fd(self, seg: int) -> int:
        fd = self._fds.get(seg)
        if fd is not None and os.fstat(fd).st_nlink == 0:  # deleted (retention, or replaced)
            os.close(self._fds.pop(seg))
            fd = None
        if fd is None:
            if len(self._fds) >= MAX_OPEN:
                os.close(self._fds.pop(min(self._fds)))
            fd = self._fds[seg] = os.open(self._dir / _file_name(seg), os.O_RDONLY)
        return fd

    def _miss(self, why: str) -> None:
        self.misses += 1
        self._off_until = time.monotonic() + RETRY_AFTER_S
        self.close()
        log.info("pulls go through the store for %.0f s: %s", RETRY_AFTER_S, why)


def _starts_a_record(buf: bytearray, at: int, phys: int) -> bool:
    if len(buf) - at < record.OFF_OFFSETS + 16:
        return False
    size: int
    magic: int
    own: int
    size, magic = record.PREFIX.unpack_from(buf, at)
    _, own = record.OFFSETS.unpack_from(buf, at + record.OFF_OFFSETS)
    return magic == record.MAGIC and own == phys and size <= len(buf) - at


def _file_name(start: int) -> str:
    return f"{start:020d}"  # the store's segment names (RocketMQ's)
