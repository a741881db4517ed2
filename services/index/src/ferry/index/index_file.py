"""One index file: a hash table on disk from key hashes to CommitLog offsets and store times.

In the spirit of RocketMQ's IndexFile (a header, a table of hash slots, entries chained by the
number of the previous entry of their slot), with Ferry's own layout. Little-endian:

    0    magic u32 'FIDX', version u16, reserved u16
    8    slot_count u32, max_entries u32
    64   header copy A (64 B)  seq u64, count u32, -, begin_ms i64, end_ms i64,
    128  header copy B (64 B)  begin_phys i64, end_phys i64, applied i64, crc32 u32, -
    256  slots: slot_count x u32, the number of the newest entry of each slot (0: none)
    ...  entries, numbered from 1: key hash u64, CommitLog offset i64, store time ms i64,
         number of the previous entry of the same slot u32, marker u32

What is committed is what the newest valid header copy says: `count` entries, and every
CommitLog record below `applied` indexed. A commit writes the other copy (seq + 1), so a write
torn by a crash leaves the previous commit readable. Entries written after the last commit
(a process killed in the middle of a batch) are undone on open: their slots are pointed back
to the entries they chained to and their bytes are zeroed, so nothing is indexed twice.
"""

from __future__ import annotations

import contextlib
import functools
import mmap
import os
import struct
import sys
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from ferry import native
from ferry.protocol.errors import BrokerSystemError
from ferry.runtime.offset_names import parse_file_name

MAGIC = 0x46494458  # "FIDX"
VERSION = 1
PREFIX = struct.Struct("<IHHII")
HEADER = struct.Struct("<QIIqqqqq")  # seq, count, -, begin/end ms, begin/end phys, applied
CRC = struct.Struct("<I")
HEADER_AT = (64, 128)
HEADER_SIZE = 256
SLOT = struct.Struct("<I")
ENTRY = struct.Struct("<QqqII")  # key hash, CommitLog offset, store ms, prev entry, marker
ENTRY_SIZE = ENTRY.size
ENTRY_MARKER = 0xE7E7E7E7  # never zero: an entry of zeros was never written
NO_TIME = -1
RESERVE_ENTRIES = 65_536  # entries allocated on disk at a time (2 MiB)

assert ENTRY_SIZE == 32
assert HEADER.size + CRC.size <= 64


class IndexFileError(BrokerSystemError):
    """A file that is not an index file, or one of another geometry than its size says."""


class Hit(NamedTuple):
    phys_offset: int
    store_ms: int


class Header(NamedTuple):
    seq: int = 0
    entries: int = 0
    begin_ms: int = NO_TIME
    end_ms: int = NO_TIME
    begin_phys: int = -1
    end_phys: int = -1
    applied: int = 0


def file_size(slot_count: int, max_entries: int) -> int:
    return HEADER_SIZE + slot_count * SLOT.size + max_entries * ENTRY_SIZE


class IndexFile:
    """A mapped index file. Not thread-safe: one loop writes and reads it."""

    def __init__(self, path: Path, mm: mmap.mmap, fd: int, slot_count: int, max_entries: int):
        self.path = path
        self.begin_name = parse_file_name(path.name) or 0
        self._mm = mm
        self._fd = fd
        self.slot_count = slot_count
        self.max_entries = max_entries
        self._entries_at = HEADER_SIZE + slot_count * SLOT.size - ENTRY_SIZE  # entry n at + n*32
        self.header = Header()
        self.count = 0  # entries written, committed or not
        self.begin_ms = self.end_ms = NO_TIME
        self.begin_phys = self.end_phys = -1
        self.dirty = False  # written since the last sync
        self._reserved = 0  # entries whose blocks are allocated
        self._slots = _Slots(mm, slot_count)

    # ---- opening ----

    @classmethod
    def create(cls, path: Path, slot_count: int, max_entries: int) -> IndexFile:
        """A new, empty file (sparse: blocks are allocated as entries are written)."""
        if slot_count < 1 or max_entries < 1:
            raise IndexFileError("an index file needs at least one slot and one entry")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.ftruncate(fd, file_size(slot_count, max_entries))
            # the slots are written anywhere: their blocks are taken now, so that a full disk
            # is an OSError here and never a SIGBUS on a write through the mapping
            os.posix_fallocate(fd, 0, HEADER_SIZE + slot_count * SLOT.size)
            os.pwrite(fd, PREFIX.pack(MAGIC, VERSION, 0, slot_count, max_entries), 0)
            mm = mmap.mmap(fd, file_size(slot_count, max_entries))
        except BaseException:
            os.close(fd)
            raise
        return cls(path, mm, fd, slot_count, max_entries)

    @classmethod
    def open(cls, path: Path) -> IndexFile:
        """Maps an existing file, reads its newest valid header and undoes uncommitted entries."""
        fd = os.open(path, os.O_RDWR)
        try:
            raw = os.pread(fd, PREFIX.size, 0)
            size = os.fstat(fd).st_size
            if len(raw) < PREFIX.size:
                raise IndexFileError(f"{path} is too short to be an index file")
            magic, version, _, slots, entries = PREFIX.unpack(raw)
            if magic != MAGIC or version != VERSION:
                raise IndexFileError(f"{path} is not a Ferry index file (v{VERSION})")
            if slots < 1 or entries < 1 or size != file_size(slots, entries):
                raise IndexFileError(
                    f"{path} holds {size} bytes, not what {slots} slots and {entries} entries take"
                )
            mm = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            raise
        index = cls(path, mm, fd, slots, entries)
        index._load()
        return index

    def _load(self) -> None:
        best = Header()
        for at in HEADER_AT:
            raw = self._mm[at : at + HEADER.size + CRC.size]
            (crc,) = CRC.unpack_from(raw, HEADER.size)
            if crc != zlib.crc32(raw[: HEADER.size]):
                continue
            seq, count, _, b_ms, e_ms, b_phys, e_phys, applied = HEADER.unpack_from(raw)
            if seq > best.seq and 0 <= count <= self.max_entries:
                best = Header(seq, count, b_ms, e_ms, b_phys, e_phys, applied)
        self.header = best
        self.undo_uncommitted()

    def undo_uncommitted(self) -> int:
        """Removes entries past the committed count (newest first, so every slot ends up on
        the newest committed entry of its chain); returns how many there were."""
        n = self.header.entries + 1
        written: list[int] = []
        while n <= self.max_entries and any(self._entry_bytes(n)):
            written.append(n)
            n += 1
        for n in reversed(written):
            key_hash, _, _, prev, _ = ENTRY.unpack_from(self._mm, self._entries_at + n * ENTRY_SIZE)
            slot_at = HEADER_SIZE + (key_hash % self.slot_count) * SLOT.size
            if SLOT.unpack_from(self._mm, slot_at)[0] == n:
                SLOT.pack_into(self._mm, slot_at, prev if prev < n else 0)
            pos = self._entries_at + n * ENTRY_SIZE
            self._mm[pos : pos + ENTRY_SIZE] = bytes(ENTRY_SIZE)
        if written:
            self.dirty = True
        h = self.header
        self.count = h.entries
        self.begin_ms, self.end_ms, self.begin_phys, self.end_phys = h[2:6]
        return len(written)

    def _entry_bytes(self, n: int) -> bytes:
        pos = self._entries_at + n * ENTRY_SIZE
        return self._mm[pos : pos + ENTRY_SIZE]

    # ---- writing ----

    @property
    def free(self) -> int:
        return self.max_entries - self.count

    @property
    def applied(self) -> int:
        """CommitLog offset below which every record is indexed, as last committed."""
        return self.header.applied

    def put(self, key_hash: int, phys_offset: int, store_ms: int) -> None:
        """Adds one entry (visible to lookups at once, durable after commit())."""
        self.put_records([(phys_offset, store_ms, [key_hash])])

    def put_records(self, records: list[tuple[int, int, list[int]]], total: int = -1) -> None:
        """Adds an entry for each key hash of each (CommitLog offset, store ms, hashes);
        total, when the caller counted them, is how many hashes there are."""
        first = self.count + 1
        last = self.count + (total if total >= 0 else sum(len(r[2]) for r in records))
        if last > self.max_entries:
            raise IndexFileError(f"{self.path} is full ({self.max_entries} entries)")
        if last > self._reserved:
            self._reserve(first, last)
        if native.ENABLED:
            _, low_ms, high_ms = native.put_entries(
                self._mm, self._entries_at, HEADER_SIZE, self.slot_count, first, records
            )
            self._put_done(records, last, low_ms, high_ms)
        else:
            self._put_records_py(records, first, last)

    def _put_records_py(
        self, records: list[tuple[int, int, list[int]]], first: int, last: int
    ) -> None:
        """put_records in Python: the reference for native.put_entries."""
        slot_of, link = self._slots.get, self._slots.set
        nslots = self.slot_count
        linked: dict[int, int] = {}  # slot -> its newest entry in this batch
        fields: list[int] = []
        n = first
        for phys_offset, store_ms, hashes in records:
            for key_hash in hashes:
                slot = key_hash % nslots
                prev = linked.get(slot)
                if prev is None:
                    prev = slot_of(slot)
                linked[slot] = n
                fields += (key_hash, phys_offset, store_ms, prev, ENTRY_MARKER)
                n += 1
        # every entry first, then the slots: a crash in between leaves the slots as they were
        # (and a crash among the slot writes is undone on open, as any uncommitted entry)
        _entries(last - first + 1).pack_into(
            self._mm, self._entries_at + first * ENTRY_SIZE, *fields
        )
        for slot, n in linked.items():
            link(slot, n)
        times = [r[1] for r in records]
        self._put_done(records, last, min(times), max(times))

    def _put_done(
        self, records: list[tuple[int, int, list[int]]], last: int, low_ms: int, high_ms: int
    ) -> None:
        self.count = last
        if self.begin_phys < 0:
            self.begin_phys = records[0][0]
        self.end_phys = records[-1][0]
        if self.begin_ms == NO_TIME or low_ms < self.begin_ms:
            self.begin_ms = low_ms
        self.end_ms = max(self.end_ms, high_ms)
        self.dirty = True

    def _reserve(self, first: int, last: int) -> None:
        """Allocates the blocks of entries first..last and more ahead of writing them
        (OSError when the disk is full, instead of a SIGBUS through the mapping)."""
        upto = min(self.max_entries, max(last, first + RESERVE_ENTRIES - 1))
        start = self._entries_at + first * ENTRY_SIZE
        os.posix_fallocate(self._fd, start, (upto - first + 1) * ENTRY_SIZE)
        self._reserved = upto

    def commit(self, applied: int) -> None:
        """Makes the entries written so far, and `applied`, what the file says after a crash."""
        h = Header(
            self.header.seq + 1,
            self.count,
            self.begin_ms,
            self.end_ms,
            self.begin_phys,
            self.end_phys,
            applied,
        )
        if h[1:] == self.header[1:]:
            return
        raw = HEADER.pack(h.seq, h.entries, 0, *h[2:])
        at = HEADER_AT[h.seq % 2]
        self._mm[at : at + HEADER.size + CRC.size] = raw + CRC.pack(zlib.crc32(raw))
        self.header = h
        self.dirty = True

    def sync(self) -> None:
        if self.dirty:
            self._mm.flush()
            self.dirty = False

    # ---- reading ----

    def lookup(
        self,
        key_hash: int,
        begin_ms: int,
        end_ms: int,
        limit: int,
        out: list[Hit],
        *,
        min_phys: int = 0,
        slack_ms: int = 0,
    ) -> None:
        """Appends to `out`, newest first, the entries of key_hash stored within
        [begin_ms, end_ms], until `out` holds `limit` hits. The walk stops early once entries
        are older than begin_ms - slack_ms (store times are nearly monotonic)."""
        mm = self._mm
        unpack = ENTRY.unpack_from
        base = self._entries_at
        (n,) = SLOT.unpack_from(mm, HEADER_SIZE + (key_hash % self.slot_count) * 4)
        oldest = begin_ms - slack_ms
        while 0 < n <= self.count and len(out) < limit:
            h, phys, ms, prev, _ = unpack(mm, base + n * ENTRY_SIZE)
            if h == key_hash and begin_ms <= ms <= end_ms and phys >= min_phys:
                out.append(Hit(phys, ms))
            if ms < oldest or prev >= n:
                break
            n = prev

    def overlaps(self, begin_ms: int, end_ms: int) -> bool:
        return self.count > 0 and self.begin_ms <= end_ms and self.end_ms >= begin_ms

    def entries_region(self) -> bytes:
        """Slots and entries as bytes (tests compare a rebuilt file with the original)."""
        stop = self._entries_at + (self.count + 1) * ENTRY_SIZE
        return bytes(self._mm[HEADER_SIZE:stop])

    def close(self) -> None:
        self._slots.release()
        with contextlib.suppress(BufferError, ValueError):
            self._mm.close()
        with contextlib.suppress(OSError):
            os.close(self._fd)


@functools.lru_cache(maxsize=64)
def _entries(count: int) -> struct.Struct:
    """The layout of `count` consecutive entries: a batch is packed in one call."""
    return struct.Struct("<" + "QqqII" * count)


class _Slots:
    """The slot table as u32 items: get/set go through a typed view of the mapping on
    little-endian machines (the file's byte order), through struct elsewhere."""

    def __init__(self, mm: mmap.mmap, slot_count: int) -> None:
        self._view: memoryview | None = None
        self.get: Callable[[int], int]
        self.set: Callable[[int, int], None]
        if sys.byteorder == "little":
            raw = memoryview(mm)[HEADER_SIZE : HEADER_SIZE + slot_count * SLOT.size]
            self._view = raw.cast("I")
            raw.release()
            self.get, self.set = self._view.__getitem__, self._view.__setitem__
        else:
            self.get = lambda slot: int(SLOT.unpack_from(mm, HEADER_SIZE + slot * SLOT.size)[0])
            self.set = lambda slot, entry: SLOT.pack_into(mm, HEADER_SIZE + slot * SLOT.size, entry)

    def release(self) -> None:
        if self._view is not None:
            self.get = self.set = _released  # type: ignore[assignment]
            self._view.release()
            self._view = None


def _released(*_args: int) -> int:
    raise ValueError("the index file is closed")
