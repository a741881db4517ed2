"""Pop consumption without I/O: the requests a SimpleConsumer sends and what it makes of the
replies. The sync SimpleConsumer and ferry.client.aio both use these, each with its own I/O.

A received message carries its receipt handle in the property POP_CK (as RocketMQ's remoting
clients have it) and the broker it came from in `broker_name`; ack and
change_invisible_duration send both back.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from ferry.client.consume_service import restore_retry_topic
from ferry.client.message import ConsumeFromWhere, MessageExt
from ferry.client.message_decode import decode_records
from ferry.client.message_selector import (
    Expression,
    as_selector,
    subscription_data,
    wire_expression,
)
from ferry.client.route import TopicRoute
from ferry.client.transport import Result, expect
from ferry.protocol.codes import PullStatus
from ferry.protocol.errors import (
    BrokerNotExistError,
    FerryError,
    InvalidParameterError,
    InvalidReceiptHandleError,
    error_for,
)
from ferry.protocol.messages import (
    AckEntry,
    AckMessageRequest,
    BatchAckMessageReply,
    BatchAckMessageRequest,
    ChangeInvisibleTimeReply,
    ChangeInvisibleTimeRequest,
    ConsumerData,
    HeartbeatRequest,
    OkReply,
    PopMessageReply,
    PopMessageRequest,
)
from ferry.protocol.names import RETRY_PREFIX, check_group, check_topic

PROPERTY_RECEIPT_HANDLE = "POP_CK"
# how much longer than the long poll a pop may take to answer
REPLY_GRACE_S = 5.0


def duration_ms(seconds: float, what: str) -> int:
    if seconds <= 0:
        raise InvalidParameterError(f"{what} must be positive (seconds), got {seconds}")
    return int(seconds * 1000)


@dataclass(frozen=True)
class PopSettings:
    """A SimpleConsumer's options, checked once (sync and asyncio consumers alike)."""

    group: str
    await_duration: float = 20.0
    invisible_duration: float = 60.0
    consume_from: ConsumeFromWhere = ConsumeFromWhere.LAST_OFFSET
    max_reconsume_times: int = 16

    def __post_init__(self) -> None:
        check_group(self.group)
        if self.await_duration < 0 or self.invisible_duration <= 0:
            raise InvalidParameterError("await_duration >= 0 and invisible_duration > 0")

    def request(
        self,
        target: PopTarget,
        *,
        max_messages: int,
        invisible_duration: float | None,
        await_s: float,
        client_id: str,
    ) -> PopMessageRequest:
        return pop_request(
            self.group,
            target.topic,
            target.expression,
            max_messages=max_messages,
            invisible_s=invisible_duration or self.invisible_duration,
            await_s=await_s,
            from_first=self.consume_from is ConsumeFromWhere.FIRST_OFFSET,
            max_reconsume_times=self.max_reconsume_times,
            client_id=client_id,
        )

    def rounds(
        self,
        targets: Sequence[PopTarget],
        turn: int,
        *,
        max_messages: int,
        invisible_duration: float | None,
        client_id: str,
        api_timeout_s: float,
    ) -> Iterator[tuple[PopTarget, PopMessageRequest, float]]:
        """One receive's requests in order (receive_rounds), each with its reply timeout."""
        for target, await_s in receive_rounds(targets, turn, self.await_duration):
            req = self.request(
                target,
                max_messages=max_messages,
                invisible_duration=invisible_duration,
                await_s=await_s,
                client_id=client_id,
            )
            yield target, req, reply_timeout_s(await_s, api_timeout_s)


class PopTarget(NamedTuple):
    topic: str
    expression: Expression
    broker_name: str
    addr: str


def check_subscription(topic: str, expression: Expression) -> None:
    check_topic(topic)
    as_selector(expression)


def route_targets(topic: str, expression: Expression, route: TopicRoute) -> list[PopTarget]:
    """The masters serving a subscribed topic, by broker name."""
    out: list[PopTarget] = []
    for name in sorted({q.broker_name for q in route.read_queues}):
        addr = route.master_of(name)
        if addr is not None:
            out.append(PopTarget(topic, expression, name, addr))
    return out


def receive_targets(
    group: str, subscriptions: Mapping[str, Expression], routes: Mapping[str, TopicRoute]
) -> list[PopTarget]:
    """The brokers a receive asks, by topic and broker name (routes: each subscribed
    topic's); the error no_target_error gives when there are none."""
    targets = [
        target
        for topic in sorted(subscriptions)
        for target in route_targets(topic, subscriptions[topic], routes[topic])
    ]
    if not targets:
        raise no_target_error(group, subscriptions)
    return targets


def no_target_error(group: str, subscriptions: Mapping[str, Expression]) -> FerryError:
    """Why a receive has no broker to ask: nothing subscribed, or no master serves them (pop
    is a master's: a slave keeps no checkpoints)."""
    if not subscriptions:
        return InvalidParameterError(f"simple consumer {group} subscribes to nothing")
    return BrokerNotExistError(
        f"no master serves {', '.join(sorted(subscriptions))} now; pop needs a master"
    )


def receive_rounds(
    targets: Sequence[PopTarget], turn: int, await_s: float
) -> list[tuple[PopTarget, float]]:
    """What one receive() asks, in order: with several brokers, a look at each without
    waiting, then a long poll on one of them (a different first one each turn)."""
    ordered = [targets[(turn + i) % len(targets)] for i in range(len(targets))]
    rounds = [(t, 0.0) for t in ordered] if len(ordered) > 1 else []
    rounds.append((ordered[0], await_s))
    return rounds


def reply_timeout_s(await_s: float, api_timeout_s: float) -> float:
    return await_s + REPLY_GRACE_S + api_timeout_s


def heartbeat_request(
    client_id: str, group: str, subscriptions: Mapping[str, Expression]
) -> HeartbeatRequest:
    subs = [subscription_data(t, e) for t, e in subscriptions.items()]
    consumer = ConsumerData(group, consume_type="POP", subscriptions=subs)
    return HeartbeatRequest(client_id=client_id, consumers=[consumer])


def pop_request(
    group: str,
    topic: str,
    expression: Expression,
    *,
    max_messages: int,
    invisible_s: float,
    await_s: float,
    from_first: bool,
    max_reconsume_times: int,
    client_id: str,
) -> PopMessageRequest:
    if max_messages < 1:
        raise InvalidParameterError(f"max_messages must be at least 1, got {max_messages}")
    expression_type, text = wire_expression(expression)
    return PopMessageRequest(
        consumer_group=group,
        topic=topic,
        expression=text,
        expression_type=expression_type,
        max_msgs=max_messages,
        invisible_ms=duration_ms(invisible_s, "invisible_duration"),
        poll_ms=int(max(await_s, 0) * 1000),
        from_first=from_first,
        max_reconsume_times=max_reconsume_times,
        client_id=client_id,
    )


def decode_pop_reply(
    reply: PopMessageReply, frames: Sequence[Any], broker_name: str
) -> list[MessageExt]:
    """The popped messages, each with its receipt handle; a retry copy shows its original
    topic."""
    if reply.status != PullStatus.FOUND or not frames:
        return []
    out: list[MessageExt] = []
    decode_records(frames[0], broker_name, None, out)
    if len(out) != len(reply.handles):
        raise InvalidParameterError(
            f"pop reply holds {len(out)} message(s) but {len(reply.handles)} receipt handle(s)"
        )
    for msg, handle in zip(out, reply.handles, strict=True):
        msg.properties[PROPERTY_RECEIPT_HANDLE] = handle
        if msg.topic.startswith(RETRY_PREFIX):
            restore_retry_topic(msg)
    return out


def popped(result: Result, broker_name: str) -> list[MessageExt]:
    """decode_pop_reply of a pop's result."""
    return decode_pop_reply(expect(result, PopMessageReply), result[1], broker_name)


def receipt_handle(msg: MessageExt) -> str:
    handle = msg.properties.get(PROPERTY_RECEIPT_HANDLE)
    if not handle:
        raise InvalidReceiptHandleError("the message was not received by a SimpleConsumer")
    return handle


def ack_request(group: str, msg: MessageExt) -> AckMessageRequest:
    handle = receipt_handle(msg)
    return AckMessageRequest(consumer_group=group, topic=msg.topic, receipt_handle=handle)


def batch_ack_request(group: str, msgs: Sequence[MessageExt]) -> BatchAckMessageRequest:
    entries = [AckEntry(m.topic, receipt_handle(m)) for m in msgs]
    return BatchAckMessageRequest(consumer_group=group, entries=entries)


def acked(result: Result) -> None:
    """An ack's reply, checked to be the OkReply it promises."""
    expect(result, OkReply)


def batch_acked(result: Result) -> list[FerryError | None]:
    return batch_ack_errors(expect(result, BatchAckMessageReply))


def batch_ack_errors(reply: BatchAckMessageReply) -> list[FerryError | None]:
    """Per entry: None when acked, else the typed error."""
    return [
        None if code == 0 else error_for(code, message)
        for code, message in zip(reply.codes, reply.messages, strict=True)
    ]


def change_request(group: str, msg: MessageExt, duration_s: float) -> ChangeInvisibleTimeRequest:
    return ChangeInvisibleTimeRequest(
        consumer_group=group,
        topic=msg.topic,
        receipt_handle=receipt_handle(msg),
        invisible_ms=duration_ms(duration_s, "duration"),
    )


def apply_change(msg: MessageExt, reply: ChangeInvisibleTimeReply) -> None:
    """The new handle replaces the old one on the message (the old one no longer acks)."""
    msg.properties[PROPERTY_RECEIPT_HANDLE] = reply.receipt_handle


def changed(msg: MessageExt, result: Result) -> None:
    """apply_change of a change_invisible_duration's result."""
    apply_change(msg, expect(result, ChangeInvisibleTimeReply))
