"""What the sync and the asyncio SimpleConsumer share: their options, checked once, and the
rounds of a receive. Requests and replies are pop_codec's."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator, Mapping

from opentelemetry import trace

from ferry.client.instance import ClientBase, InstanceOptions
from ferry.client.message import ConsumeFromWhere
from ferry.client.message_selector import Expression
from ferry.client.pop_codec import PopSettings, PopTarget, check_subscription, receive_targets
from ferry.client.route import TopicRoute, parse_namesrv
from ferry.protocol.auth import Credentials
from ferry.protocol.messages import PopMessageRequest


class PopConsumerBase(InstanceOptions):
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
        self._lock = threading.Lock()  # the sync consumer's calls come from any thread
        self._turn = itertools.count()

    def _rounds(
        self,
        inst: ClientBase,
        subscriptions: Mapping[str, Expression],
        routes: Mapping[str, TopicRoute],
        max_messages: int,
        invisible_duration: float | None,
    ) -> Iterator[tuple[PopTarget, PopMessageRequest, float]]:
        """What one receive asks, in turn: (broker, request, reply timeout)."""
        return self.settings.rounds(
            receive_targets(self.group, subscriptions, routes),
            next(self._turn),
            max_messages=max_messages,
            invisible_duration=invisible_duration,
            client_id=inst.client_id,
            api_timeout_s=inst.api_timeout_s,
        )
