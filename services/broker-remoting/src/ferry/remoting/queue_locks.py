"""Queue locks of orderly consumers (RocketMQ's RebalanceLockManager), and their requests.

An orderly consumer consumes a queue only while it holds the queue's lock here, so that two
members never consume one queue at once, even while they disagree about the assignment during
a rebalance. A lock belongs to one client of one group and lapses `expire_ms` (30 s) after its
last renewal; clients renew every 20 s and unlock what they give up. Locks are memory only: a
restarted broker starts with none, and clients take them again at their next renewal.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ferry.protocol.errors import InvalidParameterError
from ferry.protocol.messages import (
    LockBatchReply,
    LockBatchRequest,
    OffsetEntry,
    OkReply,
    UnlockBatchRequest,
)
from ferry.protocol.names import check_group, check_topic
from ferry.remoting.calls import Caller
from ferry.remoting.stats import now_ms

LOCK_EXPIRE_MS = 30_000
MAX_CLIENT_ID_LENGTH = 255
MAX_QUEUES_PER_REQUEST = 4096

QueueKey = tuple[str, str, int]  # group, topic, queue id


@dataclass
class _Lock:
    client_id: str
    renewed_ms: int


class QueueLockTable:
    """Plain state: (group, topic, queue id) -> holder; `now_ms` comes from the caller."""

    def __init__(self, expire_ms: int = LOCK_EXPIRE_MS) -> None:
        self.expire_ms = expire_ms
        self._locks: dict[QueueKey, _Lock] = {}

    def __len__(self) -> int:
        return len(self._locks)

    def try_lock(
        self, group: str, client_id: str, queues: Iterable[tuple[str, int]], now_ms: int
    ) -> list[tuple[str, int]]:
        """Locks or renews each queue that is free, lapsed or already this client's; returns
        the queues the client holds now."""
        held: list[tuple[str, int]] = []
        for topic, queue_id in queues:
            key = (group, topic, queue_id)
            lock = self._locks.get(key)
            if lock is None or lock.client_id == client_id or self._lapsed(lock, now_ms):
                self._locks[key] = _Lock(client_id, now_ms)
                held.append((topic, queue_id))
        return held

    def unlock(self, group: str, client_id: str, queues: Iterable[tuple[str, int]]) -> None:
        """Releases what the client holds; locks of other clients stay."""
        for topic, queue_id in queues:
            key = (group, topic, queue_id)
            lock = self._locks.get(key)
            if lock is not None and lock.client_id == client_id:
                del self._locks[key]

    def release_client(self, client_id: str, groups: Iterable[str] | None = None) -> int:
        """Drops a departed client's locks (of `groups`, or all); returns how many."""
        wanted = None if groups is None else set(groups)
        gone = [
            key
            for key, lock in self._locks.items()
            if lock.client_id == client_id and (wanted is None or key[0] in wanted)
        ]
        for key in gone:
            del self._locks[key]
        return len(gone)

    def holder(self, group: str, topic: str, queue_id: int, now_ms: int) -> str | None:
        lock = self._locks.get((group, topic, queue_id))
        if lock is None or self._lapsed(lock, now_ms):
            return None
        return lock.client_id

    def _lapsed(self, lock: _Lock, now_ms: int) -> bool:
        return now_ms - lock.renewed_ms > self.expire_ms


def _queues(group: str, client_id: str, entries: list[OffsetEntry]) -> list[tuple[str, int]]:
    check_group(group)
    if not client_id or len(client_id) > MAX_CLIENT_ID_LENGTH:
        raise InvalidParameterError(f"client id must be 1..{MAX_CLIENT_ID_LENGTH} characters")
    if len(entries) > MAX_QUEUES_PER_REQUEST:
        raise InvalidParameterError(f"at most {MAX_QUEUES_PER_REQUEST} queues per request")
    out: list[tuple[str, int]] = []
    for entry in entries:
        check_topic(entry.topic)
        if entry.queue_id < 0:
            raise InvalidParameterError(f"queue id {entry.queue_id} is negative")
        out.append((entry.topic, entry.queue_id))
    return out


class QueueLockProcessor:
    """LOCK_BATCH_MQ and UNLOCK_BATCH_MQ."""

    def __init__(self, table: QueueLockTable) -> None:
        self._table = table

    def lock(self, req: LockBatchRequest, _call: Caller) -> LockBatchReply:
        queues = _queues(req.consumer_group, req.client_id, req.queues)
        held = self._table.try_lock(req.consumer_group, req.client_id, queues, now_ms())
        return LockBatchReply(locked=[OffsetEntry(topic, qid, 0) for topic, qid in held])

    def unlock(self, req: UnlockBatchRequest, _call: Caller) -> OkReply:
        queues = _queues(req.consumer_group, req.client_id, req.queues)
        self._table.unlock(req.consumer_group, req.client_id, queues)
        return OkReply()
