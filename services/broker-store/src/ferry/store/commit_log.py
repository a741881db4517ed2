"""The CommitLog: fixed-size segment files holding every record in arrival order.

Segments are named by their 20-digit start offset and all have `segment_size` bytes; a global
(physical) offset is a segment's start plus a position in it. A record never ends closer than
BLANK_MIN bytes to its segment's end: when the next record does not fit, the tail is marked with
a blank record [remaining i32][BLANK_MAGIC u32] and writing goes on in a new segment.

append() is the store's hot path: per record three struct patches (queue id/offsets, store
stamp, CRC) and its ConsumeQueue entry, on a copy of the batch that one pwrite puts in the
segment. Reads go through the segments' mappings, which share the page cache with the writes.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from ferry import native
from ferry.protocol import record, record_layout
from ferry.protocol.errors import (
    BrokerSystemError,
    DiskFullError,
    InvalidParameterError,
    ServiceNotAvailableError,
)
from ferry.runtime.files import fsync_dir
from ferry.runtime.offset_names import file_name, parse_file_name
from ferry.store.mapped_file import MappedFile

log = logging.getLogger("ferry.store.commitlog")

BLANK = record_layout.PREFIX  # a blank record: [remaining i32][BLANK_MAGIC u32]
# QUEUEID, FLAG, QUEUEOFFSET, PHYSICALOFFSET, patched in one call
FIELDS = record_layout.fields_at("QUEUEID", "FLAG", "QUEUEOFFSET", "PHYSICALOFFSET")
CQ_ENTRY = record_layout.CQ_ENTRY  # commitlog offset, size, tags code
CQ_ENTRY_SIZE = CQ_ENTRY.size


class Appended(NamedTuple):
    phys_offsets: list[int]
    cq_entries: bytearray  # one ConsumeQueue entry per record, in order
    from_offset: int  # log end before the append
    next_offset: int  # log end after it
    # the bytes of [from_offset, next_offset) as written, when one write held them all (no
    # segment roll): the feed publishes these rather than reading them back through the
    # mapping (which costs a page fault per 4 KiB on the first read of fresh pages)
    written: bytearray | None = None


class CommitLog:
    def __init__(self, directory: Path, segment_size: int) -> None:
        self.directory = directory
        self.segment_size = segment_size
        self.segments: list[MappedFile] = []
        self.end = 0  # where the next record goes
        self.flushed = 0  # everything below is on disk
        self._no_room = False  # the last segment could not be allocated (ENOSPC)

    # ---- files ----

    def load(self) -> None:
        """Maps the existing segments; end is set by recovery."""
        self.directory.mkdir(parents=True, exist_ok=True)
        starts: list[int] = []
        for path in self.directory.iterdir():
            start = parse_file_name(path.name)
            if start is None:
                log.warning("ignoring %s: not a CommitLog segment name", path)
                continue
            if start % self.segment_size:
                raise BrokerSystemError(
                    f"{path} does not start at a multiple of mappedFileSizeCommitLog "
                    f"({self.segment_size}): was that setting changed?"
                )
            starts.append(start)
        starts.sort()
        for prev, nxt in itertools.pairwise(starts):
            if nxt != prev + self.segment_size:
                raise BrokerSystemError(
                    f"CommitLog segments are not contiguous: {file_name(prev)} is followed "
                    f"by {file_name(nxt)}"
                )
        self.segments = [
            MappedFile(self.directory / file_name(s), s, self.segment_size) for s in starts
        ]
        if self.segments:
            self.end = self.flushed = self.segments[0].start

    @property
    def min_offset(self) -> int:
        return self.segments[0].start if self.segments else self.end

    def segment_at(self, offset: int) -> MappedFile | None:
        if not self.segments:
            return None
        i = (offset - self.segments[0].start) // self.segment_size
        return self.segments[i] if 0 <= i < len(self.segments) else None

    def _segment_for_write(self) -> MappedFile:
        seg = self.segment_at(self.end)
        if seg is not None:
            return seg
        start = self.end
        if self._no_room and _available(self.directory) < self.segment_size:
            raise self._no_room_error(start)  # still no room: not worth a file each time
        seg = MappedFile(self.directory / file_name(start), start, self.segment_size, create=True)
        try:
            _reserve(seg)
        except OSError as exc:
            seg.close()
            seg.path.unlink()
            if exc.errno == errno.ENOSPC:
                self._no_room = True
                raise self._no_room_error(start) from None
            raise ServiceNotAvailableError(
                f"cannot allocate CommitLog segment {seg.path.name}: {exc.strerror}"
            ) from None
        self._no_room = False
        fsync_dir(self.directory)
        self.segments.append(seg)
        return seg

    def _no_room_error(self, start: int) -> DiskFullError:
        return DiskFullError(
            f"disk full: no space left on the file system of {self.directory} for "
            f"CommitLog segment {file_name(start)} ({self.segment_size} bytes): the store "
            "refuses writes until space is freed; reads go on"
        )

    # ---- writing ----

    def append(
        self,
        buf: bytes,
        sizes: list[int],
        flags: list[int],
        tags: list[int],
        queue_id: int,
        first_queue_offset: int,
        store_ms: int,
        store_host: bytes,
    ) -> Appended:
        """Appends validated records (sizes/flags/tags from the batch scan), rolling to a new
        segment where the next record does not fit."""
        n = len(sizes)
        phys = [0] * n
        cq = bytearray(CQ_ENTRY_SIZE * n)
        from_offset = self.end
        src_view = memoryview(buf)
        crc32 = zlib.crc32
        pack_fields = FIELDS.pack_into
        pack_stamp = record.STORE_STAMP.pack_into
        pack_crc = record.CRC.pack_into
        pack_cq = CQ_ENTRY.pack_into
        off_fields, off_stamp = record_layout.OFF_QUEUE_ID, record_layout.OFF_STORE_TIMESTAMP
        off_crc, crc_start = record_layout.OFF_CRC, record_layout.CRC_START
        written: list[tuple[MappedFile, int, int]] = []  # to undo a failed append
        last = bytearray()
        src = 0
        k = 0
        try:
            while k < n:
                seg = self._segment_for_write()
                pos = self.end - seg.start
                room = seg.size - record.BLANK_MIN - pos
                used = len(buf) - src
                j = n
                if used > room:
                    j, used = k, 0
                    while j < n and used + sizes[j] <= room:
                        used += sizes[j]
                        j += 1
                    if j == k:
                        written.append((seg, pos, pos + BLANK.size))
                        _write(seg.fd, BLANK.pack(seg.size - pos, record.BLANK_MAGIC), pos)
                        self.end = seg.end
                        continue
                # Patch a copy, then write it: pwrite fills fresh page-cache pages without the
                # zeroing and fault of a first write through the mapping (2x faster here).
                # Readers see the bytes through the mapping: one page cache.
                out = bytearray(src_view[src : src + used])
                at = seg.start + pos
                if native.ENABLED:
                    at = native.stamp(
                        out, sizes, flags, tags, phys, k, j, queue_id, first_queue_offset, at,
                        store_ms, store_host, cq,
                    )  # fmt: skip
                else:
                    view = memoryview(out)
                    local = 0
                    for i in range(k, j):
                        size = sizes[i]
                        pack_fields(
                            out, local + off_fields, queue_id, flags[i], first_queue_offset + i, at
                        )
                        pack_stamp(out, local + off_stamp, store_ms, store_host)
                        pack_crc(
                            out, local + off_crc, crc32(view[local + crc_start : local + size])
                        )
                        pack_cq(cq, CQ_ENTRY_SIZE * i, at, size, tags[i])
                        phys[i] = at
                        at += size
                        local += size
                    view.release()
                written.append((seg, pos, pos + used))
                _write(seg.fd, out, pos)
                last = out
                self.end = at
                src += used
                k = j
        except BaseException:
            # A failed write (disk error) or segment (disk full): no part of the batch stays.
            self.end = from_offset
            for seg, lo, hi in written:
                try:
                    _write(seg.fd, bytes(hi - lo), lo)
                except OSError:
                    log.exception("could not undo a failed append at %d", seg.start + lo)
            raise
        whole = last if len(written) == 1 and len(last) == self.end - from_offset else None
        return Appended(phys, cq, from_offset, self.end, whole)

    # ---- reading ----

    def view(self, start: int, stop: int) -> memoryview:
        """Bytes [start, stop) lying in one segment, without a copy."""
        seg = self.segment_at(start)
        if seg is None or stop > seg.end or stop > self.end or start > stop:
            raise InvalidParameterError(f"log range [{start}, {stop}) is not readable")
        return seg.view[start - seg.start : stop - seg.start]

    def slice(self, start: int, stop: int) -> memoryview | bytes:
        """Bytes [start, stop) of the log; a copy only when they span segments."""
        seg = self.segment_at(start)
        if seg is not None and stop <= seg.end:
            return self.view(start, stop)
        parts: list[memoryview] = []
        at = start
        while at < stop:
            seg = self.segment_at(at)
            if seg is None:
                raise InvalidParameterError(f"log range [{start}, {stop}) is not readable")
            upto = min(stop, seg.end)
            parts.append(self.view(at, upto))
            at = upto
        return b"".join(parts)

    def read_records(self, offset: int, max_bytes: int) -> tuple[int, int, memoryview | bytes]:
        """Whole records from offset, one segment at most: (actual start, next offset, bytes).

        Skips a blank segment tail (start and next move past it); returns at least one record
        when there is one, even if it is bigger than max_bytes."""
        start = offset
        if start < self.end:
            seg = self.segment_at(start)
            if seg is None:
                raise InvalidParameterError(f"offset {start} is outside the CommitLog")
            pos = start - seg.start
            _, magic = record.PREFIX.unpack_from(seg.mm, pos)
            if magic == record.BLANK_MAGIC:
                start = seg.end
            elif magic != record.MAGIC:
                raise InvalidParameterError(f"offset {start} is not at a record boundary")
        if start >= self.end:
            return start, start, b""
        seg = self.segment_at(start)
        assert seg is not None
        first = pos = start - seg.start
        limit = min(seg.size, self.end - seg.start)
        mm = seg.mm
        unpack = record.PREFIX.unpack_from
        nxt = 0
        while pos < limit:
            size, magic = unpack(mm, pos)
            if magic != record.MAGIC:
                if magic == record.BLANK_MAGIC:
                    nxt = seg.end
                break
            if pos > first and pos - first + size > max_bytes:
                break
            pos += size
        return start, nxt or seg.start + pos, seg.view[first:pos]

    def iter_positions(self, start: int, stop: int) -> Iterator[tuple[Any, int, int, int]]:
        """(segment mapping, position in it, global offset, size) of each record in
        [start, stop), blank tails skipped; stops at anything that is not a record."""
        at = start
        while at < stop:
            seg = self.segment_at(at)
            if seg is None:
                return
            pos = at - seg.start
            size, magic = record.PREFIX.unpack_from(seg.mm, pos)
            if magic == record.BLANK_MAGIC:
                at = seg.end
                continue
            if magic != record.MAGIC or size < record.FIXED_SIZE or pos + size > seg.size:
                return
            yield seg.mm, pos, at, size
            at += size

    # ---- durability ----

    def unflushed_segments(self) -> list[MappedFile]:
        """Segments holding bytes of [flushed, end)."""
        if self.flushed >= self.end:
            return []
        return [s for s in self.segments if s.end > self.flushed and s.start < self.end]

    # ---- retention ----

    def deletable_head(self) -> MappedFile | None:
        """The oldest segment, if retention may delete it: never the segment being written,
        nor one holding bytes not flushed yet."""
        if len(self.segments) < 2:
            return None
        seg = self.segments[0]
        return seg if seg.end <= self.flushed else None

    def delete_head(self) -> None:
        """Deletes the oldest segment (checked with deletable_head)."""
        seg = self.segments.pop(0)
        seg.close()
        seg.path.unlink(missing_ok=True)
        fsync_dir(self.directory)

    # ---- recovery ----

    def truncate(self, end: int) -> None:
        """Makes `end` the log end: zeroes the rest of its segment, deletes later segments."""
        keep: list[MappedFile] = []
        deleted = False
        for seg in self.segments:
            if seg.end <= end:
                keep.append(seg)
            elif seg.start <= end:
                seg.zero_from(end - seg.start)
                try:
                    _reserve(seg)
                except OSError as exc:
                    log.warning("could not reserve the rest of %s: %s", seg.path, exc)
                keep.append(seg)
            else:
                log.warning("recovery: deleting CommitLog segment %s past the log end", seg.path)
                seg.close()
                seg.path.unlink()
                deleted = True
        if deleted:
            fsync_dir(self.directory)
        self.segments = keep
        self.end = end
        self.flushed = min(self.flushed, end)

    def close(self) -> None:
        for seg in self.segments:
            seg.close()
        self.segments = []


def _write(fd: int, data: bytes | bytearray, pos: int) -> None:
    view = memoryview(data)
    while view:
        done = os.pwrite(fd, view, pos)
        view = view[done:]
        pos += done


def _available(directory: Path) -> int:
    """Bytes the file system holding directory still has for us (0 when unknown)."""
    try:
        st = os.statvfs(directory)
    except OSError:
        return 0
    return st.f_bavail * st.f_frsize


def _reserve(seg: MappedFile) -> None:
    """Allocates the segment's blocks up front: appends into allocated blocks run faster
    than into a sparse file, and a full disk shows here as a refused put, not a failed write
    in the middle of a batch."""
    os.posix_fallocate(seg.fd, 0, seg.size)
