"""SEND_MESSAGE: check the header, pick the queue and forward the batch to the store.

This is the hot path (PERFORMANCE.md rule 4): the records are never decoded here. The payload
frame travels to the store untouched; the store checks every record exactly, remoting only
rejects what is obviously wrong from the sizes.

A store killed with puts in flight never answers them. When the connection to the store drops,
remoting answers each put still waiting there with a retriable BrokerSystemError at once, as
a client of a crashed RocketMQ broker sees its connection close, so that the producer retries
within its send timeout (the retry waits for the restarted store) instead of waiting the
whole timeout. The put may have been stored before the kill: a retry can store it twice
(at-least-once, same message id).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from typing import Any

from opentelemetry.trace import Span

from ferry.protocol.codes import Perm
from ferry.protocol.errors import (
    BrokerSystemError,
    InvalidParameterError,
    MessageIllegalError,
    NoPermissionError,
    ServiceNotAvailableError,
    TopicNotExistError,
)
from ferry.protocol.messages import (
    AnyReply,
    ErrorReply,
    SendMessageReply,
    SendMessageRequest,
    StorePutReply,
    StorePutRequest,
    TopicConfig,
)
from ferry.protocol.names import (
    AUTO_CREATE_TOPIC_KEY,
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    TRANS_HALF_TOPIC,
    TRANSACTION_TOPICS,
    check_group,
    check_topic,
)
from ferry.protocol.record import FIXED_SIZE
from ferry.protocol.span_attributes import messaging
from ferry.remoting.calls import AfterStore, Caller, reply_now
from ferry.remoting.delayed_send import DelayRules
from ferry.remoting.record_edits import RECORD_OVERHEAD
from ferry.remoting.send_span import add_message_ids
from ferry.remoting.stats import BrokerStats, elapsed_ms
from ferry.remoting.topic_table import TopicTable
from ferry.remoting.transaction_records import half_record
from ferry.runtime import telemetry
from ferry.runtime.config import BrokerConfig
from ferry.runtime.service import Peer

log = logging.getLogger("ferry.remoting.send")

TRACER = "ferry.remoting"
# Topics clients may not send to: markers and the scheduler's internal queues.
NOT_SENDABLE = frozenset({AUTO_CREATE_TOPIC_KEY, SCHEDULE_TOPIC, TIMER_TOPIC, *TRANSACTION_TOPICS})
STORE_PUT_TIMEOUT_S = 10.0


class SendProcessor:
    """answer: how a stored send is answered (at once, or on a SYNC_MASTER once the slaves
    acked it, ha_wait.py; gated by the write lease in controller mode); stamp_request:
    request/reply's stamp of a request's record (reply.py), None where requests are not
    served; on_stored: told the topic of every stored send (pops waiting for it look now)."""

    def __init__(
        self,
        config: BrokerConfig,
        topics: TopicTable,
        store: Peer,
        stats: BrokerStats,
        store_host: str,
        on_topics_changed: Callable[[], None],
        *,
        answer: AfterStore = reply_now,
        stamp_request: Callable[[Any, SendMessageRequest], bytes] | None = None,
        on_stored: Callable[[str], None] | None = None,
    ) -> None:
        self._topics = topics
        self._store = store
        self._stats = stats
        self._store_host = store_host
        self._on_topics_changed = on_topics_changed
        self._broker_name = config.broker_name
        self._broker_perm = config.broker_permission
        self._is_slave = config.broker_role == "SLAVE"
        self._auto_create = config.auto_create_topic_enable
        self._default_queue_nums = config.default_topic_queue_nums
        self._max_bytes_per_record = config.max_message_size + RECORD_OVERHEAD
        # a SYNC_FLUSH put may wait for the flush; give it that long before giving up
        self._put_timeout_s = max(STORE_PUT_TIMEOUT_S, config.sync_flush_timeout / 1000 + 5)
        self._next_queue: dict[str, int] = {}
        self._answer = answer
        self._delays = DelayRules(config)
        # puts the store has not answered yet: token -> how to answer it if the store goes away
        self._in_flight: dict[int, Callable[[], None]] = {}
        self._tokens = itertools.count()
        self._stamp_request = stamp_request
        self._on_stored = on_stored

    def store_lost(self) -> None:
        """The connection to the store dropped: answers every put in flight there (see
        above)."""
        waiting, self._in_flight = self._in_flight, {}
        for answer in waiting.values():
            answer()

    def apply_config(self, config: BrokerConfig) -> None:
        """updateBrokerConfig: takes the keys this processor reads that may change live."""
        self._broker_perm = config.broker_permission
        self._auto_create = config.auto_create_topic_enable
        self._default_queue_nums = config.default_topic_queue_nums
        self._max_bytes_per_record = config.max_message_size + RECORD_OVERHEAD

    def handle(self, req: SendMessageRequest, call: Caller) -> None:
        if not telemetry.traced(call.traceparent):
            self._send(req, call, None)
            return
        attributes = messaging(
            "send",
            operation_type="send",
            destination=req.topic,
            batch_count=req.count,
            rocketmq={"message.type": "transaction"} if req.transactional else None,
        )
        # the span lasts until the store answers, so it shows the whole broker-side time
        span = telemetry.open_span(
            TRACER, f"send {req.topic}", call.traceparent, call.tracestate, **attributes
        )
        try:
            self._send(req, call, span)
        except Exception as exc:
            telemetry.end_span(span, telemetry.error_type(exc))
            raise

    def _send(self, req: SendMessageRequest, call: Caller, span: Span | None) -> None:
        payload = call.payload
        topic = self._writable_topic(req, payload)
        queue_id = self._pick_queue(req, topic)
        frame, put_topic, put_queue = self._rewrite(req, payload[0], queue_id)
        if span is not None:
            span.set_attribute("messaging.destination.partition.id", str(queue_id))
            traceparent, tracestate = telemetry.traceparent_of(span)
        else:
            traceparent, tracestate = call.traceparent, call.tracestate
        put = StorePutRequest(
            topic=put_topic, queue_id=put_queue, count=req.count, store_host=self._store_host
        )
        self._put(req, call, span, queue_id, put, frame, traceparent, tracestate)

    def _writable_topic(self, req: SendMessageRequest, payload: list[Any]) -> TopicConfig:
        """The topic a send may write to (created on first send where allowed), after the
        checks that need no decoding: names, sizes, reserved topics, role and perms."""
        topic = self._topics.get(req.topic)
        if topic is None:
            check_topic(req.topic)  # names in the table were checked when they were created
        check_group(req.producer_group)
        if len(payload) != 1:
            raise InvalidParameterError(
                f"a send carries its records in exactly one frame, not {len(payload)}"
            )
        if req.count < 1:
            raise InvalidParameterError(f"count must be at least 1, not {req.count}")
        size = len(payload[0])
        if size > req.count * self._max_bytes_per_record:
            raise MessageIllegalError(
                f"{size} bytes for {req.count} message(s) is more than maxMessageSize allows"
            )
        if size < req.count * FIXED_SIZE:
            raise MessageIllegalError(f"{size} bytes cannot hold {req.count} record(s)")
        if req.topic in NOT_SENDABLE:
            raise NoPermissionError(f"topic {req.topic!r} is reserved; clients cannot send to it")
        if self._is_slave:
            raise ServiceNotAvailableError(
                f"broker {self._broker_name} is a slave; send to its master"
            )
        if topic is None:
            topic = self._create_topic(req)
        if not topic.perm & Perm.WRITE or not self._broker_perm & Perm.WRITE:
            raise NoPermissionError(
                f"topic {req.topic!r} is not writable on broker {self._broker_name}"
            )
        return topic

    def _rewrite(self, req: SendMessageRequest, frame: Any, queue_id: int) -> tuple[Any, str, int]:
        """(frame, topic, queue) of the put: a request stamped with where its reply goes, a
        half message set aside until its transaction ends, a delayed send held by the
        scheduler until due, or the send as it came."""
        if req.request_reply:
            if self._stamp_request is None:
                raise InvalidParameterError(f"broker {self._broker_name} serves no requests")
            return self._stamp_request(frame, req), req.topic, queue_id
        if req.transactional:
            return half_record(frame, req, queue_id), TRANS_HALF_TOPIC, 0
        if req.delay_level or req.deliver_at_ms:
            held = self._delays.redirect(frame, req, queue_id)
            if held is not None:
                return held.record, held.topic, held.queue_id
        return frame, req.topic, queue_id

    def _put(
        self,
        req: SendMessageRequest,
        call: Caller,
        span: Span | None,
        queue_id: int,
        put: StorePutRequest,
        frame: Any,
        traceparent: str,
        tracestate: str,
    ) -> None:
        started = time.monotonic()
        token = next(self._tokens)

        def on_reply(body: AnyReply, _frames: list[Any]) -> None:
            if self._in_flight.pop(token, None) is None:
                return  # answered already, by store_lost
            if self._stats.on_latency is not None:
                outcome = "error" if isinstance(body, ErrorReply) else "success"
                self._stats.on_latency("send_message", outcome, elapsed_ms(started))
            if isinstance(body, StorePutReply):
                self._stored(req, call, queue_id, body)
            elif isinstance(body, ErrorReply):
                call.reply(body)  # the store's code goes back to the client as it is
            else:
                call.fail(BrokerSystemError(f"store answered a put with {type(body).__name__}"))
            if span is not None:  # after the answer: the sender does not wait for the ids
                add_message_ids(span, call.payload[0], req.count, req.msg_ids)
                error = telemetry.code_name(body.code) if isinstance(body, ErrorReply) else ""
                telemetry.end_span(span, error)

        def on_store_lost() -> None:
            call.fail(
                BrokerSystemError(
                    f"broker {self._broker_name}: the store went away with this put in "
                    "flight (it may have been stored); send it again"
                )
            )
            if span is not None:
                telemetry.end_span(span, "SYSTEM_ERROR")

        self._in_flight[token] = on_store_lost
        self._store.request(
            put,
            on_reply,
            [frame],
            timeout_s=self._put_timeout_s,
            traceparent=traceparent,
            tracestate=tracestate,
        )

    def _stored(
        self, req: SendMessageRequest, call: Caller, queue_id: int, body: StorePutReply
    ) -> None:
        stats = self._stats
        stats.put_requests += 1
        stats.put_messages += len(body.phys_offsets)
        stats.count_put(req.topic, len(body.phys_offsets), len(call.payload[0]))
        reply = SendMessageReply(
            status=body.status,
            queue_id=queue_id,
            queue_offset=body.queue_offset,
            store_host=self._store_host,
            phys_offsets=body.phys_offsets,
            broker_name=self._broker_name,
        )
        self._answer(call, reply, body.next_offset)
        if self._on_stored is not None:
            self._on_stored(req.topic)

    def _create_topic(self, req: SendMessageRequest) -> TopicConfig:
        default = self._topics.get(AUTO_CREATE_TOPIC_KEY)
        if not self._auto_create or req.default_topic != AUTO_CREATE_TOPIC_KEY or default is None:
            raise TopicNotExistError(
                f"topic {req.topic!r} does not exist on broker {self._broker_name}"
                + ("" if self._auto_create else " and autoCreateTopicEnable is off")
            )
        queue_nums = max(1, min(req.default_topic_queue_nums, self._default_queue_nums))
        config = TopicConfig(
            req.topic,
            read_queue_nums=queue_nums,
            write_queue_nums=queue_nums,
            perm=default.perm & ~Perm.INHERIT,
        )
        self._topics.put(config)
        log.info("created topic %s with %d queues on first send", req.topic, queue_nums)
        self._on_topics_changed()
        return config

    def _pick_queue(self, req: SendMessageRequest, topic: TopicConfig) -> int:
        nums = topic.write_queue_nums
        if req.queue_id == -1:
            queue_id = self._next_queue.get(req.topic, 0) % nums
            self._next_queue[req.topic] = queue_id + 1
            return queue_id
        if not 0 <= req.queue_id < nums:
            # mostly a stale route (the topic shrank, or the sender took the default route of
            # a topic created a moment ago): retriable, so the SDK refreshes it and sends again
            raise InvalidParameterError(
                f"queue id {req.queue_id} is not within 0..{nums - 1} of topic {req.topic!r} "
                "(or -1 to let the broker pick)",
                retriable=True,
            )
        return req.queue_id
