"""Where a producer sends: write queues of a topic, round robin, broker avoidance (the broker
that just failed, and with latency fault avoidance the brokers it isolates), orderly selection,
and RocketMQ's auto-creation path through the TBW102 route for unknown topics."""

from __future__ import annotations

import itertools
import threading
import time
import zlib
from dataclasses import dataclass
from typing import Any

from ferry.client.latency_fault import LatencyFaultTolerance
from ferry.client.message import Message, MessageQueue
from ferry.client.route import RouteTable, TopicRoute
from ferry.client.selector import Selector, choose
from ferry.protocol.errors import (
    BrokerNotExistError,
    InvalidParameterError,
    NoPermissionError,
    TopicNotExistError,
)
from ferry.protocol.names import AUTO_CREATE_TOPIC_KEY

# How long a TBW102-derived route is reused before the name server is asked again: the name
# server learns a new topic at the broker's next registration.
FALLBACK_TTL_S = 1.0


@dataclass(frozen=True, slots=True)
class Target:
    queue: MessageQueue
    address: str
    default_topic: str  # "TBW102" when the broker should create the topic


def orderly_index(sharding_key: str | bytes, count: int) -> int:
    """The same key picks the same queue in every process (crc32, not the salted hash())."""
    raw = sharding_key.encode() if isinstance(sharding_key, str) else sharding_key
    return zlib.crc32(raw) % count


def select_round_robin(
    queues: tuple[MessageQueue, ...], start: int, avoid_broker: str | None
) -> MessageQueue:
    """The next queue from `start`, skipping `avoid_broker` while another broker exists."""
    count = len(queues)
    if avoid_broker is not None:
        for i in range(count):
            queue = queues[(start + i) % count]
            if queue.broker_name != avoid_broker:
                return queue
    return queues[start % count]


def select_available(
    queues: tuple[MessageQueue, ...],
    start: int,
    avoid_broker: str | None,
    faults: LatencyFaultTolerance,
) -> MessageQueue:
    """Round robin from `start` over queues of available brokers other than `avoid_broker`;
    then any available broker; then the broker usable soonest (MQFaultStrategy's order)."""
    count = len(queues)
    for skip_avoided in (True, False):
        for i in range(count):
            queue = queues[(start + i) % count]
            if skip_avoided and queue.broker_name == avoid_broker:
                continue
            if faults.available(queue.broker_name):
                return queue
    soonest = faults.least_bad({q.broker_name for q in queues if q.broker_name != avoid_broker})
    if soonest is None:
        return queues[start % count]
    return next(q for q in queues[start % count :] + queues if q.broker_name == soonest)


def no_route_error(topic: str) -> TopicNotExistError:
    """A send to a topic no broker serves, where none may create it either."""
    return TopicNotExistError(
        f"topic {topic!r} does not exist and no broker allows auto-creation "
        f"({AUTO_CREATE_TOPIC_KEY} has no route)",
        retriable=False,
    )


def fallback_route(topic: str, default: TopicRoute, queue_nums: int) -> TopicRoute:
    """The route of an unknown topic, drawn from TBW102: at most `queue_nums` queues per
    broker, as the broker will create it."""
    write = tuple(
        MessageQueue(topic, q.broker_name, q.queue_id)
        for q in default.write_queues
        if q.queue_id < queue_nums
    )
    return TopicRoute(topic, write, write, dict(default.master_addrs), dict(default.broker_addrs))


class Publisher:
    """Chooses targets for one producer; thread-safe."""

    def __init__(
        self,
        routes: RouteTable,
        default_topic_queue_nums: int,
        faults: LatencyFaultTolerance | None = None,
    ) -> None:
        self._routes = routes
        self._queue_nums = default_topic_queue_nums
        self.faults = faults
        self._counters: dict[str, itertools.count[int]] = {}
        self._fallbacks: dict[str, tuple[float, TopicRoute]] = {}
        self._lock = threading.Lock()

    def route(self, topic: str, *, may_block: bool = True) -> tuple[TopicRoute, str] | None:
        """(route, default topic): the topic's own route, or one drawn from TBW102. None when
        the name servers would have to be asked and may_block is False."""
        fallback = self._fallbacks.get(topic)
        if fallback is not None and fallback[0] > time.monotonic():
            return fallback[1], AUTO_CREATE_TOPIC_KEY
        if not may_block:
            route = self._routes.fresh(topic)
            return None if route is None else (route, "")
        try:
            route = self._routes.get(topic)
        except TopicNotExistError:
            try:
                default = self._routes.get(AUTO_CREATE_TOPIC_KEY)
            except TopicNotExistError:
                raise no_route_error(topic) from None
            return self.use_fallback(topic, default), AUTO_CREATE_TOPIC_KEY
        self._fallbacks.pop(topic, None)
        return route, ""

    def use_fallback(self, topic: str, default: TopicRoute) -> TopicRoute:
        """`topic` has no route: send through TBW102's (`default`) for FALLBACK_TTL_S."""
        route = fallback_route(topic, default, self._queue_nums)
        self._fallbacks[topic] = (time.monotonic() + FALLBACK_TTL_S, route)
        return route

    def _writable(self, topic: str) -> tuple[TopicRoute, str]:
        found = self.route(topic)
        assert found is not None
        return _check_writable(topic, found)

    def next_target(
        self, topic: str, avoid_broker: str | None = None, *, may_block: bool = True
    ) -> Target | None:
        """The next queue round robin; None only when may_block is False and the route must
        be fetched first."""
        found = self.route(topic, may_block=may_block)
        if found is None:
            return None
        route, default_topic = _check_writable(topic, found)
        counter = self._counters.get(topic)
        if counter is None:
            with self._lock:
                counter = self._counters.setdefault(topic, itertools.count())
        faults = self.faults
        if faults is not None and faults.enabled:
            queue = select_available(route.write_queues, next(counter), avoid_broker, faults)
        else:
            queue = select_round_robin(route.write_queues, next(counter), avoid_broker)
        return Target(queue, route.master_addrs[queue.broker_name], default_topic)

    def orderly_target(self, topic: str, sharding_key: str | bytes) -> Target:
        route, default_topic = self._writable(topic)
        queue = route.write_queues[orderly_index(sharding_key, len(route.write_queues))]
        return Target(queue, route.master_addrs[queue.broker_name], default_topic)

    def write_queues(self, topic: str) -> tuple[MessageQueue, ...]:
        """The topic's write queues, as a MessageQueueSelector is given them."""
        return self._writable(topic)[0].write_queues

    def queue_target(self, topic: str, queue: MessageQueue) -> Target:
        """A given queue of `topic` (send to a queue, or a selector's choice); its broker must
        have a master in the topic's route (the route is fetched again once if not)."""
        if queue.topic != topic:
            raise InvalidParameterError(f"queue {queue} is not a queue of topic {topic!r}")
        for attempt in range(2):
            route, default_topic = self._writable(topic)
            addr = route.master_addrs.get(queue.broker_name)
            if addr is not None:
                return Target(queue, addr, default_topic)
            if attempt == 0:
                self.failed(topic)
        raise BrokerNotExistError(
            f"broker {queue.broker_name!r} of queue {queue} has no master serving {topic!r}",
            retriable=False,
        )

    def failed(self, topic: str) -> None:
        self._fallbacks.pop(topic, None)
        self._routes.invalidate(topic)


def _check_writable(topic: str, found: tuple[TopicRoute, str]) -> tuple[TopicRoute, str]:
    route = found[0]
    if route.write_queues:
        return found
    if route.read_queues and route.master_addrs:
        # the topic is there and its brokers' masters are up: its write permission is
        # wiped (wipeWritePerm, brokerPermission, the topic's perm), as RocketMQ says
        raise NoPermissionError(
            f"topic {topic!r} may not be written now: no queue of it has write permission "
            "(wipeWritePerm, brokerPermission or the topic's perm; addWritePerm gives it back)"
        )
    raise TopicNotExistError(f"topic {topic!r} has no writable queue", retriable=True)


def oneway_target(
    publisher: Publisher,
    topic: str,
    msg: Message,
    to: MessageQueue | Selector | None,
    arg: Any,
    *,
    may_block: bool,
) -> Target:
    """Where a oneway send goes: the next queue round robin, or the one `to` picks."""
    if to is None:
        target = publisher.next_target(topic, may_block=may_block)
    else:
        target = chosen_target(publisher, topic, msg, to, arg)
    assert target is not None
    return target


def chosen_target(
    publisher: Publisher, topic: str, msg: Message, to: MessageQueue | Selector, arg: Any
) -> Target:
    """The target of a send to a given queue, or to the queue a selector picks with `arg`."""
    queue = (
        to if isinstance(to, MessageQueue) else choose(to, publisher.write_queues(topic), msg, arg)
    )
    return publisher.queue_target(topic, queue)
