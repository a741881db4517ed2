"""GroupConsumer: what the pull and push consumers share as members of a consumer group: their
settings, the puller start() builds, unsubscribing, the heartbeat to one broker, leaving the
group and the offset reset notice."""

from __future__ import annotations

import threading
import time
from abc import abstractmethod
from collections.abc import Iterable, Mapping

import msgspec
from opentelemetry import trace

from ferry.client.allocate import check_strategy
from ferry.client.heartbeats import heartbeat_checked, masters_serving, send_heartbeat, unregister
from ferry.client.instance import ClientInstance, InstanceOptions, not_started
from ferry.client.lifecycle import Lifecycle
from ferry.client.message import ConsumeFromWhere, Message, MessageModel, SendResult
from ferry.client.message_selector import Expression, as_selector, is_sql, subscription_data
from ferry.client.offset_reset import on_reset_notice
from ferry.client.offset_store import LocalOffsetStore, open_local_store
from ferry.client.pull_engine import PullConfig, PullSink
from ferry.client.puller import Puller
from ferry.client.replier import ReplySend, send_reply
from ferry.client.route import parse_namesrv
from ferry.protocol.auth import Credentials
from ferry.protocol.errors import FerryError
from ferry.protocol.messages import (
    AnyReply,
    ConsumerData,
    HeartbeatRequest,
    UnregisterClientRequest,
)
from ferry.protocol.names import check_group, check_topic

DEFAULT_TIMESTAMP_AGO_MS = 30 * 60_000  # CONSUME_FROM_TIMESTAMP default: half an hour ago


class GroupConsumer(InstanceOptions, Lifecycle):
    def __init__(
        self,
        group: str,
        namesrv: str,
        consume_from: ConsumeFromWhere,
        allocate: str,
        *,
        pull_batch_size: int,
        suspend_ms: int,
        consume_timestamp_ms: int | None,
        instance_name: str,
        offset_store_dir: str | None,
        tracer_provider: trace.TracerProvider | None,
        credentials: Credentials | None,
        tls_server_key: str | None = None,
    ) -> None:
        check_group(group)
        parse_namesrv(namesrv)
        check_strategy(allocate)
        self.group = group
        self.namesrv = namesrv
        self.consume_from = consume_from
        self.allocate = allocate
        self._pull_batch_size = pull_batch_size
        self._suspend_ms = suspend_ms
        self._timestamp_ms = consume_timestamp_ms
        self._instance_name = instance_name
        self._offset_dir = offset_store_dir
        self._tracer_provider = tracer_provider
        self._credentials = credentials
        self._tls_server_key = tls_server_key
        self._lock = threading.Lock()
        self._rebalance_lock = threading.Lock()
        self._subscriptions: dict[str, Expression] = {}
        self._instance: ClientInstance | None = None
        self._puller: Puller | None = None

    def _new_instance(self) -> ClientInstance:
        """What start() builds: a consumer's connections, routes and timer thread."""
        return self._open_instance(ClientInstance, "consumer")

    @property
    @abstractmethod
    def _model(self) -> MessageModel: ...

    @abstractmethod
    def _changed(self) -> None:
        """The subscriptions changed: after start, brokers and the assignment hear of it."""

    @abstractmethod
    def _consumer_data(self) -> ConsumerData: ...

    def reply(
        self,
        request: Message,
        body: bytes | bytearray | memoryview | str,
        properties: Mapping[str, str] | None = None,
        timeout_ms: int = 3000,
    ) -> SendResult:
        """Answers a message sent with Producer.request: the reply goes back to the
        requester (replier.py). Callable from a push listener or after a poll."""
        inst = self._instance
        if inst is None:
            raise not_started(f"consumer {self.group}")
        return send_reply(
            inst, ReplySend(inst, self.group, request, body, properties, timeout_ms / 1000)
        )

    def _subscribe(self, topic: str, expression: Expression) -> None:
        """Adds (or replaces) a subscription; after start, an SQL92 one is first shown to the
        brokers serving the topic, and raises if one refuses it (see _check_sql)."""
        check_topic(topic)
        selector = as_selector(expression)
        inst = self._instance
        if inst is not None and selector.is_sql:
            self._check_sql(inst, {topic: selector})
        with self._lock:
            self._subscriptions[topic] = selector if selector.is_sql else selector.expression
        self._changed()

    def _check_sql(
        self, inst: ClientInstance, extra: Mapping[str, Expression] | None = None
    ) -> None:
        """RocketMQ's checkClientInBroker: the group's subscriptions (with `extra`), when one
        is SQL92, go in a heartbeat to the brokers serving the SQL92 topics, and a refusal
        (enablePropertyFilter=false, a filter the broker cannot parse) raises here, instead
        of leaving the consumer registered nowhere. Topics with no route yet are left to
        their first pulls, which the broker refuses the same way."""
        with self._lock:
            subs = {**self._subscriptions, **(extra or {})}
        topics = [t for t, e in subs.items() if is_sql(e)]
        if not topics:
            return
        for topic in topics:
            try:
                inst.routes.get(topic)
            except FerryError:
                continue
        data = self._consumer_data()
        data = msgspec.structs.replace(
            data,
            subscriptions=[s for s in data.subscriptions if s.topic not in subs]
            + [subscription_data(t, e) for t, e in sorted(subs.items())],
        )
        body = HeartbeatRequest(client_id=inst.client_id, consumers=[data])
        heartbeat_checked(inst, masters_serving(inst, topics), body)

    def unsubscribe(self, topic: str) -> None:
        with self._lock:
            self._subscriptions.pop(topic, None)
        self._changed()

    def _new_puller(
        self,
        inst: ClientInstance,
        sink: PullSink,
        cond: threading.Condition,
        *,
        piggyback_commit: bool = False,
    ) -> Puller:
        local: LocalOffsetStore | None = None
        if self._model is MessageModel.BROADCASTING:
            local = open_local_store(self._offset_dir, inst.ip, self._instance_name, self.group)
        timestamp = self._timestamp_ms
        if timestamp is None:
            timestamp = int(time.time() * 1000) - DEFAULT_TIMESTAMP_AGO_MS
        config = PullConfig(
            self.group,
            self.consume_from,
            self._pull_batch_size,
            self._suspend_ms,
            timestamp,
            piggyback_commit=piggyback_commit,
        )
        return Puller(inst, config, sink, cond, local)

    def _heartbeat_to(self, addr: str) -> None:
        inst = self._instance
        if inst is None:
            return
        body = HeartbeatRequest(client_id=inst.client_id, consumers=[self._consumer_data()])
        send_heartbeat(inst, addr, body)

    def _leave(self, inst: ClientInstance, addrs: Iterable[str]) -> None:
        body = UnregisterClientRequest(client_id=inst.client_id, consumer_group=self.group)
        unregister(inst, body, addrs)

    def _on_reset(self, body: AnyReply) -> bool:
        """An admin reset the group's offsets: the puller goes on from them."""
        inst, puller = self._instance, self._puller
        return (
            inst is not None
            and puller is not None
            and on_reset_notice(inst, self.group, puller, body)
        )
