"""The master's recent log bytes from the store's dispatch feed: a slave asking from a chunk
boundary is answered from them, without a store read."""

from __future__ import annotations

import collections

CACHE_BYTES = 16 * 1024 * 1024  # recent feed payloads kept to answer slaves without a read


class FeedCache:
    """Contiguous recent log bytes from the dispatch feed, as (from, next, bytes) chunks."""

    def __init__(self, limit: int = CACHE_BYTES) -> None:
        self.chunks: collections.deque[tuple[int, int, bytes]] = collections.deque()
        self.size = 0
        self.limit = limit

    @property
    def end(self) -> int:
        return self.chunks[-1][1] if self.chunks else -1

    def clear(self) -> None:
        self.chunks.clear()
        self.size = 0

    def add(self, start: int, stop: int, data: bytes) -> None:
        if len(data) != stop - start:
            return
        if self.chunks and start != self.end:
            self.clear()  # a gap (lost notices): start over from here
        self.chunks.append((start, stop, data))
        self.size += len(data)
        while self.size > self.limit and len(self.chunks) > 1:
            self.size -= len(self.chunks.popleft()[2])

    def take(self, start: int, max_bytes: int) -> tuple[int, bytes] | None:
        """(next offset, bytes) of whole chunks from start, when a chunk starts there."""
        if not self.chunks or not self.chunks[0][0] <= start < self.end:
            return None
        parts: list[bytes] = []
        total = 0
        nxt = start
        for lo, hi, data in self.chunks:
            if hi <= start:
                continue
            if lo != nxt:
                return None  # start falls inside a chunk: read the store
            if parts and total + len(data) > max_bytes:
                break
            parts.append(data)
            total += len(data)
            nxt = hi
        if not parts:
            return None
        return nxt, parts[0] if len(parts) == 1 else b"".join(parts)
