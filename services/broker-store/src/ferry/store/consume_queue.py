"""ConsumeQueues: per topic and queue, 20-byte entries (commitlog offset, size, tags code).

Logical offset n is entry n, at byte n * 20 of the queue; the queue's files hold
mappedFileSizeConsumeQueue bytes each and are named by the byte offset of their first entry
(consumequeue/<topic>/<queueId>/<20 digits>). The max offset of every queue is kept in memory;
the min offset is 0 until retention deletes old files.

Entries are written through the mapping, so their blocks are allocated (posix_fallocate)
RESERVE_AHEAD bytes at a time before anything is written: on a full disk that is an OSError
the put turns into a refusal, where a write into an unallocated page of the mapping would
kill the process with SIGBUS. Files stay sparse past what was reserved.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from ferry.runtime.offset_names import file_name, parse_file_name
from ferry.store.commit_log import CQ_ENTRY, CQ_ENTRY_SIZE
from ferry.store.mapped_file import MappedFile, PendingDir, make_dirs

log = logging.getLogger("ferry.store.consumequeue")

RESERVE_AHEAD = 4096  # bytes of a queue file allocated at a time (204 entries): 1.8 us each


class ConsumeQueue:
    """One queue's files and offsets."""

    def __init__(
        self,
        directory: Path,
        topic: str,
        queue_id: int,
        file_size: int,
        dirty: set[MappedFile | PendingDir],
    ) -> None:
        self.directory = directory
        self.topic = topic
        self.queue_id = queue_id
        self.file_size = file_size
        self.files: list[MappedFile] = []
        self.min_offset = 0
        self.max_offset = 0
        self.last_store_ms = 0
        self._reserved = 0  # queue byte position below which blocks are allocated
        self._dirty = dirty  # shared with the table: files to fdatasync on the next flush

    # ---- files ----

    def load(self) -> None:
        """Maps the queue's files and sets max_offset to the number of entries before the first
        empty one (size 0): entries are written in order, so nothing valid lies past it."""
        starts = sorted(
            s for s in (parse_file_name(p.name) for p in self.directory.iterdir()) if s is not None
        )
        kept: list[int] = []
        for s in starts:
            if s % self.file_size or (kept and s != kept[-1] + self.file_size):
                log.warning("%s: ignoring out-of-line ConsumeQueue file %s", self.name, s)
                continue
            kept.append(s)
        self.files = [MappedFile(self.directory / file_name(s), s, self.file_size) for s in kept]
        if not self.files:
            return
        self.min_offset = self.files[0].start // CQ_ENTRY_SIZE
        # Files before the last are full (a file is only started when the previous one is).
        # In the last one, entries are written in order, so the queue ends at its first empty
        # entry (size 0): a hole left by a crash ends the queue there.
        while len(self.files) > 1 and self._empty(self.files[-1]):
            # a file reserve() created for a put that was then refused (or a crash right
            # after a roll): no entry in it, and the queue's end lies in the one before
            stray = self.files.pop()
            stray.close()
            stray.path.unlink(missing_ok=True)
        last = self.files[-1]
        used = last.data_length()
        good = 0
        for _, size, _ in CQ_ENTRY.iter_unpack(last.view[: used - used % CQ_ENTRY_SIZE]):
            if size <= 0:
                break
            good += 1
        count = last.start // CQ_ENTRY_SIZE + good
        self.max_offset = count
        self.truncate(count)
        if self.files:
            self.files[-1].advise_random()  # the file appends go to

    @staticmethod
    def _empty(f: MappedFile) -> bool:
        size: int = CQ_ENTRY.unpack_from(f.view, 0)[1]
        return size <= 0

    @property
    def name(self) -> str:
        return f"{self.topic}/{self.queue_id}"

    def _file_for_write(self, byte_pos: int) -> MappedFile:
        if self.files and byte_pos < self.files[-1].end:
            # the last file, or the one before when reserve() created the next file early
            found = self._file_at(byte_pos)
            return found if found is not None else self.files[-1]
        start = byte_pos - byte_pos % self.file_size
        if not self.directory.exists():
            make_dirs(self.directory, self._dirty)
        f = MappedFile(self.directory / file_name(start), start, self.file_size, create=True)
        f.advise_random()
        self._dirty.add(PendingDir(self.directory))  # its new file's entry, by the next flush
        self.files.append(f)
        return f

    def _file_at(self, byte_pos: int) -> MappedFile | None:
        if not self.files:
            return None
        i = (byte_pos - self.files[0].start) // self.file_size
        return self.files[i] if 0 <= i < len(self.files) else None

    # ---- entries ----

    def reserve(self, count: int) -> None:
        """Makes sure the next `count` entries have files and allocated blocks (OSError, with
        ENOSPC when the disk is full, and nothing written); append() then cannot fault."""
        pos = max(self._reserved, self.max_offset * CQ_ENTRY_SIZE)
        stop = (self.max_offset + count) * CQ_ENTRY_SIZE
        while pos < stop:
            f = self._file_for_write(pos)
            at = pos - f.start
            need = min(f.size, stop - f.start)
            upto = min(f.size, max(need, at + RESERVE_AHEAD))
            try:
                os.posix_fallocate(f.fd, at, upto - at)
            except OSError as exc:
                if exc.errno != errno.ENOSPC or upto == need:
                    raise
                # no room ahead: what the entries need may still fit (in a page that is
                # allocated already, e.g. when recovery re-dispatches on a full disk)
                os.posix_fallocate(f.fd, at, need - at)
                upto = need
            pos = self._reserved = f.start + upto

    def append(self, entries: bytes | bytearray | memoryview, store_ms: int) -> None:
        """Appends whole entries at max_offset (allocating their blocks first)."""
        src = memoryview(entries)
        if (self.max_offset * CQ_ENTRY_SIZE) + len(src) > self._reserved:
            self.reserve(len(src) // CQ_ENTRY_SIZE)
        done = 0
        while done < len(src):
            pos = self.max_offset * CQ_ENTRY_SIZE
            f = self._file_for_write(pos)
            at = pos - f.start
            n = min(len(src) - done, f.size - at)
            f.mm[at : at + n] = src[done : done + n]
            self._dirty.add(f)
            done += n
            self.max_offset += n // CQ_ENTRY_SIZE
        self.last_store_ms = store_ms

    def read(self, offset: int, limit: int) -> memoryview:
        """Entries from offset on, as raw bytes: at most limit entries, up to max_offset, and
        within one file (the caller asks again past a file's end)."""
        pos = offset * CQ_ENTRY_SIZE
        f = self._file_at(pos)
        if f is None or offset >= self.max_offset:
            return memoryview(b"")
        at = pos - f.start
        stop = min(at + limit * CQ_ENTRY_SIZE, f.size, self.max_offset * CQ_ENTRY_SIZE - f.start)
        return f.view[at:stop]

    def chunks(self, offset: int, limit: int) -> Iterator[memoryview]:
        """The raw entries offset.. (limit at most), a view per file they lie in."""
        while limit > 0 and offset < self.max_offset:
            raw = self.read(offset, limit)
            if not raw:
                return
            yield raw
            got = len(raw) // CQ_ENTRY_SIZE
            offset += got
            limit -= got

    def entries(self, offset: int, limit: int) -> Iterator[tuple[int, int, int]]:
        """(commitlog offset, size, tags code) of entries offset.. (limit at most)."""
        for raw in self.chunks(offset, limit):
            yield from CQ_ENTRY.iter_unpack(raw)

    def last_entry(self) -> tuple[int, int, int] | None:
        if self.max_offset <= self.min_offset:
            return None
        return next(self.entries(self.max_offset - 1, 1), None)

    def entry_at(self, offset: int) -> tuple[int, int, int] | None:
        return next(self.entries(offset, 1), None)

    def first_past(self, lo: int, hi: int, log_offset: int) -> int:
        """The first entry of [lo, hi) whose record does not end by log_offset (hi if none):
        entries are in log order, so a binary search."""
        while lo < hi:
            mid = (lo + hi) // 2
            entry = self.entry_at(mid)
            if entry is not None and entry[0] + entry[1] <= log_offset:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def drop_below(self, log_min: int) -> int:
        """Retention: moves min_offset past the entries pointing below the CommitLog's min
        offset and deletes the files wholly before it, never the last (it tells the max
        offset at the next start). Returns how many entries were dropped."""
        lo, hi = self.min_offset, self.max_offset
        while lo < hi:  # entries are in log order: find the first one still in the log
            mid = (lo + hi) // 2
            entry = self.entry_at(mid)
            if entry is not None and entry[0] < log_min:
                lo = mid + 1
            else:
                hi = mid
        dropped = lo - self.min_offset
        self.min_offset = lo
        pos = lo * CQ_ENTRY_SIZE
        while len(self.files) > 1 and self.files[0].end <= pos:
            f = self.files.pop(0)
            f.close()
            with contextlib.suppress(FileNotFoundError):
                f.path.unlink()
            self._dirty.discard(f)
        return dropped

    def truncate(self, count: int) -> None:
        """Drops entries from `count` on: zeroes them and deletes files wholly past them."""
        pos = count * CQ_ENTRY_SIZE
        keep: list[MappedFile] = []
        for f in self.files:
            if f.end <= pos:
                keep.append(f)
            elif f.start < pos:
                f.zero_from(pos - f.start)
                keep.append(f)
            else:
                f.close()
                with contextlib.suppress(FileNotFoundError):
                    f.path.unlink()
                self._dirty.discard(f)
        self.files = keep
        self.max_offset = min(self.max_offset, count)
        self._reserved = min(self._reserved, pos)  # the zeroed tail is a hole again

    def close(self) -> None:
        for f in self.files:
            f.close()
        self.files = []


class ConsumeQueueTable:
    """Every ConsumeQueue of the store, by (topic, queue id)."""

    def __init__(self, root: Path, file_size: int) -> None:
        self.root = root
        self.file_size = file_size
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        self.dirty: set[MappedFile | PendingDir] = set()

    def load(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        for topic_dir in sorted(self.root.iterdir()):
            if not topic_dir.is_dir():
                continue
            for queue_dir in sorted(topic_dir.iterdir()):
                if not queue_dir.is_dir() or not queue_dir.name.isdigit():
                    continue
                cq = self._new(topic_dir.name, int(queue_dir.name))
                cq.load()

    def _new(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = ConsumeQueue(
            self.root / topic / str(queue_id), topic, queue_id, self.file_size, self.dirty
        )
        self.queues[(topic, queue_id)] = cq
        return cq

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.queues.get((topic, queue_id))

    def get_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self.queues.get((topic, queue_id))
        return cq if cq is not None else self._new(topic, queue_id)

    def drop_below(self, log_min: int) -> int:
        """Drops every queue's entries pointing below the CommitLog's min offset."""
        dropped = 0
        for cq in self.queues.values():
            dropped += cq.drop_below(log_min)
        if dropped:
            log.info("retention: %d ConsumeQueue entries below offset %d dropped", dropped, log_min)
        return dropped

    def remove(self, topic: str, queue_id: int) -> int:
        """Deletes a queue's files and directory (and the topic's directory once empty);
        returns how many files went. The caller makes sure no flush holds its files."""
        cq = self.queues.pop((topic, queue_id), None)
        if cq is None:
            return 0
        files = list(cq.files)
        cq.close()
        for f in files:
            self.dirty.discard(f)
            with contextlib.suppress(FileNotFoundError):
                f.path.unlink()
        for directory in (cq.directory, cq.directory.parent):
            with contextlib.suppress(OSError):  # not empty (or gone): keep it
                directory.rmdir()
        return len(files)

    def topic_count(self) -> int:
        return len({topic for topic, _ in self.queues})

    def take_dirty(self) -> list[MappedFile | PendingDir]:
        files = list(self.dirty)
        self.dirty.clear()
        return files

    def close(self) -> None:
        for cq in self.queues.values():
            cq.close()
        self.queues.clear()
        self.dirty.clear()
