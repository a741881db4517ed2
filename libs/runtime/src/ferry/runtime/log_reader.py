"""Records read from the store's CommitLog files, by a service on the store's machine.

Records would otherwise cross ZeroMQ once more for each reader: a pull's records from the
store to remoting, every appended record from the store to the index over the feed. RocketMQ's
broker reads its own mapped log. When a service sees the store's files (one machine, one
storePathRootDir), it reads them here. What is read is checked (each range starts with a
record that names that offset as its own, or, where the caller allows it, the blank tail of
a segment), and a file replaced under the same name (a store wiped and restarted) is noticed
by its link count; anything amiss answers None, and the caller gets the bytes from the store.
"""

from __future__ import annotations

import bisect
import logging
import os
import time
from pathlib import Path

from ferry import native
from ferry.protocol import record
from ferry.runtime.offset_names import file_name, parse_file_name

log = logging.getLogger("ferry.runtime.log_reader")

RETRY_AFTER_S = 30.0  # after a miss, how long reads go through the store before trying again
MAX_OPEN = 4  # segment files kept open (a consumer far behind reads an older one)


class LogReader:
    """Segments are found by their names (their first offset) and sizes (the store allocates
    each whole), not by configuration: a reader configured otherwise than the store still
    reads the right bytes, or none."""

    def __init__(self, directory: Path, enabled: bool = True) -> None:
        self._dir = directory
        self._enabled = enabled
        self._starts: list[int] = []  # segment names, sorted
        self._open: dict[int, tuple[int, int]] = {}  # segment start -> (fd, size)
        self._off_until = 0.0
        self.reads = 0
        self.misses = 0

    @property
    def active(self) -> bool:
        """Whether to read the files now (rather than ask the store for the records)."""
        return self._enabled and time.monotonic() >= self._off_until

    def read(self, runs: list[tuple[int, int]], blank_ok: bool = False) -> bytearray | None:
        """The bytes of every [start, stop) range, joined; None when they cannot be trusted.
        blank_ok: a range may start with a segment's blank tail (the feed's ranges may)."""
        size = sum(stop - start for start, stop in runs)
        out = native.unfilled(size) if native.ENABLED else bytearray(size)  # all read over
        view = memoryview(out)
        at = 0
        try:
            for run_start, stop in runs:
                first, start = at, run_start
                seg_end = 0
                while start < stop:
                    fd, seg, size = self._segment(start)
                    seg_end = seg_end or seg + size  # the end of the run's first segment
                    n = min(stop, seg + size) - start
                    got = os.preadv(fd, [view[at : at + n]], start - seg)
                    if got != n:
                        self._miss(f"short read at {start}: {got} of {n} bytes")
                        return None
                    start += n
                    at += n
                if not _starts_a_record(out, first, run_start, seg_end if blank_ok else -1):
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
        for fd, _ in self._open.values():
            os.close(fd)
        self._open.clear()
        self._starts.clear()

    def _segment(self, offset: int) -> tuple[int, int, int]:
        """(fd, first offset, size) of the segment holding offset."""
        for listed in (False, True):
            i = bisect.bisect_right(self._starts, offset) - 1
            if i >= 0:
                seg = self._starts[i]
                fd, size = self._fd(seg)
                if offset < seg + size:
                    return fd, seg, size
            if not listed:  # a segment made since the last listing
                self._starts = sorted(
                    s for s in map(parse_file_name, os.listdir(self._dir)) if s is not None
                )
        raise OSError(f"no segment of {self._dir} holds offset {offset}")

    def _fd(self, seg: int) -> tuple[int, int]:
        opened = self._open.get(seg)
        if opened is not None:
            stat = os.fstat(opened[0])
            if stat.st_nlink:
                return opened[0], stat.st_size
            os.close(self._open.pop(seg)[0])  # deleted (retention, or replaced)
        if len(self._open) >= MAX_OPEN:
            os.close(self._open.pop(min(self._open))[0])
        fd = os.open(self._dir / file_name(seg), os.O_RDONLY)
        self._open[seg] = (fd, os.fstat(fd).st_size)
        return self._open[seg]

    def _miss(self, why: str) -> None:
        self.misses += 1
        self._off_until = time.monotonic() + RETRY_AFTER_S
        self.close()
        log.info("records come from the store for %.0f s: %s", RETRY_AFTER_S, why)


def _starts_a_record(buf: bytearray, at: int, phys: int, blank_end: int) -> bool:
    """Whether buf[at:] starts with the record of offset phys, or (blank_end >= 0) with the
    blank tail of a segment ending at blank_end."""
    if len(buf) - at < record.PREFIX.size:
        return False
    size: int
    magic: int
    size, magic = record.PREFIX.unpack_from(buf, at)
    if magic == record.BLANK_MAGIC:
        return size == blank_end - phys
    if len(buf) - at < record.OFF_OFFSETS + record.OFFSETS.size:
        return False
    own: int
    _, own = record.OFFSETS.unpack_from(buf, at + record.OFF_OFFSETS)
    return magic == record.MAGIC and own == phys and size <= len(buf) - at
