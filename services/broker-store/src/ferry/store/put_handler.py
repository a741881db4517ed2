"""The store's puts: one batch of records appended under the write lease (controller mode),
its reply sent at once or, under SYNC_FLUSH, once the records are on disk (commit_service.py);
then the gets held on its queue are woken and the dispatch feed told."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ferry.protocol.codes import SendStatus
from ferry.protocol.errors import InvalidParameterError, ServiceNotAvailableError
from ferry.protocol.messages import GrantWriteLeaseRequest, OkReply, StorePutReply, StorePutRequest
from ferry.runtime import telemetry
from ferry.runtime.config import BrokerConfig
from ferry.runtime.lease import Lease
from ferry.runtime.service import Call, HandlerResult
from ferry.store.commit_service import CommitService
from ferry.store.store import MessageStore

TRACER = "ferry.store"


class PutHandler:
    """`wake(topic, queue_id)` answers the gets held on a queue that grew; `publish(start,
    stop, written)` tells the dispatch feed of appended log bytes."""

    def __init__(
        self,
        config: BrokerConfig,
        store: MessageStore,
        commit: CommitService,
        lease: Lease,
        wake: Callable[[str, int], None],
        publish: Callable[[int, int, bytearray | None], None],
    ) -> None:
        self.config = config
        self.store = store
        self._commit = commit
        self.lease = lease
        self._wake = wake
        self._publish = publish
        self._sync_flush = config.is_sync_flush
        self._slave = config.broker_role == "SLAVE"
        self.lease_refused = 0  # puts refused for want of a lease

    def put(self, req: StorePutRequest, call: Call) -> HandlerResult:
        if self._slave:  # its log is the master's, byte for byte (replica_handlers.py)
            raise ServiceNotAvailableError("a SLAVE's store takes only its master's log")
        if len(call.payload) != 1:
            raise InvalidParameterError(
                f"a put carries exactly one payload frame of records, not {len(call.payload)}"
            )
        if self.lease.lapsed():  # checked right before the append, whoever asks for it
            self.lease_refused += 1
            raise ServiceNotAvailableError(
                f"the store of {self.config.broker_name} holds no write lease (controller "
                "mode: not master, or not confirmed by the controller in time); nothing was "
                "stored",
                retriable=True,
            )
        frame = call.payload[0]
        buf = frame if isinstance(frame, bytes) else bytes(frame)
        # one span per batch, and only under a sampled parent: the hot path stays cheap
        attributes: dict[str, Any] = {
            "messaging.destination.name": req.topic,
            "messaging.batch.message_count": req.count,
        }
        span = telemetry.child_span(
            TRACER, "store append", call.traceparent, call.tracestate, **attributes
        )
        try:
            result = self.store.put(req.topic, req.queue_id, req.count, buf, req.store_host)
        except Exception as exc:
            telemetry.end_span(span, telemetry.error_type(exc))
            raise
        telemetry.end_span(span)
        reply = StorePutReply(
            status=SendStatus.SEND_OK,
            queue_offset=result.queue_offset,
            phys_offsets=result.phys_offsets,
            next_offset=result.next_offset,
        )
        if self._sync_flush:
            flush_span = None
            if span is not None:
                flush_span = telemetry.child_span(
                    TRACER, "store flush", call.traceparent, call.tracestate
                )
            self._commit.wait_for_flush(call, reply, result.next_offset, flush_span)
        else:
            # the reply first: the sender waits on it, while the feed only wakes followers
            # (index, scheduler) that would otherwise take the 2 cores ahead of it
            call.reply(reply)
        self._wake(req.topic, req.queue_id)
        self._publish(result.from_offset, result.next_offset, result.written)
        return None

    def grant(self, req: GrantWriteLeaseRequest, _call: Call) -> OkReply:
        self.lease.grant(req.until_monotonic, req.epoch)
        return OkReply()
