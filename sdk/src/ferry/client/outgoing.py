"""Encoded messages on their way to a broker, and what the broker's reply means for each."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple, TypedDict

from opentelemetry import trace

from ferry import native
from ferry.client.message import MessageQueue, SendResult, SendStatus
from ferry.client.message_decode import host_hex
from ferry.client.publish import Target
from ferry.protocol.errors import FerryError
from ferry.protocol.messages import SendMessageReply, SendMessageRequest


class TraceContext(TypedDict):
    """A request's trace headers, as keyword arguments of the transports' calls."""

    traceparent: str
    tracestate: str


class Outgoing(NamedTuple):
    """Encoded message(s) of one topic, the same for every attempt."""

    topic: str
    msg_ids: list[str]
    payload: bytes  # concatenated records: one frame
    n_msgs: int
    traceparent: str
    tracestate: str
    span: trace.Span | None
    batchable: bool  # may join other messages in an automatic batch (not delayed)
    transactional: bool = False  # a transaction's half message (sent alone, never batched)
    delay_level: int = 0  # a delayed message (sent alone): the broker holds it until due
    deliver_at_ms: int = 0  # a timer message (sent alone): absolute delivery time
    request_reply: bool = False  # a request (sent alone): the broker stamps where replies go

    @property
    def trace(self) -> TraceContext:
        return {"traceparent": self.traceparent, "tracestate": self.tracestate}


def join(topic: str, parts: list[Outgoing]) -> Outgoing:
    """Several single messages as one batch request; the envelope carries the first's trace."""
    first = parts[0]
    return Outgoing(
        topic,
        [msg_id for part in parts for msg_id in part.msg_ids],
        b"".join([part.payload for part in parts]),
        sum([part.n_msgs for part in parts]),
        first.traceparent,
        first.tracestate,
        None,
        True,
    )


def send_request(
    group: str, out: Outgoing, target: Target, default_topic_queue_nums: int
) -> SendMessageRequest:
    """The request of one attempt. A traced send also names its messages' ids, which the
    broker's send span lists as they are instead of finding them in the records."""
    return SendMessageRequest(
        producer_group=group,
        topic=out.topic,
        queue_id=target.queue.queue_id,
        count=out.n_msgs,
        default_topic=target.default_topic,
        default_topic_queue_nums=default_topic_queue_nums,
        transactional=out.transactional,
        delay_level=out.delay_level,
        deliver_at_ms=out.deliver_at_ms,
        msg_ids=",".join(out.msg_ids) if out.traceparent else "",
        request_reply=out.request_reply,
    )


def offset_ids(reply: SendMessageReply) -> list[str]:
    """Offset message ids (store host + CommitLog offset), as record.offset_msg_id makes them."""
    host = host_hex(reply.store_host)
    return [f"{host}{offset:016X}" for offset in reply.phys_offsets]


def checked(reply: SendMessageReply, n_msgs: int) -> SendStatus:
    try:
        status = SendStatus(reply.status)
    except ValueError:
        raise FerryError(f"unknown send status {reply.status}") from None
    if len(reply.phys_offsets) != n_msgs:
        raise FerryError(f"broker stored {len(reply.phys_offsets)} of {n_msgs} messages")
    return status


def reply_queue(out: Outgoing, target: Target, reply: SendMessageReply) -> MessageQueue:
    return MessageQueue(out.topic, reply.broker_name or target.queue.broker_name, reply.queue_id)


def joined_result(out: Outgoing, target: Target, reply: SendMessageReply) -> SendResult:
    """One result for the request: ids of a batch joined by commas, as RocketMQ."""
    status = checked(reply, out.n_msgs)
    joined = None
    if native.ENABLED and len(reply.phys_offsets) > 1:  # a format per message, in Python
        joined = native.joined_offset_ids(host_hex(reply.store_host), reply.phys_offsets)
    if joined is None:
        joined = ",".join(offset_ids(reply))
    return SendResult(
        status,
        ",".join(out.msg_ids),
        joined,
        reply_queue(out, target, reply),
        reply.queue_offset,
    )


def each_result(out: Outgoing, target: Target, reply: SendMessageReply) -> list[SendResult]:
    """One result per message of the request, in order."""
    status = checked(reply, out.n_msgs)
    queue = reply_queue(out, target, reply)
    offset = reply.queue_offset
    host = host_hex(reply.store_host)
    if len(out.msg_ids) == 1:
        return [
            SendResult(status, out.msg_ids[0], f"{host}{reply.phys_offsets[0]:016X}", queue, offset)
        ]
    if native.ENABLED:  # 450 -> ~50 ns a result
        return native.send_results(
            SendResult, status, out.msg_ids, reply.phys_offsets, host, queue, offset
        )
    return each_result_py(out.msg_ids, reply.phys_offsets, status, host, queue, offset)


def each_result_py(
    msg_ids: list[str],
    phys_offsets: list[int],
    status: SendStatus,
    host: str,
    queue: MessageQueue,
    offset: int,
) -> list[SendResult]:
    """each_result's batch case in Python (the reference for native.send_results)."""
    # Filled as a frozen dataclass's own __init__ does it, with object.__setattr__ (the way the
    # dataclasses documentation gives), without the call of __init__: 565 against 700 ns a
    # result (bench/send_futures.py).
    new, put = SendResult.__new__, object.__setattr__
    results: list[SendResult] = []
    for msg_id, phys in zip(msg_ids, phys_offsets, strict=True):
        result = new(SendResult)
        put(result, "status", status)
        put(result, "msg_id", msg_id)
        put(result, "offset_msg_id", f"{host}{phys:016X}")
        put(result, "queue", queue)
        put(result, "queue_offset", offset)
        results.append(result)
        offset += 1
    return results


# each_result_py fills these fields, in this order: a field added to SendResult must be there too
assert [f.name for f in dataclasses.fields(SendResult)] == [
    "status",
    "msg_id",
    "offset_msg_id",
    "queue",
    "queue_offset",
]
