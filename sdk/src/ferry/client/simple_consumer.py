"""SimpleConsumer: RocketMQ 5's stateless pop consumer.

receive() pops messages from the brokers serving the subscribed topics: each message stays
invisible to the rest of the group for the invisible duration, and comes back (reconsume
times + 1, then to %DLQ%group after max_reconsume_times) unless ack()ed in that time;
change_invisible_duration() moves that deadline. There is no rebalancing: any number of
consumers of a group share every queue. Requests and replies are built and decoded in
pop_codec.py (shared with ferry.client.aio); this module only does the I/O.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import Future

from opentelemetry import trace

from ferry.client.heartbeats import send_heartbeat
from ferry.client.instance import ClientInstance, not_started
from ferry.client.lifecycle import Lifecycle
from ferry.client.message import ConsumeFromWhere, MessageExt, SendResult
from ferry.client.message_selector import Expression
from ferry.client.pop_codec import (
    PopSettings,
    ack_request,
    apply_change,
    batch_ack_errors,
    batch_ack_request,
    change_request,
    check_subscription,
    decode_pop_reply,
    heartbeat_request,
    no_target_error,
    receive_rounds,
    reply_timeout_s,
    route_targets,
)
from ferry.client.replier import send_reply
from ferry.client.route import parse_namesrv
from ferry.client.transport import Result, expect
from ferry.protocol.auth import Credentials
from ferry.protocol.errors import BrokerNotExistError, FerryError
from ferry.protocol.messages import (
    BatchAckMessageReply,
    ChangeInvisibleTimeReply,
    OkReply,
    PopMessageReply,
)

log = logging.getLogger("ferry.client.simple_consumer")


class SimpleConsumer(Lifecycle):
    """Thread-safe: receive, ack and change_invisible_duration may be called from any thread.
    Durations are in seconds."""

    def __init__(
        self,
        group: str,
        namesrv: str,
        subscriptions: Mapping[str, Expression] | None = None,
        *,
        await_duration: float = 20.0,
        invisible_duration: float = 60.0,
        consume_from: ConsumeFromWhere = ConsumeFromWhere.LAST_OFFSET,
        max_reconsume_times: int = 16,
        heartbeat_interval_ms: int = 30_000,
        tracer_provider: trace.TracerProvider | None = None,
        credentials: Credentials | None = None,
        tls_server_key: str | None = None,
    ) -> None:
        """subscriptions: topic -> tag expression ("*", "TagA || TagB") or MessageSelector
        (by_tag, or by_sql on a broker with enablePropertyFilter=true). consume_from
        applies to a queue the group has no offset for (FIRST_OFFSET or LAST_OFFSET)."""
        self.settings = PopSettings(
            group, await_duration, invisible_duration, consume_from, max_reconsume_times
        )
        parse_namesrv(namesrv)
        for topic, expression in (subscriptions or {}).items():
            check_subscription(topic, expression)
        self.group = group
        self.namesrv = namesrv
        self._subscriptions: dict[str, Expression] = dict(subscriptions or {})
        self._heartbeat_s = heartbeat_interval_ms / 1000
        self._tracer_provider = tracer_provider
        self._credentials = credentials
        self._tls_server_key = tls_server_key
        self._instance: ClientInstance | None = None
        self._lock = threading.Lock()
        self._turn = itertools.count()

    # ---- lifecycle ----

    def start(self) -> None:
        if self._instance is not None:
            return
        inst = ClientInstance(
            self.namesrv,
            role="consumer",
            tracer_provider=self._tracer_provider,
            credentials=self._credentials,
            tls_server_key=self._tls_server_key,
        )
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
        check_subscription(topic, expression)
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
        body = heartbeat_request(inst.client_id, self.group, subscriptions)
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
        targets = [
            target
            for topic, expression in sorted(subscriptions.items(), key=lambda kv: kv[0])
            for target in route_targets(topic, expression, inst.routes.get(topic))
        ]
        if not targets:
            raise no_target_error(self.group, subscriptions)
        settings = self.settings
        for target, await_s in receive_rounds(targets, next(self._turn), settings.await_duration):
            req = settings.request(
                target,
                max_messages=max_messages,
                invisible_duration=invisible_duration,
                await_s=await_s,
                client_id=inst.client_id,
            )
            timeout_s = reply_timeout_s(await_s, inst.api_timeout_s)
            reply, frames = inst.connection(target.addr).request(req, timeout_s=timeout_s)
            decoded = decode_pop_reply(
                expect((reply, frames), PopMessageReply), frames, target.broker_name
            )
            if decoded:
                return decoded
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
        req = ack_request(self.group, msg)
        conn = inst.connection(self._addr_of(inst, msg))
        result = conn.request(req, timeout_s=inst.api_timeout_s)
        expect(result, OkReply)

    def reply(
        self,
        request: MessageExt,
        body: bytes | bytearray | memoryview | str,
        properties: Mapping[str, str] | None = None,
        timeout_ms: int = 3000,
    ) -> SendResult:
        """Answers a message sent with Producer.request, as the other consumers' reply()."""
        inst = self._started()
        return send_reply(inst, self.group, request, body, properties, timeout_ms / 1000)

    def ack_batch(self, msgs: Sequence[MessageExt]) -> list[FerryError | None]:
        """Acks many messages, one request per broker; per message, None when acked or the
        typed error (InvalidReceiptHandleError) that ack() would have raised."""
        inst = self._started()
        by_broker: dict[str, list[int]] = {}
        for i, msg in enumerate(msgs):
            by_broker.setdefault(self._addr_of(inst, msg), []).append(i)
        out: list[FerryError | None] = [None] * len(msgs)
        for addr, indexes in by_broker.items():
            req = batch_ack_request(self.group, [msgs[i] for i in indexes])
            result = inst.connection(addr).request(req, timeout_s=inst.api_timeout_s)
            errors = batch_ack_errors(expect(result, BatchAckMessageReply))
            for i, err in zip(indexes, errors, strict=True):
                out[i] = err
        return out

    def ack_async(self, msg: MessageExt) -> Future[None]:
        """ack() without waiting: the Future holds None or the typed error. Acks sent
        together are stored together by the broker (one revive log write)."""
        inst = self._started()
        req = ack_request(self.group, msg)
        sent = inst.connection(self._addr_of(inst, msg)).submit(req, timeout_s=inst.api_timeout_s)
        out: Future[None] = Future()

        def done(f: Future[Result]) -> None:
            try:
                expect(f.result(), OkReply)
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
        req = change_request(self.group, msg, duration)
        conn = inst.connection(self._addr_of(inst, msg))
        result = conn.request(req, timeout_s=inst.api_timeout_s)
        apply_change(msg, expect(result, ChangeInvisibleTimeReply))
