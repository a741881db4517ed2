"""Topic routes: which broker groups serve a topic, their queues and master addresses.

TopicRoute is plain state built from the name server's TopicRouteData; RouteCache keeps one
per topic, asks any name server of the list (the next one when one fails) and is refreshed
every pollNameServerInterval and after a send fails.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from ferry.client.message import MessageQueue
from ferry.client.transport import ConnectionPool, Result, expect
from ferry.protocol.codes import Perm
from ferry.protocol.errors import (
    ConnectionFailedError,
    FerryError,
    IllegalStateError,
    InvalidParameterError,
    TopicNotExistError,
)
from ferry.protocol.messages import (
    AnyRequest,
    GetRouteInfoRequest,
    Reply,
    RouteInfoReply,
    TopicRouteData,
)

log = logging.getLogger("ferry.client.route")

MASTER_ID = 0
R = TypeVar("R", bound=Reply)


def parse_namesrv(namesrv: str) -> list[str]:
    """'host:port;host:port' -> the addresses, in order."""
    addrs = [part.strip() for part in namesrv.split(";") if part.strip()]
    if not addrs:
        raise InvalidParameterError("no name server address given (host:port;host:port)")
    for addr in addrs:
        host, sep, port = addr.rpartition(":")
        if "://" not in addr and (not sep or not host or not port.isdigit()):
            raise InvalidParameterError(f"name server address {addr!r} is not host:port")
    return addrs


@dataclass(frozen=True)
class TopicRoute:
    topic: str
    write_queues: tuple[MessageQueue, ...]
    read_queues: tuple[MessageQueue, ...]
    # broker name -> address of its master (brokers without a live master are left out)
    master_addrs: dict[str, str]
    # broker name -> broker id -> address (slaves included)
    broker_addrs: dict[str, dict[int, str]] = field(default_factory=dict)

    @classmethod
    def from_data(cls, topic: str, data: TopicRouteData) -> TopicRoute:
        broker_addrs = {b.broker_name: dict(b.broker_addrs) for b in data.broker_datas}
        masters = {
            name: addrs[MASTER_ID] for name, addrs in broker_addrs.items() if MASTER_ID in addrs
        }
        write: list[MessageQueue] = []
        read: list[MessageQueue] = []
        for qd in data.queue_datas:
            name = qd.broker_name
            if qd.perm & Perm.WRITE and name in masters:
                write.extend(MessageQueue(topic, name, i) for i in range(qd.write_queue_nums))
            if qd.perm & Perm.READ and broker_addrs.get(name):
                read.extend(MessageQueue(topic, name, i) for i in range(qd.read_queue_nums))
        return cls(topic, tuple(sorted(write)), tuple(sorted(read)), masters, broker_addrs)

    def master_of(self, broker_name: str) -> str | None:
        return self.master_addrs.get(broker_name)

    def read_addr_of(self, broker_name: str) -> str | None:
        """The master, or the lowest-numbered slave when the master is gone."""
        addrs = self.broker_addrs.get(broker_name)
        if not addrs:
            return None
        return addrs.get(MASTER_ID) or addrs[min(addrs)]


class RouteTable:
    """Routes by topic and the name servers' rotation, without I/O: RouteCache asks the name
    servers over the blocking transport, ferry.client.aio over zmq.asyncio, both filling this.
    Safe to use from any thread."""

    def __init__(self, namesrv_addrs: list[str]) -> None:
        self.namesrv_addrs = namesrv_addrs
        self._routes: dict[str, TopicRoute] = {}
        self._stale: set[str] = set()
        self._good = 0  # index of the name server that answered last
        self._known_masters: set[str] = set()
        self._listeners: list[Callable[[str], None]] = []
        self._lock = threading.Lock()

    # ---- name servers ----

    def namesrv_order(self) -> list[tuple[int, str]]:
        """(index, address) of the name servers in the order to ask them: the one that
        answered last first."""
        count = len(self.namesrv_addrs)
        return [
            ((self._good + i) % count, self.namesrv_addrs[(self._good + i) % count])
            for i in range(count)
        ]

    def answered(self, index: int, errors: list[tuple[str, FerryError]]) -> None:
        """Name server `index` answered, after `errors` of those asked before it."""
        self._good = index
        addr = self.namesrv_addrs[index]
        for failed, error in errors:
            log.warning("name server %s failed, %s answered: %s", failed, addr, error)

    def namesrv_outcome(
        self,
        index: int,
        outcome: Result | FerryError,
        errors: list[tuple[str, FerryError]],
        cls: type[R],
    ) -> R | None:
        """What name server `index` answered: its reply; None when the next one should be
        asked (the failure is kept in `errors`); raised when no other would answer better."""
        if isinstance(outcome, FerryError):
            if isinstance(outcome, TopicNotExistError):
                self._good = index
                raise outcome
            if not outcome.retriable:
                raise outcome
            errors.append((self.namesrv_addrs[index], outcome))
            return None
        self.answered(index, errors)
        return expect(outcome, cls)

    def none_answered(self, errors: list[tuple[str, FerryError]]) -> FerryError:
        """The error of a request no name server answered: refusals said as one plain error
        naming the name servers (in the `name server X: ...` form the Admin's errors use)."""
        refused = all(
            isinstance(err, ConnectionFailedError) and "refused" in err.message for _, err in errors
        )
        if not refused:
            return errors[-1][1]
        where = ";".join(self.namesrv_addrs)
        hint = "is it running?" if len(errors) == 1 else "is any running?"
        return ConnectionFailedError(
            f"name server {where}: connection refused, nothing answers there ({hint})"
        )

    # ---- routes ----

    def get(self, topic: str) -> TopicRoute:
        route = self._routes.get(topic)
        if route is None or topic in self._stale:
            return self.fetch(topic)
        return route

    def fetch(self, topic: str) -> TopicRoute:
        """Asks the name servers now (RouteCache). A table filled from outside has no way to:
        its owner fetches before it reads."""
        raise IllegalStateError(f"the route of {topic!r} has not been fetched")

    def cached(self, topic: str) -> TopicRoute | None:
        return self._routes.get(topic)

    def fresh(self, topic: str) -> TopicRoute | None:
        """The cached route unless get() would ask the name servers first."""
        if topic in self._stale:
            return None
        return self._routes.get(topic)

    def learn(self, topic: str, data: TopicRouteData) -> TopicRoute:
        """Keeps the route a name server gave; tells listeners of masters seen first."""
        route = TopicRoute.from_data(topic, data)
        with self._lock:
            self._routes[topic] = route
            self._stale.discard(topic)
            new = set(route.master_addrs.values()) - self._known_masters
            self._known_masters |= new
        for addr in sorted(new):
            for listener in self._listeners:
                listener(addr)
        return route

    def forget(self, topic: str) -> None:
        """No broker serves the topic any more."""
        with self._lock:
            self._routes.pop(topic, None)
            self._stale.discard(topic)

    def on_new_master(self, listener: Callable[[str], None]) -> None:
        """listener(address) runs (in the fetching thread) for each broker master seen first;
        it must not block."""
        self._listeners.append(listener)

    def invalidate(self, topic: str) -> None:
        """The next get() asks the name servers again (after a send failed)."""
        with self._lock:
            if topic in self._routes:
                self._stale.add(topic)

    def topics(self) -> list[str]:
        return list(self._routes)

    def master_addrs(self) -> dict[str, str]:
        """broker name -> master address, over every cached route."""
        out: dict[str, str] = {}
        for route in list(self._routes.values()):
            out.update(route.master_addrs)
        return out

    def addr_of(self, broker_name: str, *, read: bool = False) -> str | None:
        """The broker's master; with read, a slave when no cached route has the master (a
        route of another topic may still show the master gone: masters come first)."""
        routes = list(self._routes.values())
        for route in routes:
            addr = route.master_of(broker_name)
            if addr:
                return addr
        if read:
            for route in routes:
                addr = route.read_addr_of(broker_name)
                if addr:
                    return addr
        return None


class RouteCache(RouteTable):
    """A RouteTable that asks the name servers itself, over the blocking transport."""

    def __init__(self, namesrv_addrs: list[str], pool: ConnectionPool, timeout_s: float) -> None:
        super().__init__(namesrv_addrs)
        self._pool = pool
        self._timeout_s = timeout_s

    def namesrv_request(self, body: AnyRequest, cls: type[R]) -> R:
        """Asks the name servers in turn, starting with the last one that answered. When none
        answers, one error says so (nothing is logged: the caller reports it, once); a failure
        followed by another name server's answer is logged."""
        errors: list[tuple[str, FerryError]] = []
        for index, addr in self.namesrv_order():
            reply = self.namesrv_outcome(index, self._ask(addr, body), errors, cls)
            if reply is not None:
                return reply
        raise self.none_answered(errors)

    def _ask(self, addr: str, body: AnyRequest) -> Result | FerryError:
        try:
            return self._pool.get(addr).request(body, timeout_s=self._timeout_s)
        except FerryError as err:
            return err

    def fetch(self, topic: str) -> TopicRoute:
        """Asks the name servers now; TopicNotExistError when no broker serves the topic."""
        try:
            reply = self.namesrv_request(GetRouteInfoRequest(topic=topic), RouteInfoReply)
        except TopicNotExistError:
            self.forget(topic)
            raise
        return self.learn(topic, reply.route)

    def refresh_all(self) -> None:
        """Periodic refresh; a failure keeps the old route."""
        for topic in list(self._routes):
            try:
                self.fetch(topic)
            except TopicNotExistError:
                log.info("topic %s has no route any more", topic)
            except FerryError as err:
                log.warning("route refresh of %s failed: %s", topic, err)
