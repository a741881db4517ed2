"""Request/reply on the broker: requests stamped on their way in, replies handed to requesters.

RocketMQ's broker pushes a reply down the requester's connection (PUSH_REPLY_MESSAGE_TO_CLIENT).
A ROUTER cannot call a client, so here the requester holds a poll (PollRepliesRequest) at the
broker its request went through, and a reply arriving answers it at once; one arriving while
no poll is held waits in the requester's mailbox (reply_mailboxes.py) until the next poll or
its TTL. A copy of each reply is stored in `<cluster>_REPLY_TOPIC` (storeReplyMessageEnable),
after the requester has it: storing is not on the reply's path.

A request is a send flagged `request_reply`: only those records are decoded here, to stamp
the cluster (so the replier knows the reply topic) and this broker's address (so the reply
comes back here, where the requester polls).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ferry.protocol import record
from ferry.protocol.codes import Perm, SendStatus
from ferry.protocol.errors import (
    BrokerSystemError,
    InvalidParameterError,
    MessageIllegalError,
    SystemBusyError,
)
from ferry.protocol.messages import (
    AnyReply,
    ErrorReply,
    PollRepliesReply,
    PollRepliesRequest,
    SendMessageReply,
    SendMessageRequest,
    SendReplyRequest,
    StorePutReply,
    StorePutRequest,
    TopicConfig,
)
from ferry.protocol.messages.reply import (
    PROPERTY_CLUSTER,
    PROPERTY_CORRELATION_ID,
    PROPERTY_REPLY_TO_BROKER,
    PROPERTY_REPLY_TO_CLIENT,
    reply_topic,
)
from ferry.protocol.names import check_topic
from ferry.protocol.span_attributes import messaging
from ferry.remoting.calls import Caller
from ferry.remoting.record_edits import RECORD_OVERHEAD, single_record
from ferry.remoting.reply_mailboxes import MAX_KEY_LENGTH, ReplyMailboxes
from ferry.remoting.topic_table import TopicTable
from ferry.runtime import telemetry
from ferry.runtime.config import BrokerConfig
from ferry.runtime.service import Peer

log = logging.getLogger("ferry.remoting.reply")

TRACER = "ferry.remoting"
MAX_HOLD_MS = 30_000
MAX_TTL_MS = 10 * 60_000  # the longest a reply waits unpolled, whatever its TTL says
SWEEP_INTERVAL_S = 0.5
STORE_PUT_TIMEOUT_S = 10.0


def ensure_reply_topic(topics: TopicTable, cluster: str) -> str:
    """Creates the cluster's reply topic (one queue, read-write) unless it exists; its name,
    or "" when the cluster's name cannot make a topic name."""
    name = reply_topic(cluster)
    try:
        check_topic(name)
    except InvalidParameterError as exc:
        log.warning("no reply topic for cluster %r: %s; request/reply is off", cluster, exc)
        return ""
    if name not in topics:
        topics.put(TopicConfig(name, read_queue_nums=1, write_queue_nums=1, perm=Perm.READ_WRITE))
        log.info("created reply topic %s", name)
    return name


def stamp_request(raw: Any, req: SendMessageRequest, cluster: str, broker_addr: str) -> bytes:
    """A request's record with CLUSTER and REPLY_TO_BROKER set, for queue `req.queue_id`'s
    topic; refuses a record that is not one request of the send's topic."""
    if req.count != 1:
        raise InvalidParameterError("a request is sent alone (count 1), not batched")
    if req.transactional or req.delay_level or req.deliver_at_ms:
        raise InvalidParameterError("a request cannot be transactional, delayed or timed")
    rec = single_record(raw, req.topic, "request")
    props = rec.properties
    if not props.get(PROPERTY_CORRELATION_ID) or not props.get(PROPERTY_REPLY_TO_CLIENT):
        raise InvalidParameterError(
            f"a request needs {PROPERTY_CORRELATION_ID} and {PROPERTY_REPLY_TO_CLIENT}"
        )
    stamp = {PROPERTY_CLUSTER: cluster, PROPERTY_REPLY_TO_BROKER: broker_addr}
    try:
        return record.retopic(rec, rec.topic, set_props=stamp, queue_id=rec.queue_id)
    except record.RecordError as exc:
        raise MessageIllegalError(str(exc)) from None


def _store_stamped(raw: bytes, now_ms: int, host: bytes) -> bytes:
    """The reply as the requester gets it: its store timestamp and host are this broker's."""
    buf = bytearray(raw)
    record.STORE_STAMP.pack_into(buf, record.OFF_STORE_STAMP, now_ms, host)
    return bytes(buf)


class ReplyProcessor:
    def __init__(
        self, config: BrokerConfig, topics: TopicTable, store: Peer, broker_addr: str
    ) -> None:
        self.cluster = config.broker_cluster_name
        self.broker_addr = broker_addr
        self._broker_name = config.broker_name
        self._store = store
        self._store_replies = config.store_reply_message_enable and config.broker_role != "SLAVE"
        self._max_bytes = config.max_message_size + RECORD_OVERHEAD
        self._host = record.pack_host(broker_addr)
        self.topic = (
            ensure_reply_topic(topics, self.cluster)
            if config.broker_role != "SLAVE"
            else reply_topic(self.cluster)
        )
        self.mailboxes: ReplyMailboxes[Caller] = ReplyMailboxes()
        self._expired_logged = 0

    def stamp(self, raw: Any, req: SendMessageRequest) -> bytes:
        return stamp_request(raw, req, self.cluster, self.broker_addr)

    # ---- a replier's reply ----

    def send_reply(self, req: SendReplyRequest, call: Caller) -> None:
        if not self.topic or req.topic != self.topic:
            raise InvalidParameterError(
                f"replies through broker {self._broker_name} go to {self.topic or '(none)'}, "
                f"not {req.topic!r}"
            )
        _check_key(req.reply_to)
        payload = call.payload
        if len(payload) != 1:
            raise InvalidParameterError("a reply carries its record in exactly one frame")
        raw = bytes(payload[0])
        if not record.FIXED_SIZE <= len(raw) <= self._max_bytes:
            raise MessageIllegalError(f"a reply of {len(raw)} bytes is not one record")
        ttl_ms = min(max(req.ttl_ms, 0), MAX_TTL_MS)
        now = time.monotonic()
        stamped = _store_stamped(raw, int(time.time() * 1000), self._host)
        try:
            held = self.mailboxes.deliver(req.reply_to, stamped, now + ttl_ms / 1000)
        except OverflowError as exc:
            raise SystemBusyError(f"reply not taken: {exc}", retriable=False) from None
        if held is not None:
            self._answer(held, [stamped])
        span = None
        if telemetry.traced(call.traceparent):
            attributes = messaging(
                "reply",
                operation_type="send",
                destination=req.topic,
                conversation_id=req.correlation_id,
            )
            span = telemetry.open_span(
                TRACER, f"reply {req.topic}", call.traceparent, call.tracestate, **attributes
            )
        if not self._store_replies:
            call.reply(self._unstored())
            telemetry.end_span(span)
            return
        self._store_copy(req, raw, call, span)

    def _unstored(self) -> SendMessageReply:
        return SendMessageReply(
            status=SendStatus.SEND_OK,
            queue_id=0,
            queue_offset=0,
            store_host=self.broker_addr,
            phys_offsets=[0],
            broker_name=self._broker_name,
        )

    def _store_copy(self, req: SendReplyRequest, raw: bytes, call: Caller, span: Any) -> None:
        def on_stored(body: AnyReply, _frames: list[Any]) -> None:
            if isinstance(body, StorePutReply):
                call.reply(
                    SendMessageReply(
                        status=body.status,
                        queue_id=0,
                        queue_offset=body.queue_offset,
                        store_host=self.broker_addr,
                        phys_offsets=body.phys_offsets,
                        broker_name=self._broker_name,
                    )
                )
                telemetry.end_span(span)
                return
            why = body.message if isinstance(body, ErrorReply) else type(body).__name__
            log.warning("reply to %s handed over but not stored: %s", req.reply_to, why)
            call.fail(
                BrokerSystemError(
                    f"reply handed to its requester but not stored in {req.topic}: {why}",
                    retriable=False,  # sending it again would deliver it twice
                )
            )
            telemetry.end_span(span, "SYSTEM_ERROR")

        self._store.request(
            StorePutRequest(topic=req.topic, queue_id=0, count=1, store_host=self.broker_addr),
            on_stored,
            [raw],
            timeout_s=STORE_PUT_TIMEOUT_S,
            traceparent=call.traceparent,
            tracestate=call.tracestate,
        )

    # ---- a requester's poll ----

    def poll(self, req: PollRepliesRequest, call: Caller) -> PollRepliesReply | None:
        _check_key(req.reply_to)
        now = time.monotonic()
        hold_s = min(max(req.hold_ms, 0), MAX_HOLD_MS) / 1000
        waiting, replaced = self.mailboxes.poll(req.reply_to, call, now + hold_s, now)
        if replaced is not None:
            self._answer(replaced, [])
        if waiting or hold_s <= 0:
            self._answer(call, waiting)
        return None  # answered above, or held

    def sweep(self) -> None:
        """Answers polls held past their time; drops replies past their TTL (logged now and
        then: each is a requester that gave up)."""
        for call in self.mailboxes.sweep(time.monotonic()):
            self._answer(call, [])
        expired = self.mailboxes.expired
        if expired - self._expired_logged >= 1 and (
            self._expired_logged == 0 or expired >= 2 * self._expired_logged
        ):
            log.info("%d replies dropped unpolled past their TTL so far", expired)
            self._expired_logged = expired

    def _answer(self, call: Caller, raws: list[bytes]) -> None:
        reply = PollRepliesReply(count=len(raws), broker_name=self._broker_name)
        call.reply(reply, [b"".join(raws)] if raws else None)


def _check_key(reply_to: str) -> None:
    if not reply_to or len(reply_to) > MAX_KEY_LENGTH:
        raise InvalidParameterError(
            f"reply_to must be 1..{MAX_KEY_LENGTH} characters (the requester's REPLY_TO_CLIENT)"
        )
