"""The proxy's consumers: ReceiveMessage, AckMessage, ChangeInvisibleDuration,
ForwardMessageToDeadLetterQueue and QueryAssignment on Ferry's pop, with pop_codec's requests
and replies and one ferry.client.aio client instance (its routes and connections) for every
group.

The proxy keeps nothing per message but the handles it renews for push consumers (renew.py):
a receipt handle names the broker, Ferry's own handle and the message's CommitLog offset
(receipts.py). A receive always ends before the client's deadline: the long poll is cut to
what the deadline leaves, less a margin for the reply.

A group new to a queue starts where RocketMQ 5's proxy starts it: at the queue's end, unless
the queue's first message is still "in memory", so that a group made just after a topic's
first sends gets them (pop's init_mode POP_INIT_FRESH; remoting/pop.py says what Ferry takes
"in memory" to mean).

Retries: a push consumer's failure is a ChangeInvisibleDuration by the back-off of its
Settings; the message comes back (reconsume times + 1) when that passes, and Ferry's revive
service puts it in %DLQ%<group> once the group's retryMaxTimes are used up. A FIFO group's
(consumeMessageOrderly) pops are orderly (the broker's pop_order.py: nothing more from a queue
while a batch of it is in flight); its client retries a failure itself and then forwards it
to the DLQ (forward_to_dlq).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from ferry.client import pop_codec
from ferry.client.aio.instance import AsyncClientInstance
from ferry.client.message import MessageExt
from ferry.client.pop_codec import PopTarget
from ferry.client.transport import expect
from ferry.protocol.auth import Credentials
from ferry.protocol.errors import BrokerNotExistError, FerryError
from ferry.protocol.messages import (
    POP_INIT_FRESH,
    AckMessageRequest,
    AnyRequest,
    ChangeInvisibleTimeReply,
    ChangeInvisibleTimeRequest,
    ConsumerSendMsgBackRequest,
    GetAllSubscriptionGroupRequest,
    OkReply,
    SubscriptionGroupConfig,
    SubscriptionGroupListReply,
)
from ferry.proxy import delivery, receipts
from ferry.proxy.convert import endpoints
from ferry.proxy.errors import ProxyError, status_of
from ferry.proxy.protocol import Code, Pb, Permission, definition, status
from ferry.proxy.protocol import service as service_pb

if TYPE_CHECKING:
    from ferry.proxy.renew import Renewer

log = logging.getLogger("ferry.proxy.consuming")

# what a receive keeps of the client's deadline for the reply to reach it
DEADLINE_MARGIN_S = 1.0
# a receive that names none (the push consumer's), as RocketMQ's proxy; ProxyConfig's
# defaultInvisibleTimeMills sets it, and renew.py keeps such messages invisible
DEFAULT_INVISIBLE_MS = 60_000
MAX_RECONSUME_TIMES = -1  # the group's retryMaxTimes
# a forward to the DLQ holds the message this long while its copy is stored
FORWARD_HOLD_MS = 30_000


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
        """A pop (orderly for a FIFO group: its broker decides by the group's config)."""
        inst = self._started()
        req = pop_codec.pop_request(
            ask.group,
            target.topic,
            ask.expression,
            max_messages=ask.batch_size,
            invisible_s=invisible_ms / 1000,
            await_s=poll_s,
            from_first=False,
            max_reconsume_times=MAX_RECONSUME_TIMES,
            client_id=inst.client_id,
        )
        req = msgspec.structs.replace(req, init_mode=POP_INIT_FRESH)
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
        return receipts.Receipt(receipt.broker_name, reply.receipt_handle, receipt.phys_offset)

    async def send_back(
        self, group: str, topic: str, receipt: receipts.Receipt, message_id: str
    ) -> None:
        """The message of `receipt` copied to %DLQ%<group> (a send-back straight to the DLQ)."""
        if receipt.phys_offset < 0:
            raise ProxyError(Code.INVALID_RECEIPT_HANDLE, "the receipt handle names no message")
        inst = self._started()
        conn = inst.connection(await self._addr(receipt.broker_name, topic))
        req = ConsumerSendMsgBackRequest(
            consumer_group=group,
            phys_offset=receipt.phys_offset,
            origin_msg_id=message_id,
            origin_topic=topic,
            delay_level=-1,
        )
        expect(await conn.request(req, timeout_s=self.api_timeout_s), OkReply)

    async def sub_groups(self, topics: Sequence[str]) -> list[SubscriptionGroupConfig]:
        """The groups of the first master of `topics` that answers."""
        inst = self._started()
        failure: FerryError = BrokerNotExistError(f"no master serves {list(topics)}")
        for topic in topics:
            route = await inst.routes.ensure(topic)
            for addr in sorted(route.master_addrs.values()):
                try:
                    reply = await inst.connection(addr).request(
                        GetAllSubscriptionGroupRequest(), timeout_s=self.api_timeout_s
                    )
                    return expect(reply, SubscriptionGroupListReply).groups
                except FerryError as err:
                    failure = err
        raise failure


def poll_window(ask: delivery.ReceiveAsk, remaining_s: float | None) -> tuple[float, float]:
    """(long poll, reply timeout) in seconds, so that the answer beats the client's deadline."""
    poll_s = (ask.long_poll_ms or 0) / 1000
    if remaining_s is None:
        return poll_s, pop_codec.reply_timeout_s(poll_s, 3.0)
    budget = max(remaining_s - DEADLINE_MARGIN_S, 0.1)
    poll_s = min(poll_s, max(budget - DEADLINE_MARGIN_S, 0.0))
    return poll_s, budget


async def receive(
    popper: Popper, renewer: Renewer, request: Pb, context: Any, client_id: str
) -> AsyncIterator[Pb]:
    """The stream the client reads: its Status (OK, or MESSAGE_NOT_FOUND when nothing came),
    then the messages, then the delivery time. With auto_renew (a push consumer's), the
    messages are renewed until settled."""
    ask = delivery.receive_ask(request)
    renewer.heard(client_id)
    invisible = ask.invisible_ms or renewer.policy.invisible_ms
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
    renew = bool(request.auto_renew)
    for msg in msgs:
        out = delivery.outbound(msg, topic, invisible)
        if renew:
            given = str(out.system_properties.receipt_handle)
            renewer.hold(client_id, ask.group, ask.topic, given, invisible)
        yield service_pb.ReceiveMessageResponse(message=out)
    stamp = service_pb.ReceiveMessageResponse()
    stamp.delivery_timestamp.GetCurrentTime()
    yield stamp


def _receive_status(code: Code, message: str) -> Pb:
    return service_pb.ReceiveMessageResponse(status=status(code, message))


async def ack(popper: Popper, renewer: Renewer, request: Pb) -> Pb:
    """Each entry acked on its broker; OK when all are, the one's Status for a single entry,
    MULTIPLE_RESULTS otherwise."""
    group = delivery.group_name(request.group)
    topic = delivery.checked_topic(request.topic)
    entries = list(request.entries)
    if not entries:
        raise ProxyError(Code.BAD_REQUEST, "AckMessage carries no entry")

    async def one(entry: Pb) -> tuple[Code, str]:
        try:
            given = str(entry.receipt_handle)
            await renewer.settle(group, given, lambda r: popper.ack(group, topic, r))
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


async def change_invisible(popper: Popper, renewer: Renewer, request: Pb) -> Pb:
    """A push consumer's nack (its back-off as the invisible time) or a simple consumer's
    change; either ends the handle's renewal."""
    group = delivery.group_name(request.group)
    topic = delivery.checked_topic(request.topic)
    ms = delivery.invisible_ms(request.invisible_duration)
    given = str(request.receipt_handle)
    renewed = await renewer.settle(group, given, lambda r: popper.change(group, topic, r, ms))
    return service_pb.ChangeInvisibleDurationResponse(
        status=status(Code.OK, "OK"), receipt_handle=receipts.encode(renewed)
    )


async def forward_to_dlq(popper: Popper, renewer: Renewer, request: Pb) -> Pb:
    """A FIFO push consumer's message out of attempts: copied to %DLQ%<group> with its
    properties, then acked. The handle is proven the group's first (its invisible time
    changed, which the broker checks), so a client cannot have another message copied."""
    group = delivery.group_name(request.group)
    topic = delivery.checked_topic(request.topic)
    given = str(request.receipt_handle)

    async def forward(receipt: receipts.Receipt) -> None:
        held = await popper.change(group, topic, receipt, FORWARD_HOLD_MS)
        renewer.moved(group, given, held)
        await popper.send_back(group, topic, held, str(request.message_id))
        await popper.ack(group, topic, held)

    await renewer.settle(group, given, forward)
    return service_pb.ForwardMessageToDeadLetterQueueResponse(status=status(Code.OK, "OK"))


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
