"""The store's replication requests: raw reads (a master's ha-replicator), raw appends (a
slave's) and log digests (both, to detect divergence). See replica.py."""

from __future__ import annotations

from typing import TYPE_CHECKING

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

if TYPE_CHECKING:
    from ferry.store.app import StoreApp

MAX_READ_BYTES = 64 * 1024 * 1024


class ReplicaHandlers:
    def __init__(self, app: StoreApp) -> None:
        self._app = app
        self._slave = app.config.broker_role == "SLAVE"
        service = app.service
        service.on(StoreReadRawRequest, self.read_raw)
        service.on(StoreAppendRawRequest, self.append_raw)
        service.on(StoreLogDigestRequest, self.digest)

    def read_raw(self, req: StoreReadRawRequest, _call: Call) -> HandlerResult:
        log_ = self._app.store.log
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
        app = self._app
        next_offset, records, grown = replica.append_raw(
            app.store, req.from_offset, call.payload[0]
        )
        app._publish(req.from_offset, next_offset)
        for topic, queue_id in grown:
            app._wake(topic, queue_id)
        return StoreAppendRawReply(next_offset=next_offset, records=records)

    def digest(self, req: StoreLogDigestRequest, _call: Call) -> StoreLogDigestReply:
        log_ = self._app.store.log
        return StoreLogDigestReply(
            from_offset=req.from_offset,
            to_offset=req.to_offset,
            crc=replica.digest(log_, req.from_offset, req.to_offset),
            min_offset=log_.min_offset,
            max_offset=log_.end,
        )
