"""Orderly pop (RocketMQ 5's FIFO consumer groups): a queue's messages reach the group one
batch at a time, in queue order.

An orderly pop of a queue takes a lease on it for the group: the batch it hands out, and the
time until which no other pop of that group reads the queue. Nothing is written for it (no
checkpoint, no revive): the group's offset stays before the batch, and each ack moves it past
the longest run of acked messages at the batch's head. When the lease runs out with messages
not acked, the next pop reads them again from that offset, each counted as one more attempt
(RECONSUME_TIMES in the record handed out, so delivery_attempt grows). A FIFO consumer that
gives up on a message sends it to the DLQ itself (ForwardMessageToDeadLetterQueue) and acks it.

Leases and attempt counts live in memory only: after a restart of remoting the messages
after the group's committed offset come again, in order, counted from the first attempt.
Receipt handles are "O1 <queue topic> <queue id> <queue offset> <lease id>"; a handle of an
earlier lease (the message came again since) no longer acks.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass, field

from ferry.protocol import record, record_layout
from ferry.protocol.errors import InvalidReceiptHandleError
from ferry.remoting.consumer_offsets import ConsumerOffsetTable

PREFIX = "O1 "
_RECONSUME = struct.Struct(">i")
_CRC = struct.Struct(">I")
Key = tuple[str, str, int]  # (group, queue topic, queue id)


@dataclass
class Lease:
    lease_id: int
    offsets: list[int]  # the batch's queue offsets, in order
    next_begin: int  # where the queue's next read starts once the whole batch is acked
    until: float  # monotonic
    acked: set[int] = field(default_factory=set)


def is_order_handle(handle: str) -> bool:
    return handle.startswith(PREFIX)


def parse(handle: str) -> tuple[str, int, int, int]:
    """(queue topic, queue id, queue offset, lease id); InvalidReceiptHandleError otherwise."""
    parts = handle[len(PREFIX) :].split(" ")
    if len(parts) != 4 or not all(p.isdigit() for p in parts[1:]):
        raise InvalidReceiptHandleError(f"receipt handle {handle[:64]!r} is malformed")
    return parts[0], int(parts[1]), int(parts[2]), int(parts[3])


class OrderLeases:
    """The leases of every (group, queue) popped in order on this broker."""

    def __init__(self, offsets: ConsumerOffsetTable) -> None:
        self._offsets = offsets
        self._leases: dict[Key, Lease] = {}
        self._attempts: dict[Key, dict[int, int]] = {}  # offset -> deliveries before this
        self._ids = int(time.time() * 1000)

    def held(self, key: Key) -> bool:
        """Whether a lease keeps the queue from the group's pops now."""
        lease = self._leases.get(key)
        if lease is None:
            return False
        if time.monotonic() < lease.until:
            return True
        del self._leases[key]  # ran out: its messages not acked are read again
        return False

    def lease(
        self, key: Key, frame: bytes, next_begin: int, invisible_ms: int
    ) -> tuple[list[str], bytes]:
        """Takes the lease for the records of `frame` (those of the queue); their handles,
        and the frame with each record's RECONSUME_TIMES set to its earlier deliveries."""
        _, qtopic, qid = key
        self._ids += 1
        spans = [
            (r.queue_offset, pos, head[0])
            for (pos, head, _), r in zip(
                record.walk(frame), record.iter_records(frame), strict=True
            )
            if r.topic == qtopic
        ]
        if not spans:
            return [], frame
        seen = self._attempts.setdefault(key, {})
        out = bytearray(frame)
        for offset, pos, size in spans:
            before = seen.get(offset, -1) + 1
            seen[offset] = before
            if before:
                _RECONSUME.pack_into(out, pos + record_layout.OFF_RECONSUME_TIMES, before)
                _CRC.pack_into(out, pos + record_layout.OFF_CRC, record.record_crc(out, pos, size))
        offsets = [offset for offset, _, _ in spans]
        until = time.monotonic() + invisible_ms / 1000
        self._leases[key] = Lease(self._ids, offsets, next_begin, until)
        handles = [f"{PREFIX}{qtopic} {qid} {offset} {self._ids}" for offset in offsets]
        return handles, bytes(out)

    def ack(self, group: str, handle: str) -> Key | None:
        """Acks one message; the key whose lease it ended (all acked), else None."""
        key, lease, offset = self._find(group, handle)
        lease.acked.add(offset)
        done = 0
        while done < len(lease.offsets) and lease.offsets[done] in lease.acked:
            done += 1
        if done == len(lease.offsets):
            self._offsets.commit(*key, lease.next_begin)
            del self._leases[key]
            self._forget(key, lease.next_begin)
            return key
        self._offsets.commit(*key, lease.offsets[done])
        self._forget(key, lease.offsets[done])
        return None

    def change(self, group: str, handle: str, invisible_ms: int) -> str:
        """The lease holds the queue for invisible_ms from now; the handle stays good."""
        _key, lease, _offset = self._find(group, handle)
        lease.until = time.monotonic() + invisible_ms / 1000
        return handle

    def _find(self, group: str, handle: str) -> tuple[Key, Lease, int]:
        qtopic, qid, offset, lease_id = parse(handle)
        key = (group, qtopic, qid)
        lease = self._leases.get(key)
        if lease is None or lease.lease_id != lease_id or time.monotonic() >= lease.until:
            raise InvalidReceiptHandleError(
                f"receipt handle {handle[:64]!r} is not in flight (acked, or its invisible "
                "time passed and the message comes again)"
            )
        if offset not in lease.offsets or offset in lease.acked:
            raise InvalidReceiptHandleError(f"receipt handle {handle[:64]!r} is acked already")
        return key, lease, offset

    def _forget(self, key: Key, below: int) -> None:
        seen = self._attempts.get(key)
        if seen is None:
            return
        for offset in [o for o in seen if o < below]:
            del seen[offset]
        if not seen:
            del self._attempts[key]
