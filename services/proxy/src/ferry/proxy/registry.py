"""A gRPC consumer made known to Ferry's brokers, so that consumerConnection shows it: the
Heartbeat of a PUSH_CONSUMER or SIMPLE_CONSUMER becomes a Ferry heartbeat of a POP consumer
with the gRPC client's id, and NotifyClientTermination unregisters it.

A gRPC Heartbeat names only the group; the subscriptions come from the client's Settings on
its Telemetry stream, kept here by client id while the stream is open (what this proxy knows
of a client it serves now; another proxy learns it from the same client's own stream)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ferry.client.message_selector import Expression
from ferry.client.pop_codec import heartbeat_request
from ferry.protocol.errors import FerryError
from ferry.protocol.messages import HeartbeatRequest, UnregisterClientRequest
from ferry.proxy import delivery
from ferry.proxy.consuming import Popper
from ferry.proxy.errors import ProxyError
from ferry.proxy.protocol import ClientType, Pb

log = logging.getLogger("ferry.proxy.registry")

CONSUMER_TYPES = frozenset({ClientType.PUSH_CONSUMER, ClientType.SIMPLE_CONSUMER})
MAX_CLIENTS = 10_000
LANGUAGES = {1: "JAVA", 2: "CPP", 3: "DOTNET", 4: "GOLANG", 5: "RUST", 6: "PYTHON"}


@dataclass(frozen=True)
class ConsumerSettings:
    group: str
    subscriptions: dict[str, Expression]
    language: str
    version: str


def consumer_settings(settings: Pb) -> ConsumerSettings | None:
    """A consumer's Settings read (None for a producer's, or ones naming no valid group)."""
    if settings.WhichOneof("pub_sub") != "subscription":
        return None
    sub = settings.subscription
    try:
        group = delivery.group_name(sub.group)
        subscriptions = {
            delivery.checked_topic(e.topic): delivery.expression(e.expression)
            for e in sub.subscriptions
        }
    except ProxyError as err:
        log.info("consumer settings not kept: %s", err.message)
        return None
    ua = settings.user_agent
    return ConsumerSettings(
        group, subscriptions, LANGUAGES.get(int(ua.language), "OTHER"), str(ua.version)
    )


class ConsumerRegistry:
    def __init__(self, popper: Popper) -> None:
        self._popper = popper
        self._by_client: dict[str, ConsumerSettings] = {}

    def settings_seen(self, client_id: str, settings: Pb) -> None:
        found = consumer_settings(settings)
        if found is None:
            return
        if client_id not in self._by_client and len(self._by_client) >= MAX_CLIENTS:
            self._by_client.pop(next(iter(self._by_client)))  # the oldest goes
        self._by_client[client_id] = found

    def stream_closed(self, client_id: str) -> None:
        self._by_client.pop(client_id, None)

    async def heartbeat(self, client_id: str, group: str, client_addr: str) -> None:
        """A Ferry heartbeat for the client's group to the masters of its topics (nothing
        when its Settings are not known here yet: the next beat, 10 s on, tries again)."""
        known = self._by_client.get(client_id)
        if known is None or known.group != group:
            return
        body = heartbeat_request(client_id, group, known.subscriptions)
        body = HeartbeatRequest(
            client_id=body.client_id,
            consumers=body.consumers,
            client_addr=client_addr,
            language=known.language,
            version=known.version,
        )
        await self._popper.to_masters(body, list(known.subscriptions))

    async def terminated(self, client_id: str, group: str) -> None:
        known = self._by_client.pop(client_id, None)
        if known is None or known.group != group:
            return
        body = UnregisterClientRequest(client_id=client_id, consumer_group=group)
        try:
            await self._popper.to_masters(body, list(known.subscriptions))
        except FerryError as err:
            log.info("unregistering %s of %s: %s", client_id, group, err)
