"""One fixed-size file mapped in memory: a CommitLog segment or a ConsumeQueue file.

Files are named by the 20-digit offset of their first byte (RocketMQ's offset2FileName), are
created at their full size and stay mapped (MAP_SHARED) while the store is open: reads are
slices of the mapping, writes are a memory copy or a pwrite (same page cache), and a flush is
an fdatasync of the file.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from pathlib import Path

from ferry.protocol.errors import BrokerSystemError
from ferry.runtime.files import fsync_dir

PAGE = mmap.PAGESIZE


class MappedFile:
    """A file of `size` bytes starting at global offset `start`, mapped read-write."""

    __slots__ = ("fd", "mm", "path", "size", "start", "view")

    def __init__(self, path: Path, start: int, size: int, *, create: bool = False) -> None:
        self.path = path
        self.start = start
        self.size = size
        # create: a new file in the store's view; anything left under that name is stale
        flags = os.O_RDWR | (os.O_CREAT | os.O_TRUNC if create else 0)
        self.fd = os.open(path, flags, 0o644)
        try:
            actual = os.fstat(self.fd).st_size
            if actual > size:
                raise BrokerSystemError(
                    f"{path} holds {actual} bytes but files of this kind are {size} bytes: "
                    "was the file size setting changed? Restore it to open this store"
                )
            if actual < size:
                os.ftruncate(self.fd, size)  # sparse: blocks are allocated on first write
            self.mm = mmap.mmap(self.fd, size)
        except BaseException:
            os.close(self.fd)
            raise
        self.view = memoryview(self.mm)

    @property
    def end(self) -> int:
        return self.start + self.size

    def data_length(self) -> int:
        """Where the file's first hole starts: nothing was ever written past it (the whole
        size on file systems that cannot tell)."""
        try:
            return min(os.lseek(self.fd, 0, os.SEEK_HOLE), self.size)
        except OSError:
            return self.size

    def advise_random(self) -> None:
        """No read-around on page faults: a write fault in a sparse file's hole otherwise
        reads a window around it, which here cost ~2 ms per fault once thousands of
        ConsumeQueue files were being written (5 us without)."""
        self.mm.madvise(mmap.MADV_RANDOM)

    def modified_ms(self) -> int:
        """When the file was last written (retention's age of a segment)."""
        return os.fstat(self.fd).st_mtime_ns // 1_000_000

    def sync(self) -> None:
        """Makes written bytes durable; fdatasync covers pages dirtied through the mapping."""
        os.fdatasync(self.fd)

    def close(self) -> None:
        # A zero-copy reply still queued in ZeroMQ may hold a view of the mapping; then the
        # mapping goes away when that view is released, not now.
        with contextlib.suppress(BufferError):
            self.view.release()
        with contextlib.suppress(BufferError):
            self.mm.close()
        with contextlib.suppress(OSError):
            os.close(self.fd)

    def zero_from(self, pos: int) -> None:
        """Zeroes [pos, size): punches the tail out with two truncates instead of writing."""
        os.ftruncate(self.fd, pos)
        os.ftruncate(self.fd, self.size)


class PendingDir:
    """A directory with new entries that the next full flush makes durable, on the flush
    thread, so that a put to a new ConsumeQueue never waits on the loop for up to three
    directory fsyncs (journal commits). Safe because the checkpoint that lets recovery skip
    re-dispatching is written only after every file and directory of its flush is synced."""

    __slots__ = ("path",)

    def __init__(self, path: Path) -> None:
        self.path = path

    def __hash__(self) -> int:
        return hash(self.path)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PendingDir) and other.path == self.path

    def sync(self) -> None:
        with contextlib.suppress(FileNotFoundError):  # removed since (a deleted topic)
            fsync_dir(self.path)


def make_dirs(path: Path, pending: set[MappedFile | PendingDir] | None = None) -> None:
    """mkdir -p, with every new directory entry made durable now, or by the next flush when
    `pending` collects them."""
    missing: list[Path] = []
    at = path
    while not at.exists():
        missing.append(at)
        at = at.parent
    for d in reversed(missing):
        d.mkdir(exist_ok=True)
        if pending is None:
            fsync_dir(d.parent)
        else:
            pending.add(PendingDir(d.parent))
