"""SYNC_FLUSH group commit: puts that wait until the CommitLog is durable past their end.

Puts arrive in log order, so their end offsets and their deadlines both grow along the queue:
a flush that made the log durable up to some offset releases a prefix of the queue, and the
puts whose syncFlushTimeout ran out are a prefix too. A put is acknowledged SEND_OK only when
the flush covering it finished within its timeout; otherwise FLUSH_DISK_TIMEOUT (its records
are stored either way). Plain object: times are passed in, so it is tested without a disk.
"""

from __future__ import annotations

from collections import deque
from typing import Generic, NamedTuple, TypeVar

T = TypeVar("T")


class Waiting(NamedTuple, Generic[T]):
    end_offset: int  # the log must be durable up to here
    deadline: float  # time.monotonic() seconds
    item: T


class Released(NamedTuple, Generic[T]):
    on_time: list[T]  # flushed within their timeout: SEND_OK
    late: list[T]  # FLUSH_DISK_TIMEOUT


class GroupCommitQueue(Generic[T]):
    def __init__(self) -> None:
        self._waiting: deque[Waiting[T]] = deque()

    def __len__(self) -> int:
        return len(self._waiting)

    @property
    def highest_end(self) -> int:
        return self._waiting[-1].end_offset if self._waiting else 0

    def add(self, end_offset: int, deadline: float, item: T) -> None:
        self._waiting.append(Waiting(end_offset, deadline, item))

    def release(self, flushed: int, flushed_at: float) -> Released[T]:
        """Takes out the puts a flush up to `flushed`, finished at `flushed_at`, covers."""
        on_time: list[T] = []
        late: list[T] = []
        waiting = self._waiting
        while waiting and waiting[0].end_offset <= flushed:
            w = waiting.popleft()
            (on_time if flushed_at <= w.deadline else late).append(w.item)
        return Released(on_time, late)

    def expired(self, now: float) -> list[T]:
        """Takes out the puts whose timeout ran out before a flush covered them."""
        out: list[T] = []
        waiting = self._waiting
        while waiting and waiting[0].deadline < now:
            out.append(waiting.popleft().item)
        return out

    def take_all(self) -> list[Waiting[T]]:
        out = list(self._waiting)
        self._waiting.clear()
        return out
