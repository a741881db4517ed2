"""SimpleConsumer: RocketMQ 5's stateless pop consumer.

receive() pops messages from the brokers serving the subscribed topics: each message stays
invisible to the rest of the group for the invisible duration, and comes back (reconsume
times + 1, then to %DLQ%group after max_reconsume_times) unless ack()ed in that time;
change_invisible_duration() moves that deadline. There is no rebalancing: any number of
consumers of a group share every queue. Requests and replies are built and decoded in
pop_codec.py (shared with ferry.client.aio); this module only does the I/O.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import Future

from ferry.client import pop_codec
from ferry.client.heartbeats import send_heartbeat
from ferry.client.instance import ClientInstance, not_started
from ferry.client.lifecycle import Lifecycle
from ferry.client.message import MessageExt, SendResult
from ferry.client.message_selector import Expression
from ferry.client.pop_consumer import PopConsumerBase
from ferry.client.replier import ReplySend, send_reply
from ferry.client.transport import Result
from ferry.protocol.errors import BrokerNotExistError, FerryError

log = logging.getLogger("ferry.client.simple_consumer")


class SimpleConsumer(PopConsumerBase, Lifecycle):
    """Thread-safe: receive, ack and change_invisible_duration may be called from any thread.
    Durations are in seconds. Options: see PopConsumerBase."""

    _instance: ClientInstance | None = None

    # ---- lifecycle ----

    def start(self) -> None:
        if self._instance is not None:
            return
        inst = self._open_instance(ClientInstance, "consumer")
        self._instance = inst
        self.heartbeat()
        inst.ticker.every(self._heartbeat_s, self.heartbeat)

    def shutdown(self) -> None:
        inst, self._instance = self._instance, None
        if inst is not None:
            inst.close()

    def _started(self) -> ClientInstance:
        inst = self._instance
        if inst is None:
            raise not_started(f"simple consumer {self.group}")
        return inst

    # ---- subscriptions ----

    def subscribe(self, topic: str, expression: Expression = "*") -> None:
        pop_codec.check_subscription(topic, expression)
        with self._lock:
            self._subscriptions[topic] = expression
        self.heartbeat()

    def unsubscribe(self, topic: str) -> None:
        with self._lock:
            self._subscriptions.pop(topic, None)

    @property
    def subscriptions(self) -> dict[str, Expression]:
        with self._lock:
            return dict(self._subscriptions)

    def heartbeat(self) -> None:
        """Makes the group and its subscriptions known to the brokers (consumerConnection)."""
        inst = self._instance
        if inst is None:
            return
        subscriptions = self.subscriptions
        body = pop_codec.heartbeat_request(inst.client_id, self.group, subscriptions)
        for topic in subscriptions:
            try:
                addrs = inst.routes.get(topic).master_addrs.values()
            except FerryError as exc:  # no route yet: the next beat tries again
                log.debug("no route for %s yet: %s", topic, exc)
                continue
            for addr in addrs:
                send_heartbeat(inst, addr, body)

    # ---- receive, ack, change ----

    def receive(
        self, max_messages: int = 32, invisible_duration: float | None = None
    ) -> list[MessageExt]:
        """Up to max_messages messages, waiting up to await_duration for the first ones;
        [] when none came. Each is invisible to the group for invisible_duration (default:
        the consumer's)."""
        inst = self._started()
        subscriptions = self.subscriptions
        routes = {topic: inst.routes.get(topic) for topic in sorted(subscriptions)}
        rounds = self._rounds(inst, subscriptions, routes, max_messages, invisible_duration)
        for target, req, timeout_s in rounds:
            result = inst.connection(target.addr).request(req, timeout_s=timeout_s)
            msgs = pop_codec.popped(result, target.broker_name)
            if msgs:
                return msgs
        return []

    def _addr_of(self, inst: ClientInstance, msg: MessageExt) -> str:
        addr = inst.routes.addr_of(msg.broker_name)
        if addr is None:
            inst.routes.get(msg.topic)
            addr = inst.routes.addr_of(msg.broker_name)
        if addr is None:
            raise BrokerNotExistError(f"no address for broker {msg.broker_name!r}")
        return addr

    def ack(self, msg: MessageExt) -> None:
        """The message is consumed: it will not come back. InvalidReceiptHandleError when its
        invisible time passed (it comes back) or it was acked already."""
        inst = self._started()
        req = pop_codec.ack_request(self.group, msg)
        conn = inst.connection(self._addr_of(inst, msg))
        pop_codec.acked(conn.request(req, timeout_s=inst.api_timeout_s))

    def reply(
        self,
        request: MessageExt,
        body: bytes | bytearray | memoryview | str,
        properties: Mapping[str, str] | None = None,
        timeout_ms: int = 3000,
    ) -> SendResult:
        """Answers a message sent with Producer.request, as the other consumers' reply()."""
        inst = self._started()
        return send_reply(
            inst, ReplySend(inst, self.group, request, body, properties, timeout_ms / 1000)
        )

    def ack_batch(self, msgs: Sequence[MessageExt]) -> list[FerryError | None]:
        """Acks many messages, one request per broker; per message, None when acked or the
        typed error (InvalidReceiptHandleError) that ack() would have raised."""
        inst = self._started()
        by_broker: dict[str, list[int]] = {}
        for i, msg in enumerate(msgs):
            by_broker.setdefault(self._addr_of(inst, msg), []).append(i)
        out: list[FerryError | None] = [None] * len(msgs)
        for addr, indexes in by_broker.items():
            req = pop_codec.batch_ack_request(self.group, [msgs[i] for i in indexes])
            result = inst.connection(addr).request(req, timeout_s=inst.api_timeout_s)
            for i, err in zip(indexes, pop_codec.batch_acked(result), strict=True):
                out[i] = err
        return out

    def ack_async(self, msg: MessageExt) -> Future[None]:
        """ack() without waiting: the Future holds None or the typed error. Acks sent
        together are stored together by the broker (one revive log write)."""
        inst = self._started()
        req = pop_codec.ack_request(self.group, msg)
        sent = inst.connection(self._addr_of(inst, msg)).submit(req, timeout_s=inst.api_timeout_s)
        out: Future[None] = Future()

        def done(f: Future[Result]) -> None:
            try:
                pop_codec.acked(f.result())
            except FerryError as err:
                out.set_exception(err)
            else:
                out.set_result(None)

        sent.add_done_callback(done)
        return out

    def change_invisible_duration(self, msg: MessageExt, duration: float) -> None:
        """The message stays invisible for `duration` s from now (longer or shorter); its
        receipt handle is replaced by the new one."""
        inst = self._started()
        req = pop_codec.change_request(self.group, msg, duration)
        conn = inst.connection(self._addr_of(inst, msg))
        pop_codec.changed(msg, conn.request(req, timeout_s=inst.api_timeout_s))
