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
from ferry.remoting.delayed_send import DelayRules
from ferry.remoting.end_transaction import half_record
from ferry.remoting.send_span import add_message_ids
from ferry.remoting.stats import BrokerStats, elapsed_ms
from ferry.remoting.topic_table import TopicTable
from ferry.runtime import telemetry
from ferry.runtime.config import BrokerConfig
from ferry.runtime.service import Call, Peer

log = logging.getLogger("ferry.remoting.send")

TRACER = "ferry.remoting"
# Room for a record's header, topic and properties on top of its body.
RECORD_OVERHEAD = 64 * 1024
# Topics clients may not send to: markers and the scheduler's internal queues.
NOT_SENDABLE = frozenset({AUTO_CREATE_TOPIC_KEY, SCHEDULE_TOPIC, TIMER_TOPIC, *TRANSACTION_TOPICS})
STORE_PUT_TIMEOUT_S = 10.0


class SendProcessor:
    def __init__(
        self,
        config: BrokerConfig,
        topics: TopicTable,
        store: Peer,
        stats: BrokerStats,
        store_host: str,
        on_topics_changed: Callable[[], None],
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
        # how a stored send is answered: at once, or (SYNC_MASTER, ha_wait.py) once a slave
        # acked the log up to the put's end offset
        self.after_store: Callable[[Call, SendMessageReply, int], None] = reply_now
        self._delays = DelayRules(config)
        # puts the store has not answered yet: token -> how to answer it if the store goes away
        self._in_flight: dict[int, Callable[[], None]] = {}
        self._tokens = itertools.count()
        # request/reply (reply.py): stamps a request's record with where its reply goes
        self.stamp_request: Callable[[Any, SendMessageRequest], bytes] | None = None
        # told the topic of every stored send (pop.py: pops waiting for messages look now)
        self.on_stored: Callable[[str], None] | None = None

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

    def handle(self, req: SendMessageRequest, call: Call) -> None:
        if not telemetry.traced(call.traceparent):
            self._send(req, call, None)
            return
        attributes: dict[str, Any] = {
            "messaging.system": "rocketmq",
            "messaging.operation.type": "send",
            "messaging.operation.name": "send",
            "messaging.destination.name": req.topic,
        }
        if req.count > 1:
            attributes["messaging.batch.message_count"] = req.count
        if req.transactional:
            attributes["messaging.rocketmq.message.type"] = "transaction"
        # the span lasts until the store answers, so it shows the whole broker-side time
        span = telemetry.open_span(
            TRACER, f"send {req.topic}", call.traceparent, call.tracestate, **attributes
        )
        try:
            self._send(req, call, span)
        except Exception as exc:
            telemetry.end_span(span, telemetry.error_type(exc))
            raise

    def _send(self, req: SendMessageRequest, call: Call, span: Span | None) -> None:
        topic = self._topics.get(req.topic)
        if topic is None:
            check_topic(req.topic)  # names in the table were checked when they were created
        check_group(req.producer_group)
        payload = call.payload
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
        queue_id = self._pick_queue(req, topic)
        put_topic, put_queue = req.topic, queue_id
        if req.request_reply:
            if self.stamp_request is None:
                raise InvalidParameterError(f"broker {self._broker_name} serves no requests")
            payload = [self.stamp_request(payload[0], req)]
        elif req.transactional:  # a half message waits aside until its transaction ends
            payload = [half_record(payload[0], req, queue_id)]
            put_topic, put_queue = TRANS_HALF_TOPIC, 0
        elif req.delay_level or req.deliver_at_ms:  # held by the scheduler until due
            held = self._delays.redirect(payload[0], req, queue_id)
            if held is not None:
                payload = [held.record]
                put_topic, put_queue = held.topic, held.queue_id
        if span is not None:
            span.set_attribute("messaging.destination.partition.id", str(queue_id))
            traceparent, tracestate = telemetry.traceparent_of(span)
        else:
            traceparent, tracestate = call.traceparent, call.tracestate

        started = time.monotonic()
        token = next(self._tokens)

        def on_reply(body: AnyReply, _frames: list[Any]) -> None:
            if self._in_flight.pop(token, None) is None:
                return  # answered already, by store_lost
            if self._stats.on_latency is not None:
                outcome = "error" if isinstance(body, ErrorReply) else "success"
                self._stats.on_latency("send_message", outcome, elapsed_ms(started))
            if isinstance(body, StorePutReply):
                self._stats.put_requests += 1
                self._stats.put_messages += len(body.phys_offsets)
                self._stats.count_put(req.topic, len(body.phys_offsets), size)
                self.after_store(
                    call,
                    SendMessageReply(
                        status=body.status,
                        queue_id=queue_id,
                        queue_offset=body.queue_offset,
                        store_host=self._store_host,
                        phys_offsets=body.phys_offsets,
                        broker_name=self._broker_name,
                    ),
                    body.next_offset,
                )
                if self.on_stored is not None:
                    self.on_stored(req.topic)
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
            StorePutRequest(
                topic=put_topic,
                queue_id=put_queue,
                count=req.count,
                store_host=self._store_host,
            ),
            on_reply,
            payload,
            timeout_s=self._put_timeout_s,
            traceparent=traceparent,
            tracestate=tracestate,
        )

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


def reply_now(call: Call, reply: SendMessageReply, _end_offset: int) -> None:
    call.reply(reply)
