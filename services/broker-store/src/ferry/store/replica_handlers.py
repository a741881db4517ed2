"""The store's replication requests: raw reads (a master's ha-replicator), raw appends (a
slave's) and log digests (both, to detect divergence). See replica.py."""

from __future__ import annotations

from collections.abc import Callable

from ferry.protocol.errors import InvalidParameterError
from ferry.protocol.messages import (
    StoreAppendRawReply,
    StoreAppendRawRequest,
    StoreLogDigestReply,
    StoreLogDigestRequest,
    StoreReadRawReply,
    StoreReadRawRequest,
)
from ferry.runtime.service import Call, HandlerResult
from ferry.store import replica
from ferry.store.store import MessageStore

MAX_READ_BYTES = 64 * 1024 * 1024


class ReplicaHandlers:
    """`publish(start, stop)` tells the dispatch feed of appended log bytes; `wake(topic,
    queue_id)` answers the gets held on a queue that grew."""

    def __init__(
        self,
        store: MessageStore,
        slave: bool,
        publish: Callable[[int, int], None],
        wake: Callable[[str, int], None],
    ) -> None:
        self._store = store
        self._slave = slave
        self._publish = publish
        self._wake = wake

    def read_raw(self, req: StoreReadRawRequest, _call: Call) -> HandlerResult:
        log_ = self._store.log
        got = replica.read_raw(log_, req.from_offset, min(max(req.max_bytes, 1), MAX_READ_BYTES))
        reply = StoreReadRawReply(
            from_offset=got.from_offset,
            next_offset=got.next_offset,
            min_offset=log_.min_offset,
            max_offset=log_.end,
        )
        return reply, [got.data]

    def append_raw(self, req: StoreAppendRawRequest, call: Call) -> HandlerResult:
        if not self._slave:
            # a master's log is written by its own puts only
            raise InvalidParameterError("raw appends are for a SLAVE's store (brokerRole)")
        if len(call.payload) != 1:
            raise InvalidParameterError("a raw append carries exactly one payload frame")
        next_offset, records, grown = replica.append_raw(
            self._store, req.from_offset, call.payload[0]
        )
        self._publish(req.from_offset, next_offset)
        self._store.confirm_grown()  # the master's confirm may have come before these bytes
        for topic, queue_id in grown:
            self._wake(topic, queue_id)
        return StoreAppendRawReply(next_offset=next_offset, records=records)

    def digest(self, req: StoreLogDigestRequest, _call: Call) -> StoreLogDigestReply:
        log_ = self._store.log
        return StoreLogDigestReply(
            from_offset=req.from_offset,
            to_offset=req.to_offset,
            crc=replica.digest(log_, req.from_offset, req.to_offset),
            min_offset=log_.min_offset,
            max_offset=log_.end,
        )
