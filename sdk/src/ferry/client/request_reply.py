"""Request/reply without I/O: building requests and replies, and matching replies to requests.

The sync SDK (requester.py, replier.py) and ferry.client.aio share these; each does its own
sending and waiting. A request carries CORRELATION_ID (new per request), REPLY_TO_CLIENT (the
requester's key: its client id and a secret part, so nobody else can poll its replies) and TTL
(its timeout, ms); the broker adds CLUSTER and REPLY_TO_BROKER. A reply goes to
`<CLUSTER>_REPLY_TOPIC` through REPLY_TO_BROKER, carrying the request's CORRELATION_ID,
REPLY_TO_CLIENT and TTL, and MSG_TYPE=reply.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from opentelemetry import trace

from ferry.client.message import Message, MessageExt, MessageQueue, SendResult
from ferry.client.message_decode import decode_message
from ferry.client.message_encode import encode_message, message_properties
from ferry.client.msg_id import MessageIdGenerator
from ferry.client.outgoing import checked, offset_ids
from ferry.client.tracing import Tracing
from ferry.protocol import record
from ferry.protocol.errors import FerryError, InvalidParameterError, ReplyTimeoutError
from ferry.protocol.messages import (
    PollRepliesReply,
    PollRepliesRequest,
    SendMessageReply,
    SendReplyRequest,
)
from ferry.protocol.messages.reply import (
    PROPERTY_CLUSTER,
    PROPERTY_CORRELATION_ID,
    PROPERTY_MESSAGE_TTL,
    PROPERTY_MESSAGE_TYPE,
    PROPERTY_REPLY_TO_BROKER,
    PROPERTY_REPLY_TO_CLIENT,
    REPLY_MESSAGE_FLAG,
    reply_topic,
)

log = logging.getLogger("ferry.client.request")

DEFAULT_REQUEST_TIMEOUT_MS = 3000
# how long the broker holds a requester's poll when no reply waits
POLL_HOLD_MS = 15_000
POLL_HOLD_S = POLL_HOLD_MS / 1000
POLL_GRACE_S = 5.0  # a held poll's wait for its answer, past the hold time
# a broker that took a request is polled this long after its last request, so that the next
# request's reply finds a poll held (no poll round trip on its path)
POLL_LINGER_S = 30.0
POLL_RETRY_S = 0.2  # after a failed poll


class RequestCallback(Protocol):
    """RocketMQ's RequestCallback: one of the two is called once, on an SDK thread."""

    def on_success(self, reply: MessageExt) -> None: ...

    def on_exception(self, error: BaseException) -> None: ...


def new_reply_key(client_id: str) -> str:
    """A requester's REPLY_TO_CLIENT: its client id, and a secret part that makes it
    unguessable (whoever knows it can take the replies)."""
    return f"{client_id}#{secrets.token_hex(8)}"


def check_timeout_ms(timeout_ms: int) -> int:
    if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or timeout_ms <= 0:
        raise InvalidParameterError(
            f"a request's timeout_ms must be a positive int, not {timeout_ms!r}"
        )
    return timeout_ms


def request_message(msg: Message, reply_to: str, timeout_ms: int) -> tuple[Message, str]:
    """(a copy of msg carrying the request properties, its correlation id)."""
    if msg.delay_level > 0 or msg.deliver_at_ms is not None:
        raise InvalidParameterError("a request cannot be delayed")
    correlation_id = uuid.uuid4().hex
    props = dict(msg.properties)
    props[PROPERTY_CORRELATION_ID] = correlation_id
    props[PROPERTY_REPLY_TO_CLIENT] = reply_to
    props[PROPERTY_MESSAGE_TTL] = str(check_timeout_ms(timeout_ms))
    request = Message(msg.topic, msg.body, tags=msg.tags, keys=msg.keys, properties=props)
    return request, correlation_id


@dataclass(frozen=True)
class ReplyTarget:
    """Where a reply goes, and what its SendReplyRequest says."""

    broker_addr: str
    request: SendReplyRequest


def reply_message(
    request: Message,
    body: bytes | bytearray | memoryview | str,
    group: str,
    properties: Mapping[str, str] | None = None,
) -> tuple[Message, ReplyTarget]:
    """RocketMQ's MessageUtil.createReplyMessage, and where to send the reply: the broker the
    request came through. Raises InvalidParameterError for a message that is not a request."""
    props = request.properties
    missing = [
        key
        for key in (
            PROPERTY_CORRELATION_ID,
            PROPERTY_REPLY_TO_CLIENT,
            PROPERTY_CLUSTER,
            PROPERTY_REPLY_TO_BROKER,
        )
        if not props.get(key)
    ]
    if missing:
        raise InvalidParameterError(
            f"message {getattr(request, 'msg_id', '')} is not a request (no {', '.join(missing)}):"
            " only a message sent with Producer.request can be replied to"
        )
    correlation_id = props[PROPERTY_CORRELATION_ID]
    reply_to = props[PROPERTY_REPLY_TO_CLIENT]
    ttl = props.get(PROPERTY_MESSAGE_TTL, "")
    topic = reply_topic(props[PROPERTY_CLUSTER])
    reply_props = dict(properties or {})
    reply_props[PROPERTY_MESSAGE_TYPE] = REPLY_MESSAGE_FLAG
    reply_props[PROPERTY_CORRELATION_ID] = correlation_id
    reply_props[PROPERTY_REPLY_TO_CLIENT] = reply_to
    if ttl:
        reply_props[PROPERTY_MESSAGE_TTL] = ttl
    reply = Message(topic, body, properties=reply_props)
    target = ReplyTarget(
        props[PROPERTY_REPLY_TO_BROKER],
        SendReplyRequest(
            producer_group=group,
            topic=topic,
            reply_to=reply_to,
            correlation_id=correlation_id,
            ttl_ms=int(ttl) if ttl.isdigit() else DEFAULT_REQUEST_TIMEOUT_MS,
        ),
    )
    return reply, target


@dataclass(frozen=True)
class PreparedReply:
    """A reply encoded for its SendReplyRequest, with its span (the caller ends it)."""

    target: ReplyTarget
    payload: bytes
    msg_id: str
    topic: str
    span: trace.Span | None
    traceparent: str
    tracestate: str


def prepare_reply(
    msg_ids: MessageIdGenerator,
    born_host: bytes,
    tracing: Tracing,
    group: str,
    request: Message,
    body: bytes | bytearray | memoryview | str,
    properties: Mapping[str, str] | None = None,
) -> PreparedReply:
    """reply_message, encoded; traced, the reply's send span continues the request's trace."""
    reply, target = reply_message(request, body, group, properties)
    msg_id = msg_ids.next_id()
    props = message_properties(reply, msg_id)
    span = None
    if tracing.enabled:
        span = tracing.start_reply(
            reply.topic, msg_id, target.request.correlation_id, request.properties
        )
        tracing.inject(span, props)
    try:
        payload = encode_message(
            reply, props, born_timestamp=int(time.time() * 1000), born_host=born_host
        )
    except FerryError as err:
        tracing.end(span, err)
        raise
    return PreparedReply(
        target,
        payload,
        msg_id,
        reply.topic,
        span,
        props.get("traceparent", ""),
        props.get("tracestate", ""),
    )


def reply_result(prepared: PreparedReply, stored: SendMessageReply) -> SendResult:
    """The replier's SendResult: its reply's id and where the broker stored the copy."""
    queue = MessageQueue(prepared.topic, stored.broker_name, stored.queue_id)
    status = checked(stored, 1)
    return SendResult(status, prepared.msg_id, offset_ids(stored)[0], queue, stored.queue_offset)


def poll_request(reply_to: str) -> tuple[PollRepliesRequest, float]:
    """A requester's poll, and how long to wait for its answer."""
    return PollRepliesRequest(reply_to=reply_to, hold_ms=POLL_HOLD_MS), POLL_HOLD_S + POLL_GRACE_S


def decode_replies(reply: PollRepliesReply, payload: list[Any]) -> list[MessageExt]:
    """The replies a poll brought; a record that does not decode is logged and skipped."""
    if not reply.count or not payload:
        return []
    out: list[MessageExt] = []
    try:
        for rec in record.iter_records(bytes(payload[0])):
            out.append(decode_message(rec, reply.broker_name))
    except (record.RecordError, ValueError) as exc:
        log.warning("undecodable reply from broker %s skipped: %s", reply.broker_name, exc)
    return out


W = TypeVar("W")  # what waits for a reply: a concurrent Future, an asyncio Future, ...


@dataclass
class _Pending(Generic[W]):
    waiter: W
    deadline: float
    timeout_ms: int
    broker: str = ""  # the address the request went through, once known


class ReplyMatcher(Generic[W]):
    """Requests waiting for their replies, by correlation id; thread-safe.

    A reply whose request is gone (timed out, or a duplicate) is dropped and counted in
    `late`, logged once per matcher."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[str, _Pending[W]] = {}
        self._by_broker: dict[str, int] = {}
        self._last_request: dict[str, float] = {}
        self.late = 0

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, correlation_id: str, waiter: W, timeout_ms: int) -> None:
        deadline = time.monotonic() + timeout_ms / 1000
        with self._lock:
            self._pending[correlation_id] = _Pending(waiter, deadline, timeout_ms)

    def sent(self, correlation_id: str, broker: str) -> bool:
        """The request is stored at `broker`, whose polls bring its reply; False when it is
        over already (answered or timed out)."""
        with self._lock:
            self._last_request[broker] = time.monotonic()
            entry = self._pending.get(correlation_id)
            if entry is None:
                return False
            entry.broker = broker
            self._by_broker[broker] = self._by_broker.get(broker, 0) + 1
            return True

    def match(self, reply: MessageExt) -> W | None:
        """The waiter of the reply's request, removed; None for a late or stray reply."""
        correlation_id = reply.properties.get(PROPERTY_CORRELATION_ID, "")
        with self._lock:
            entry = self._pop(correlation_id)
            if entry is None:
                self.late += 1
                late = self.late
        if entry is None:
            if late == 1:
                log.info(
                    "reply %s came after its request timed out (or twice): dropped; "
                    "later ones are dropped without a word",
                    correlation_id,
                )
            return None
        return entry.waiter

    def timed_out(self, correlation_id: str) -> tuple[W, ReplyTimeoutError] | None:
        """The waiter and its error when the request is still waiting; removed."""
        with self._lock:
            entry = self._pop(correlation_id)
        if entry is None:
            return None
        where = f" through {entry.broker}" if entry.broker else ""
        return entry.waiter, ReplyTimeoutError(
            f"request {correlation_id}{where} had no reply in {entry.timeout_ms} ms"
        )

    def fail(self, correlation_id: str) -> W | None:
        """Removes a request whose send failed; its waiter, if it was still waiting."""
        with self._lock:
            entry = self._pop(correlation_id)
        return None if entry is None else entry.waiter

    def fail_broker(self, broker: str) -> list[W]:
        """Removes every request waiting at `broker` (its polls are refused for good)."""
        with self._lock:
            ids = [cid for cid, e in self._pending.items() if e.broker == broker]
            return [e.waiter for cid in ids if (e := self._pop(cid)) is not None]

    def keep_polling(self, broker: str) -> bool:
        """Whether `broker` should be polled again: requests wait there, or one went there
        within POLL_LINGER_S."""
        with self._lock:
            if self._by_broker.get(broker, 0) > 0:
                return True
            return time.monotonic() - self._last_request.get(broker, 0.0) < POLL_LINGER_S

    def drain(self) -> list[W]:
        """Every waiter, removed (shutdown)."""
        with self._lock:
            waiters = [e.waiter for e in self._pending.values()]
            self._pending.clear()
            self._by_broker.clear()
            return waiters

    def _pop(self, correlation_id: str) -> _Pending[W] | None:
        entry = self._pending.pop(correlation_id, None)
        if entry is not None and entry.broker:
            left = self._by_broker.get(entry.broker, 0) - 1
            if left > 0:
                self._by_broker[entry.broker] = left
            else:
                self._by_broker.pop(entry.broker, None)
        return entry
