"""Orderly pop (PopMessageRequest.order, RocketMQ 5's FIFO consumer groups): while messages a
group popped from a queue are in flight, the group gets nothing more from that queue, so a
queue's messages are consumed one batch after the other, in order.

An orderly pop stores no checkpoint and makes no retry copy: the group's offset on the queue
moves only as its messages are acked (past the acked ones at the head of the batch), and a
batch whose invisible time passed un-acked is popped again from that offset, each message
with one more delivery (its reconsume times, given in the reply). The FIFO client retries a
failed message itself and forwards it to the DLQ after its attempts.

The leases are this table's, in remoting's memory: a remoting restart forgets them and the
group's messages are popped again from its committed offset (at least once). No I/O.

A receipt handle of an orderly pop reads "o.<queue>.<offset>.<stamp>": the stamp is the
time of the pop or of the last change of invisible time, so a changed handle replaces the
one it came from, as with the revive service's handles."""

from __future__ import annotations

from dataclasses import dataclass, field

from ferry.protocol.errors import InvalidReceiptHandleError

PREFIX = "o."
MAX_LEASES = 100_000

Key = tuple[str, str, int]  # group, topic, queue


@dataclass
class Lease:
    offsets: list[int]  # popped, in queue order
    next_offset: int  # the queue offset after the batch (past what the filter skipped)
    until: dict[int, int]  # offset: when its invisible time ends (ms)
    stamps: dict[int, int]  # offset: the stamp its valid handle carries
    acked: set[int] = field(default_factory=set)

    def open(self) -> list[int]:
        return [o for o in self.offsets if o not in self.acked]


def is_orderly(handle: str) -> bool:
    return handle.startswith(PREFIX)


def handle_of(queue_id: int, offset: int, stamp: int) -> str:
    return f"{PREFIX}{queue_id}.{offset}.{stamp}"


def parse(handle: str) -> tuple[int, int, int]:
    parts = handle[len(PREFIX) :].split(".") if is_orderly(handle) else []
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise InvalidReceiptHandleError(f"receipt handle {handle[:64]!r} is malformed")
    queue_id, offset, stamp = (int(p) for p in parts)
    return queue_id, offset, stamp


class OrderlyLeases:
    def __init__(self) -> None:
        self._leases: dict[Key, Lease] = {}
        self._deliveries: dict[Key, dict[int, int]] = {}  # offsets delivered, not yet acked

    def __len__(self) -> int:
        return len(self._leases)

    def blocked(self, key: Key, now_ms: int) -> bool:
        """Whether a message of the group popped from the queue is still in flight."""
        lease = self._leases.get(key)
        if lease is None:
            return False
        if any(lease.until[o] > now_ms for o in lease.open()):
            return True
        del self._leases[key]  # all settled or past their time: popped again from the offset
        return False

    def lease(
        self, key: Key, offsets: list[int], next_offset: int, now_ms: int, invisible_ms: int
    ) -> tuple[list[str], list[int]]:
        """The batch popped: its handles and each message's deliveries before this one."""
        if key not in self._leases and len(self._leases) >= MAX_LEASES:
            raise InvalidReceiptHandleError(f"{MAX_LEASES} orderly queues in flight already")
        counts = self._deliveries.setdefault(key, {})
        before = [counts.get(o, 0) for o in offsets]
        for o in offsets:
            counts[o] = counts.get(o, 0) + 1
        self._leases[key] = Lease(
            offsets=list(offsets),
            next_offset=next_offset,
            until=dict.fromkeys(offsets, now_ms + invisible_ms),
            stamps=dict.fromkeys(offsets, now_ms),
        )
        return [handle_of(key[2], o, now_ms) for o in offsets], before

    def _check(self, handle: str, group: str, topic: str, now_ms: int) -> tuple[Key, Lease, int]:
        queue_id, offset, stamp = parse(handle)
        key = (group, topic, queue_id)
        lease = self._leases.get(key)
        if lease is None or offset not in lease.stamps or lease.stamps[offset] != stamp:
            raise InvalidReceiptHandleError(f"receipt handle {handle} is not in flight")
        if offset in lease.acked:
            raise InvalidReceiptHandleError(f"receipt handle {handle} was acked")
        if lease.until[offset] <= now_ms:
            raise InvalidReceiptHandleError(
                f"receipt handle {handle} is past its invisible time; the message is popped again"
            )
        return key, lease, offset

    def ack(self, handle: str, group: str, topic: str, now_ms: int) -> tuple[Key, int | None]:
        """The queue and the offset the group may commit now (None: not moved)."""
        key, lease, offset = self._check(handle, group, topic, now_ms)
        lease.acked.add(offset)
        open_ = lease.open()
        counts = self._deliveries.get(key, {})
        if not open_:
            del self._leases[key]
            for o in lease.offsets:
                counts.pop(o, None)
            return key, lease.next_offset
        head = open_[0]
        if head == lease.offsets[0]:
            return key, None  # the head of the batch is still in flight
        for o in lease.offsets:
            if o < head:
                counts.pop(o, None)
        return key, head

    def change(self, handle: str, group: str, topic: str, now_ms: int, invisible_ms: int) -> str:
        """The message stays invisible for invisible_ms from now; its new handle."""
        key, lease, offset = self._check(handle, group, topic, now_ms)
        stamp = max(now_ms, lease.stamps[offset] + 1)
        lease.stamps[offset] = stamp
        lease.until[offset] = now_ms + invisible_ms
        return handle_of(key[2], offset, stamp)
