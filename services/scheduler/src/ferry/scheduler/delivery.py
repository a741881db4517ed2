"""Deliverer: puts due messages back on their real topic, at most once per origin record.

A due record (in SCHEDULE_TOPIC_XXXX or the timer topic) is copied to REAL_TOPIC / REAL_QID
without its DELAY property and with SCHEDULED_FROM = the CommitLog offset of the record it
came from. After a kill -9, the start-up scan (recovery.py) collects the SCHEDULED_FROM of the
copies stored since the last progress snapshot; deliveries of those origins are skipped.

The watermark is a CommitLog offset the log had certainly reached (ends of records seen and
put): any put issued later lands at or above it, which is what makes `scan_from` safe.

A put whose outcome is unknown (no reply in time, or the store's connection dropped with it in
flight: the store may have stored it before it died) is not simply put again: the log from the
put's watermark is read first (as the start-up scan does), and the copies found there count
as delivered, so a store killed mid-put delivers nothing twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, NamedTuple

from opentelemetry.trace import Span, SpanKind

from ferry.protocol import record
from ferry.protocol.codes import ResponseCode
from ferry.protocol.messages import AnyReply, ErrorReply, StorePutReply, StorePutRequest
from ferry.protocol.names import SCHEDULE_TOPIC, TIMER_TOPIC, TRANSACTION_TOPICS
from ferry.protocol.span_attributes import messaging
from ferry.runtime import telemetry
from ferry.runtime.service import Peer, Service

log = logging.getLogger("ferry.scheduler.delivery")

TRACER = "ferry.scheduler"
PUT_TIMEOUT_S = 10.0
# kept on the delivered copy as RocketMQ keeps them; DELAY goes (the copy is not delayed)
DROPPED_ON_DELIVERY = (record.PROPERTY_DELAY,)

Done = Callable[[bool], None]
# copies due together for the same queue travel in one put (one frame, PERFORMANCE.md)
MAX_BATCH = 128
# topics whose records wait to be delivered (their SCHEDULED_FROM, if any, is not a delivery)
HOLDING_TOPICS = frozenset({SCHEDULE_TOPIC, TIMER_TOPIC, *TRANSACTION_TOPICS})
# a put answered with one of these may have been stored all the same
UNKNOWN_OUTCOME = frozenset({ResponseCode.RPC_TIME_OUT, ResponseCode.RPC_SEND_TO_CHANNEL_FAILED})


class Pending(NamedTuple):
    raw: bytes
    on_done: Done
    span: Span | None
    origin: int


class Deliverer:
    def __init__(self, service: Service, store: Peer) -> None:
        self._service = service
        self._store = store
        self.watermark = 0
        self.done_before: set[int] = set()  # origins the start-up scan found delivered
        self.delivered = 0
        self.skipped = 0
        self.dropped = 0
        self._batches: dict[tuple[str, int, str], list[Pending]] = {}
        self._flush_soon = False

    def see(self, log_end: int) -> None:
        self.watermark = max(self.watermark, log_end)

    def deliver(self, rec: record.Record, on_done: Done) -> int:
        """Puts the copy; on_done(True) once stored (or found stored before a restart),
        on_done(False) when the store refused (the caller tries again later). Returns the
        watermark at issue time. on_done always runs later, from the loop. Copies issued in
        the same turn of the loop for the same queue are put together."""
        issued_at = self.watermark
        origin = rec.phys_offset
        if origin in self.done_before:  # kept: a timer taken in twice is skipped twice
            self.skipped += 1
            self._service.later(0, lambda: on_done(True))
            return issued_at
        props = rec.properties
        topic = props.get(record.PROPERTY_REAL_TOPIC, "")
        qid = props.get(record.PROPERTY_REAL_QID, "")
        if not topic or not qid.isdigit():
            # nothing to deliver it to: keep going rather than block the level forever
            log.error("record at %d has no REAL_TOPIC/REAL_QID; dropped", origin)
            self.dropped += 1
            self._service.later(0, lambda: on_done(True))
            return issued_at
        queue_id = int(qid)
        raw = record.retopic(
            rec,
            topic,
            set_props={record.PROPERTY_SCHEDULED_FROM: str(origin)},
            drop_props=DROPPED_ON_DELIVERY,
            queue_id=queue_id,
        )
        span = None
        if telemetry.enabled():
            span = telemetry.open_span(
                TRACER,
                f"deliver {topic}",
                props.get("traceparent", ""),
                props.get("tracestate", ""),
                SpanKind.PRODUCER,
                **messaging(destination=topic, message_id=props.get(record.PROPERTY_UNIQ_KEY, "")),
            )

        key = (topic, queue_id, rec.store_host)
        batch = self._batches.get(key)
        if batch is None:
            batch = self._batches[key] = []
        batch.append(Pending(raw, on_done, span, origin))
        if len(batch) >= MAX_BATCH:
            self._put(key, self._batches.pop(key))
        elif not self._flush_soon:
            self._flush_soon = True
            self._service.later(0, self._flush)
        return issued_at

    def _flush(self) -> None:
        self._flush_soon = False
        batches, self._batches = self._batches, {}
        for key, batch in batches.items():
            self._put(key, batch)

    def _put(self, key: tuple[str, int, str], batch: list[Pending]) -> None:
        topic, queue_id, store_host = key
        issued_at = self.watermark

        def on_put(body: AnyReply, _frames: list[Any]) -> None:
            ok = isinstance(body, StorePutReply) and len(body.phys_offsets) == len(batch)
            if isinstance(body, StorePutReply) and ok:
                self.see(body.phys_offsets[-1] + len(batch[-1].raw))
                self.delivered += len(batch)
                self._finish(batch, {b.origin for b in batch})
                return
            reason = body.message if isinstance(body, ErrorReply) else type(body).__name__
            log.warning("delivery of %d message(s) to %s failed: %s", len(batch), topic, reason)
            if isinstance(body, ErrorReply) and body.code in UNKNOWN_OUTCOME:
                self._look_for(batch, issued_at)
            else:
                self._finish(batch, set())

        # the store's append span joins the first traced copy's `deliver` span
        traced = next((item.span for item in batch if item.span is not None), None)
        traceparent, tracestate = telemetry.traceparent_of(traced) if traced else ("", "")
        self._store.request(
            # STOREHOST as the original was stamped: the remoting address clients know
            StorePutRequest(
                topic=topic, queue_id=queue_id, count=len(batch), store_host=store_host
            ),
            on_put,
            [b"".join(item.raw for item in batch)],
            timeout_s=PUT_TIMEOUT_S,
            traceparent=traceparent,
            tracestate=tracestate,
        )

    def _finish(self, batch: list[Pending], stored: set[int]) -> None:
        for item in batch:
            done = item.origin in stored
            telemetry.end_span(item.span, "" if done else "store_put_failed")
            item.on_done(done)

    def _look_for(self, batch: list[Pending], issued_at: int) -> None:
        """The put may be stored: the copies found in the log from issued_at on are done."""
        from ferry.scheduler.recovery import StartupScan  # recovery imports this module

        def on_scanned(found: set[int], log_end: int) -> None:
            self.see(log_end)
            stored = {item.origin for item in batch} & found
            self.done_before |= stored
            self.delivered += len(stored)
            if stored:
                log.info("%d of %d copies were stored before the failure", len(stored), len(batch))
            self._finish(batch, stored)

        StartupScan(self._service, self._store, HOLDING_TOPICS, on_scanned).run(issued_at)
