"""Group coordination as consumers see it: who is in the group (asked of a broker serving the
topic, which knows every member from their heartbeats), and the queue locks orderly consumers
hold on the brokers (LOCK_BATCH_MQ / UNLOCK_BATCH_MQ)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from typing import NamedTuple

from ferry.client.allocate import allocate
from ferry.client.instance import ClientInstance
from ferry.client.message import MessageQueue
from ferry.client.message_selector import Expression
from ferry.client.route import TopicRoute
from ferry.client.transport import Result, expect, wait
from ferry.protocol.errors import SECURITY_REFUSALS, BrokerNotExistError, FerryError
from ferry.protocol.messages import (
    ConsumerListReply,
    GetConsumerListByGroupRequest,
    LockBatchReply,
    LockBatchRequest,
    OffsetEntry,
    UnlockBatchRequest,
)

log = logging.getLogger("ferry.client.rebalance")


def consumer_ids(inst: ClientInstance, group: str, route: TopicRoute) -> list[str] | None:
    """The group's live members, sorted, from the first broker of the route that answers;
    None when none does (the caller keeps its current queues)."""
    for name in sorted(route.broker_addrs):
        addr = route.master_of(name) or route.read_addr_of(name)
        if addr is None:
            continue
        body = GetConsumerListByGroupRequest(consumer_group=group)
        try:
            result = inst.connection(addr).request(body, timeout_s=inst.api_timeout_s)
            return sorted(expect(result, ConsumerListReply).client_ids)
        except SECURITY_REFUSALS as err:
            # the cluster's security refuses this consumer: it would consume nothing, silently
            _refused_once(group, addr, err)
        except FerryError as err:
            log.info("members of %s not known from %s: %s", group, addr, err)
    return None


_said: set[tuple[str, str, int]] = set()


def _refused_once(group: str, addr: str, err: FerryError) -> None:
    key = (group, addr, err.code)
    if key not in _said:
        _said.add(key)
        log.warning("group %s gets no queues from %s: %s", group, addr, err)


def by_broker(queues: Iterable[MessageQueue]) -> dict[str, list[MessageQueue]]:
    out: dict[str, list[MessageQueue]] = {}
    for queue in queues:
        out.setdefault(queue.broker_name, []).append(queue)
    return out


def _entries(queues: list[MessageQueue]) -> list[OffsetEntry]:
    return [OffsetEntry(q.topic, q.queue_id, 0) for q in queues]


def lock_queues(
    inst: ClientInstance, group: str, queues: Iterable[MessageQueue]
) -> set[MessageQueue]:
    """Locks (or renews) the queues on their brokers; returns those this client holds."""
    sent: list[tuple[str, Future[Result]]] = []
    for broker, mine in by_broker(queues).items():
        addr = inst.routes.addr_of(broker)
        if addr is None:
            log.info("cannot lock queues of %s: %s", broker, BrokerNotExistError(broker))
            continue
        body = LockBatchRequest(group, inst.client_id, _entries(mine))
        sent.append((broker, inst.connection(addr).submit(body, timeout_s=inst.api_timeout_s)))
    locked: set[MessageQueue] = set()
    for broker, future in sent:
        try:
            reply = expect(wait(future, inst.api_timeout_s), LockBatchReply)
        except FerryError as err:
            log.info("locking queues of %s on %s failed: %s", group, broker, err)
            continue
        locked.update(MessageQueue(e.topic, broker, e.queue_id) for e in reply.locked)
    return locked


def unlock_queues(inst: ClientInstance, group: str, queues: Iterable[MessageQueue]) -> None:
    """Releases the locks, so another member can take the queues at once."""
    sent: list[Future[Result]] = []
    for broker, mine in by_broker(queues).items():
        addr = inst.routes.addr_of(broker)
        if addr is not None:
            body = UnlockBatchRequest(group, inst.client_id, _entries(mine))
            sent.append(inst.connection(addr).submit(body, timeout_s=inst.api_timeout_s))
    for future in sent:
        try:
            wait(future, inst.api_timeout_s)
        except FerryError as err:
            log.info("unlocking queues of %s failed (they expire): %s", group, err)


class Assignment(NamedTuple):
    """What a rebalance wants: queue -> expression; topics whose queues stay as they are
    (no route or no member list yet); whether to try again soon."""

    wanted: dict[MessageQueue, Expression]
    keep_topics: set[str]
    retry_soon: bool


def assignment(
    inst: ClientInstance,
    group: str,
    subscriptions: Mapping[str, Expression],
    *,
    broadcasting: bool,
    strategy: str,
) -> Assignment:
    """The queues this member should consume now (may block: routes, member lists)."""
    wanted: dict[MessageQueue, Expression] = {}
    keep: set[str] = set()
    retry_soon = False
    for topic, expression in subscriptions.items():
        try:
            route = inst.routes.get(topic)
        except FerryError as err:
            log.info("no route for subscribed topic %s yet: %s", topic, err)
            keep.add(topic)
            retry_soon = True
            continue
        if broadcasting:
            mine = list(route.read_queues)
        else:
            ids = consumer_ids(inst, group, route)
            if ids is None or inst.client_id not in ids:
                # our heartbeat has not reached the broker yet, or it is unreachable
                if ids is None or len(route.master_addrs) < len(route.broker_addrs):
                    # a failover: only a route fetched again names the new master, and our
                    # heartbeat goes to it as soon as one does (cached, the route would be
                    # asked again only at the next poll of the name servers)
                    inst.routes.invalidate(topic)
                keep.add(topic)
                retry_soon = True
                continue
            mine = allocate(strategy, inst.client_id, ids, route.read_queues)
        for queue in mine:
            wanted[queue] = expression
    return Assignment(wanted, keep, retry_soon)
