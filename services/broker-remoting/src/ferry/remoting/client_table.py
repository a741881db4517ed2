"""Live producers and consumers, as their heartbeats report them (RocketMQ's ProducerManager
and ConsumerManager in one table).

A heartbeat carries everything a client instance runs, so it replaces what the table knew of
that client. A client silent for 120 s (RocketMQ's channelExpiredTimeout) is dropped, which is
what makes a dead consumer's queues go to the others at the next rebalance. Every change says
which consumer groups gained or lost a member, so that their members can be told at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ferry.protocol.errors import InvalidParameterError
from ferry.protocol.messages import ConsumerData
from ferry.protocol.names import check_group

CLIENT_EXPIRE_MS = 120_000
MAX_CLIENT_ID_LENGTH = 255


@dataclass
class ClientInfo:
    client_id: str
    last_seen_ms: int
    producer_groups: frozenset[str] = frozenset()
    consumers: dict[str, ConsumerData] = field(default_factory=dict)  # by group
    # what the client says of itself (consumerConnection / producerConnection)
    client_addr: str = ""
    language: str = ""
    version: str = ""


class ClientTable:
    def __init__(self, expire_ms: int = CLIENT_EXPIRE_MS) -> None:
        self.expire_ms = expire_ms
        self._clients: dict[str, ClientInfo] = {}

    def __len__(self) -> int:
        return len(self._clients)

    def get(self, client_id: str) -> ClientInfo | None:
        return self._clients.get(client_id)

    def heartbeat(
        self,
        client_id: str,
        producer_groups: Iterable[str],
        consumers: Iterable[ConsumerData],
        now_ms: int,
        *,
        client_addr: str = "",
        language: str = "",
        version: str = "",
    ) -> set[str]:
        """Records what the client runs now; returns the consumer groups it joined or left."""
        if not client_id or len(client_id) > MAX_CLIENT_ID_LENGTH:
            raise InvalidParameterError(
                f"client id must be 1..{MAX_CLIENT_ID_LENGTH} characters long"
            )
        producers = frozenset(producer_groups)
        by_group = {c.group: c for c in consumers}
        for group in producers | by_group.keys():
            check_group(group)
        old = self._clients.get(client_id)
        before = set(old.consumers) if old is not None else set()
        self._clients[client_id] = ClientInfo(
            client_id, now_ms, producers, by_group, client_addr, language, version
        )
        return before ^ by_group.keys()

    def unregister(
        self, client_id: str, producer_group: str = "", consumer_group: str = ""
    ) -> set[str]:
        """Drops the named groups of a client, or the whole client when none is named; returns
        the consumer groups it left."""
        info = self._clients.get(client_id)
        if info is None:
            return set()
        if not producer_group and not consumer_group:
            del self._clients[client_id]
            return set(info.consumers)
        left: set[str] = set()
        if producer_group:
            info.producer_groups = info.producer_groups - {producer_group}
        if consumer_group and info.consumers.pop(consumer_group, None) is not None:
            left.add(consumer_group)
        if not info.producer_groups and not info.consumers:
            del self._clients[client_id]
        return left

    def expire(self, now_ms: int) -> list[str]:
        """Removes clients silent for longer than expire_ms; returns their ids."""
        return [info.client_id for info in self.drop_silent(now_ms)]

    def drop_silent(self, now_ms: int) -> list[ClientInfo]:
        """Removes clients silent for longer than expire_ms; returns what they ran."""
        gone = [
            info for info in self._clients.values() if now_ms - info.last_seen_ms > self.expire_ms
        ]
        for info in gone:
            del self._clients[info.client_id]
        return gone

    def consumer_ids(self, group: str) -> list[str]:
        """Live members of a consumer group, sorted as every client's rebalance expects."""
        return sorted(cid for cid, info in self._clients.items() if group in info.consumers)

    def producer_ids(self, group: str) -> list[str]:
        return sorted(cid for cid, info in self._clients.items() if group in info.producer_groups)

    def clients_of(self, *, consumer_group: str = "", producer_group: str = "") -> list[ClientInfo]:
        """Live clients running a consumer group or a producer group, by client id."""
        return [
            self._clients[cid]
            for cid in sorted(self._clients)
            if consumer_group in self._clients[cid].consumers
            or producer_group in self._clients[cid].producer_groups
        ]

    def producer_groups(self) -> list[str]:
        return sorted({group for info in self._clients.values() for group in info.producer_groups})

    def consumer_groups(self) -> set[str]:
        return {group for info in self._clients.values() for group in info.consumers}

    def groups_consuming(self, topic: str) -> set[str]:
        """Consumer groups with a live member subscribed to `topic`."""
        return {
            group
            for info in self._clients.values()
            for group, data in info.consumers.items()
            if any(sub.topic == topic for sub in data.subscriptions)
        }
