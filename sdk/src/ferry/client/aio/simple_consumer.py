"""SimpleConsumer for asyncio: RocketMQ 5's pop consumption (see ferry.client.SimpleConsumer).

Requests and replies are pop_codec's, shared with the sync consumer; only the waiting is
asyncio's. A receive cancelled while it long-polls leaves nothing pending on this side; the
broker may still have popped messages for it, which come back after their invisible time.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Self

from ferry.client import pop_codec
from ferry.client.aio.instance import AsyncClientInstance
from ferry.client.aio.replier import send_reply
from ferry.client.heartbeats import stamped
from ferry.client.instance import not_started
from ferry.client.message import MessageExt, SendResult
from ferry.client.message_selector import Expression
from ferry.client.pop_consumer import PopConsumerBase
from ferry.client.replier import ReplySend
from ferry.protocol.errors import BrokerNotExistError, FerryError

log = logging.getLogger("ferry.client.aio.simple_consumer")


class SimpleConsumer(PopConsumerBase):
    """Durations in seconds, as the sync SimpleConsumer's; options: see PopConsumerBase."""

    _instance: AsyncClientInstance | None = None

    @property
    def subscriptions(self) -> dict[str, Expression]:
        """The subscriptions themselves (not a copy: one loop uses them)."""
        return self._subscriptions

    async def start(self) -> None:
        if self._instance is not None:
            return
        self._instance = self._open_instance(AsyncClientInstance, "consumer")
        await self.heartbeat()
        self._instance.every(self._heartbeat_s, self.heartbeat)

    async def shutdown(self) -> None:
        inst, self._instance = self._instance, None
        if inst is not None:
            await inst.close()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.shutdown()

    def _started(self) -> AsyncClientInstance:
        if self._instance is None:
            raise not_started(f"simple consumer {self.group}")
        return self._instance

    async def subscribe(self, topic: str, expression: Expression = "*") -> None:
        pop_codec.check_subscription(topic, expression)
        self.subscriptions[topic] = expression
        await self.heartbeat()

    def unsubscribe(self, topic: str) -> None:
        self.subscriptions.pop(topic, None)

    async def heartbeat(self) -> None:
        """Makes the group (a POP consumer) and its subscriptions known to the brokers."""
        inst = self._instance
        if inst is None:
            return
        body = pop_codec.heartbeat_request(inst.client_id, self.group, self.subscriptions)
        addrs: set[str] = set()
        for topic in list(self.subscriptions):
            try:
                addrs.update((await inst.routes.ensure(topic)).master_addrs.values())
            except FerryError as err:  # no route yet: the next beat tries again
                log.debug("no route for %s yet: %s", topic, err)
        for addr in sorted(addrs):
            try:
                await inst.connection(addr).request(
                    stamped(body, inst), timeout_s=inst.api_timeout_s
                )
            except FerryError as err:
                log.debug("heartbeat to %s failed: %s", addr, err)

    async def receive(
        self, max_messages: int = 32, invisible_duration: float | None = None
    ) -> list[MessageExt]:
        """Up to max_messages messages, waiting up to await_duration for the first ones; []
        when none came. Each stays invisible to the group for invisible_duration."""
        inst = self._started()
        subscriptions = dict(self.subscriptions)  # a subscribe may come while routes are fetched
        routes = {topic: await inst.routes.ensure(topic) for topic in sorted(subscriptions)}
        rounds = self._rounds(inst, subscriptions, routes, max_messages, invisible_duration)
        for target, req, timeout_s in rounds:
            result = await inst.connection(target.addr).request(req, timeout_s=timeout_s)
            msgs = pop_codec.popped(result, target.broker_name)
            if msgs:
                return msgs
        return []

    async def _addr_of(self, msg: MessageExt) -> str:
        routes = self._started().routes
        addr = routes.addr_of(msg.broker_name)
        if addr is None:
            await routes.fetch_route(msg.topic)
            addr = routes.addr_of(msg.broker_name)
        if addr is None:
            raise BrokerNotExistError(f"no address for broker {msg.broker_name!r}")
        return addr

    async def reply(
        self,
        request: MessageExt,
        body: bytes | bytearray | memoryview | str,
        properties: Mapping[str, str] | None = None,
        timeout_ms: int = 3000,
    ) -> SendResult:
        """Answers a message sent with Producer.request, as the sync consumers' reply()."""
        inst = self._started()
        return await send_reply(
            inst, ReplySend(inst, self.group, request, body, properties, timeout_ms / 1000)
        )

    async def ack(self, msg: MessageExt) -> None:
        """The message is consumed; InvalidReceiptHandleError when its handle is stale."""
        inst = self._started()
        conn = inst.connection(await self._addr_of(msg))
        req = pop_codec.ack_request(self.group, msg)
        pop_codec.acked(await conn.request(req, timeout_s=inst.api_timeout_s))

    async def ack_batch(self, msgs: Sequence[MessageExt]) -> list[FerryError | None]:
        """One request per broker; per message None, or the error ack() would raise."""
        inst = self._started()
        by_addr: dict[str, list[int]] = {}
        for i, msg in enumerate(msgs):
            by_addr.setdefault(await self._addr_of(msg), []).append(i)
        out: list[FerryError | None] = [None] * len(msgs)
        for addr, indexes in by_addr.items():
            req = pop_codec.batch_ack_request(self.group, [msgs[i] for i in indexes])
            result = await inst.connection(addr).request(req, timeout_s=inst.api_timeout_s)
            for i, err in zip(indexes, pop_codec.batch_acked(result), strict=True):
                out[i] = err
        return out

    async def change_invisible_duration(self, msg: MessageExt, duration: float) -> None:
        """The message stays invisible `duration` s from now; its receipt handle is renewed."""
        inst = self._started()
        conn = inst.connection(await self._addr_of(msg))
        req = pop_codec.change_request(self.group, msg, duration)
        pop_codec.changed(msg, await conn.request(req, timeout_s=inst.api_timeout_s))
