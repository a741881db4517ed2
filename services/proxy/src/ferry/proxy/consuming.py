"""The proxy's consumers: ReceiveMessage, AckMessage, ChangeInvisibleDuration and
QueryAssignment on Ferry's pop, with pop_codec's requests and replies and one
ferry.client.aio client instance (its routes and connections) for every group.

The proxy keeps nothing per message: a receipt handle names the broker and Ferry's own handle
(receipts.py). A receive always ends before the client's deadline: the long poll is cut to
what the deadline leaves, less a margin for the reply.

A group new to a queue starts at the queue's first message (pop's from_first). RocketMQ's
proxy starts it at the end unless that first message is still in memory, so that a group
made just after a topic's first sends gets them; the proxy cannot see the store's memory, so
for now a new group on a topic with a long history gets that history too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

from ferry.client import pop_codec
from ferry.client.aio.instance import AsyncClientInstance
from ferry.client.message import MessageExt
from ferry.client.pop_codec import PopTarget
from ferry.client.transport import expect
from ferry.protocol.auth import Credentials
from ferry.protocol.errors import BrokerNotExistError, FerryError
from ferry.protocol.messages import (
    AckMessageRequest,
    AnyRequest,
    ChangeInvisibleTimeReply,
    ChangeInvisibleTimeRequest,
)
from ferry.proxy import delivery, receipts
from ferry.proxy.convert import endpoints
from ferry.proxy.errors import ProxyError, status_of
from ferry.proxy.protocol import Code, Pb, Permission, definition, status
from ferry.proxy.protocol import service as service_pb

log = logging.getLogger("ferry.proxy.consuming")

# what a receive keeps of the client's deadline for the reply to reach it
DEADLINE_MARGIN_S = 1.0
# a receive that names none (the push consumer's), as RocketMQ's proxy; the proxy does not
# renew it yet (auto_renew): a listener busy for longer gets the message again
DEFAULT_INVISIBLE_MS = 60_000
MAX_RECONSUME_TIMES = -1  # the group's retryMaxTimes


class Popper:
    """Ferry's pop for every group the proxy serves: one client instance, started and closed
    on the proxy's loop."""

    def __init__(
        self,
        namesrv: str,
        api_timeout_s: float = 3.0,
        *,
        credentials: Credentials | None = None,
        tls_server_key: str | None = None,
    ) -> None:
        self._namesrv = namesrv
        self._inst: AsyncClientInstance | None = None
        self.api_timeout_s = api_timeout_s
        self._credentials = credentials  # the cluster's inner identity, with authentication
        self._key = tls_server_key

    def start(self) -> None:
        self._inst = AsyncClientInstance(
            self._namesrv,
            role="consumer",
            credentials=self._credentials,
            tls_server_key=self._key,
        )

    async def close(self) -> None:
        inst, self._inst = self._inst, None
        if inst is not None:
            await inst.close()

    def _started(self) -> AsyncClientInstance:
        if self._inst is None:
            raise RuntimeError("Popper is not started")
        return self._inst

    async def targets(self, topic: str, ask: delivery.ReceiveAsk) -> list[PopTarget]:
        """The masters to pop `topic` from: the queue's broker when the client named one."""
        route = await self._started().routes.ensure(topic)
        every = pop_codec.route_targets(topic, ask.expression, route)
        named = [t for t in every if t.broker_name == ask.broker_name]
        found = named or every
        if not found:
            raise BrokerNotExistError(f"no master serves {topic} now; pop needs a master")
        return found

    async def pop(
        self,
        target: PopTarget,
        ask: delivery.ReceiveAsk,
        invisible_ms: int,
        poll_s: float,
        timeout_s: float,
    ) -> list[MessageExt]:
        inst = self._started()
        req = pop_codec.pop_request(
            ask.group,
            target.topic,
            ask.expression,
            max_messages=ask.batch_size,
            invisible_s=invisible_ms / 1000,
            await_s=poll_s,
            from_first=True,
            max_reconsume_times=MAX_RECONSUME_TIMES,
            client_id=inst.client_id,
        )
        result = await inst.connection(target.addr).request(req, timeout_s=timeout_s)
        return pop_codec.popped(result, target.broker_name)

    async def to_masters(self, body: AnyRequest, topics: Sequence[str]) -> None:
        """`body` to every master serving one of `topics` (a heartbeat, an unregister); a
        broker that fails is logged, the others still get it."""
        inst = self._started()
        addrs: set[str] = set()
        for topic in topics:
            try:
                addrs.update((await inst.routes.ensure(topic)).master_addrs.values())
            except FerryError as err:
                log.debug("no route for %s: %s", topic, err)
        for addr in sorted(addrs):
            try:
                await inst.connection(addr).request(body, timeout_s=self.api_timeout_s)
            except FerryError as err:
                log.info("%s to %s failed: %s", type(body).__name__, addr, err)

    async def _addr(self, broker_name: str, topic: str) -> str:
        routes = self._started().routes
        addr = routes.addr_of(broker_name)
        if addr is None:
            await routes.fetch_route(topic)
            addr = routes.addr_of(broker_name)
        if addr is None:
            raise ProxyError(
                Code.INVALID_RECEIPT_HANDLE, f"the receipt handle names broker {broker_name!r}"
            )
        return addr

    async def ack(self, group: str, topic: str, receipt: receipts.Receipt) -> None:
        inst = self._started()
        conn = inst.connection(await self._addr(receipt.broker_name, topic))
        req = AckMessageRequest(consumer_group=group, topic=topic, receipt_handle=receipt.handle)
        pop_codec.acked(await conn.request(req, timeout_s=self.api_timeout_s))

    async def change(
        self, group: str, topic: str, receipt: receipts.Receipt, invisible_ms: int
    ) -> receipts.Receipt:
        inst = self._started()
        conn = inst.connection(await self._addr(receipt.broker_name, topic))
        req = ChangeInvisibleTimeRequest(
            consumer_group=group,
            topic=topic,
            receipt_handle=receipt.handle,
            invisible_ms=invisible_ms,
        )
        reply = expect(
            await conn.request(req, timeout_s=self.api_timeout_s), ChangeInvisibleTimeReply
        )
        return receipts.Receipt(receipt.broker_name, reply.receipt_handle)


def poll_window(ask: delivery.ReceiveAsk, remaining_s: float | None) -> tuple[float, float]:
    """(long poll, reply timeout) in seconds, so that the answer beats the client's deadline."""
    poll_s = (ask.long_poll_ms or 0) / 1000
    if remaining_s is None:
        return poll_s, pop_codec.reply_timeout_s(poll_s, 3.0)
    budget = max(remaining_s - DEADLINE_MARGIN_S, 0.1)
    poll_s = min(poll_s, max(budget - DEADLINE_MARGIN_S, 0.0))
    return poll_s, budget


async def receive(popper: Popper, request: Pb, context: Any) -> AsyncIterator[Pb]:
    """The stream the client reads: its Status (OK, or MESSAGE_NOT_FOUND when nothing came),
    then the messages, then the delivery time."""
    ask = delivery.receive_ask(request)
    invisible = ask.invisible_ms or DEFAULT_INVISIBLE_MS
    poll_s, timeout_s = poll_window(ask, context.time_remaining())
    msgs: list[MessageExt] = []
    targets = await popper.targets(ask.topic, ask)
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout_s
    for target, await_s in pop_codec.receive_rounds(targets, 0, poll_s):
        left = end - loop.time()
        if left <= 0:
            break
        msgs = await popper.pop(target, ask, invisible, await_s, left)
        if msgs:
            break
    if not msgs:
        yield _receive_status(Code.MESSAGE_NOT_FOUND, "no new message")
        return
    yield _receive_status(Code.OK, "OK")
    topic = request.message_queue.topic
    for msg in msgs:
        yield service_pb.ReceiveMessageResponse(message=delivery.outbound(msg, topic, invisible))
    stamp = service_pb.ReceiveMessageResponse()
    stamp.delivery_timestamp.GetCurrentTime()
    yield stamp


def _receive_status(code: Code, message: str) -> Pb:
    return service_pb.ReceiveMessageResponse(status=status(code, message))


async def ack(popper: Popper, request: Pb) -> Pb:
    """Each entry acked on its broker; OK when all are, the one's Status for a single entry,
    MULTIPLE_RESULTS otherwise."""
    group = delivery.group_name(request.group)
    topic = delivery.checked_topic(request.topic)
    entries = list(request.entries)
    if not entries:
        raise ProxyError(Code.BAD_REQUEST, "AckMessage carries no entry")

    async def one(entry: Pb) -> tuple[Code, str]:
        try:
            await popper.ack(group, topic, receipts.decode(str(entry.receipt_handle)))
        except ProxyError as err:
            return err.code, err.message
        except FerryError as err:
            return status_of(err)
        return Code.OK, "OK"

    outcomes = await asyncio.gather(*(one(e) for e in entries))
    reply = service_pb.AckMessageResponse()
    for entry, (code, text) in zip(entries, outcomes, strict=True):
        reply.entries.add(
            message_id=entry.message_id,
            receipt_handle=entry.receipt_handle,
            status=status(code, text),
        )
    reply.status.CopyFrom(_overall(outcomes))
    return reply


def _overall(outcomes: Sequence[tuple[Code, str]]) -> Pb:
    if all(code is Code.OK for code, _ in outcomes):
        return status(Code.OK, "OK")
    if len(outcomes) == 1:
        return status(*outcomes[0])
    failed = sum(code is not Code.OK for code, _ in outcomes)
    return status(Code.MULTIPLE_RESULTS, f"{failed} of {len(outcomes)} acks failed")


async def change_invisible(popper: Popper, request: Pb) -> Pb:
    group = delivery.group_name(request.group)
    topic = delivery.checked_topic(request.topic)
    receipt = receipts.decode(str(request.receipt_handle))
    ms = delivery.invisible_ms(request.invisible_duration)
    renewed = await popper.change(group, topic, receipt, ms)
    return service_pb.ChangeInvisibleDurationResponse(
        status=status(Code.OK, "OK"), receipt_handle=receipts.encode(renewed)
    )


async def query_assignment(
    popper: Popper, request: Pb, where: tuple[str, int], accepted: Sequence[int]
) -> Pb:
    """One assignment per broker serving the topic, queue id -1: the push consumer receives
    on it and the broker pops from all of the topic's queues."""
    delivery.group_name(request.group)
    topic = delivery.checked_topic(request.topic)
    ask = delivery.ReceiveAsk("", topic, "", "*", 1, None, None)
    targets = await popper.targets(topic, ask)
    at = request.endpoints if len(request.endpoints.addresses) else endpoints(*where)
    reply = service_pb.QueryAssignmentResponse(status=status(Code.OK, "OK"))
    for target in targets:
        mq = definition.MessageQueue(id=-1, permission=int(Permission.READ_WRITE))
        mq.topic.CopyFrom(request.topic)
        mq.broker.name = target.broker_name
        mq.broker.id = 0
        mq.broker.endpoints.CopyFrom(at)
        mq.accept_message_types.extend(accepted)
        reply.assignments.add().message_queue.CopyFrom(mq)
    return reply
