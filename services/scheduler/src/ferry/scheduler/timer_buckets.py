"""TimerBuckets: pending timer messages on disk, one append-only file per time bucket.

A bucket covers `width_ms` (timerPrecisionMs) of delivery times; its file,
`timer/<hour>/<bucket start ms>`, holds entries `[u32 size][i64 deliver ms][i64 origin]` +
the stored record (so delivery needs no read from the store, and the CommitLog's retention
cannot take a timer's message before it is due). Only the buckets being delivered are read
into memory: a million pending timers cost disk, not memory. A bucket may hold the same
origin twice (taken in again after a kill -9); reading it drops the repeat. A torn tail (a
machine crash) is ignored.
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import logging
import os
import struct
from pathlib import Path
from typing import NamedTuple

log = logging.getLogger("ferry.scheduler.timer_buckets")

ENTRY = struct.Struct(">Iqq")
HOUR_MS = 3_600_000
MAX_OPEN_FILES = 32


class TimerEntry(NamedTuple):
    deliver_ms: int
    origin: int  # CommitLog offset of the record in the timer topic
    raw: bytes  # that record as stored


class TimerBuckets:
    def __init__(self, root: Path, width_ms: int) -> None:
        self.root = root
        self.width_ms = width_ms
        root.mkdir(parents=True, exist_ok=True)
        self._ids: list[int] = sorted(self._scan())  # bucket starts with a file
        self._open: collections.OrderedDict[int, int] = collections.OrderedDict()
        self._dirty: set[int] = set()

    def _scan(self) -> list[int]:
        out: list[int] = []
        for hour in self.root.iterdir():
            if not hour.is_dir():
                continue
            for item in hour.iterdir():
                if item.name.isdigit():
                    out.append(int(item.name))
        return out

    def bucket_of(self, ms: int) -> int:
        return ms - ms % self.width_ms

    def _path(self, bucket: int) -> Path:
        return self.root / str(bucket // HOUR_MS) / str(bucket)

    def ids_between(self, lo: int, hi: int) -> list[int]:
        """Buckets with a file whose start is within [lo, hi]."""
        i = bisect.bisect_left(self._ids, lo)
        j = bisect.bisect_right(self._ids, hi)
        return self._ids[i:j]

    def first_at_or_after(self, lo: int) -> int | None:
        i = bisect.bisect_left(self._ids, lo)
        return self._ids[i] if i < len(self._ids) else None

    def __len__(self) -> int:
        return len(self._ids)

    # ---- writing ----

    def append(self, bucket: int, *entries: TimerEntry) -> None:
        """Appends entries to a bucket's file in one write."""
        data = b"".join(ENTRY.pack(len(e.raw), e.deliver_ms, e.origin) + e.raw for e in entries)
        fd = self._fd(bucket)
        written = os.write(fd, data)
        while written < len(data):  # a short write (full disk raises instead)
            written += os.write(fd, data[written:])
        self._dirty.add(bucket)

    def _fd(self, bucket: int) -> int:
        fd = self._open.get(bucket)
        if fd is not None:
            self._open.move_to_end(bucket)
            return fd
        path = self._path(bucket)
        path.parent.mkdir(exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._open[bucket] = fd
        i = bisect.bisect_left(self._ids, bucket)
        if i == len(self._ids) or self._ids[i] != bucket:
            self._ids.insert(i, bucket)
        while len(self._open) > MAX_OPEN_FILES:
            old, old_fd = self._open.popitem(last=False)
            if old in self._dirty:
                os.fsync(old_fd)
                self._dirty.discard(old)
            os.close(old_fd)
        return fd

    def sync(self) -> None:
        """Every appended entry durable (before the progress that counts them is saved)."""
        for bucket in list(self._dirty):
            fd = self._open.get(bucket)
            if fd is not None:
                os.fsync(fd)
        self._dirty.clear()

    # ---- reading, deleting ----

    def read(self, bucket: int) -> list[TimerEntry]:
        try:
            data = self._path(bucket).read_bytes()
        except FileNotFoundError:
            return []
        out: list[TimerEntry] = []
        seen: set[int] = set()
        pos = 0
        while pos + ENTRY.size <= len(data):
            size, deliver_ms, origin = ENTRY.unpack_from(data, pos)
            end = pos + ENTRY.size + size
            if end > len(data):
                log.warning("bucket %d: torn entry at %d ignored", bucket, pos)
                break
            if origin not in seen:
                seen.add(origin)
                out.append(TimerEntry(deliver_ms, origin, data[pos + ENTRY.size : end]))
            pos = end
        return out

    def delete_below(self, ms: int) -> int:
        """Deletes the files of buckets that start before ms (all delivered); returns how many."""
        i = bisect.bisect_left(self._ids, ms)
        gone, self._ids = self._ids[:i], self._ids[i:]
        for bucket in gone:
            fd = self._open.pop(bucket, None)
            if fd is not None:
                os.close(fd)
            self._dirty.discard(bucket)
            path = self._path(bucket)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            with contextlib.suppress(OSError):
                path.parent.rmdir()  # the hour's directory, once empty
        return len(gone)

    def close(self) -> None:
        self.sync()
        for fd in self._open.values():
            os.close(fd)
        self._open.clear()
