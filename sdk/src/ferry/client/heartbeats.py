"""What producers and consumers share to tell brokers they exist: heartbeats sent without
waiting, the brokers serving a set of topics, and leaving."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from concurrent.futures import Future

import msgspec

from ferry.client.instance import ClientIdentity, ClientInstance
from ferry.client.transport import Result, wait
from ferry.protocol.codes import ResponseCode
from ferry.protocol.errors import FerryError, SubscriptionParseError
from ferry.protocol.messages import HeartbeatRequest, UnregisterClientRequest

log = logging.getLogger("ferry.client.heartbeats")

LANGUAGE = "PYTHON"  # what consumerConnection / producerConnection show, as RocketMQ's JAVA


def log_failure(what: str) -> Callable[[Future[Result]], None]:
    """A done-callback for fire-and-forget requests: a failure is only logged (the next
    period sends again)."""

    def callback(future: Future[Result]) -> None:
        if not future.cancelled() and future.exception() is not None:
            log.debug("%s failed: %s", what, future.exception())

    return callback


def stamped(body: HeartbeatRequest, who: ClientIdentity) -> HeartbeatRequest:
    """The heartbeat with the client's address, language and version filled in."""
    if body.language:
        return body
    return msgspec.structs.replace(
        body, client_addr=who.ip, language=LANGUAGE, version=who.sdk_version
    )


def send_heartbeat(inst: ClientInstance, addr: str, body: HeartbeatRequest) -> None:
    body = stamped(body, inst)
    future = inst.connection(addr).submit(body, timeout_s=inst.api_timeout_s)
    future.add_done_callback(log_failure(f"heartbeat to {addr}"))


def heartbeat_checked(inst: ClientInstance, addrs: Iterable[str], body: HeartbeatRequest) -> None:
    """Sends the heartbeat to each broker and waits for them (RocketMQ's checkClientInBroker):
    raises when one refuses its subscriptions (an SQL92 filter it does not take or cannot
    parse). Other failures are left to the periodic heartbeats."""
    body = stamped(body, inst)
    futures = [
        (addr, inst.connection(addr).submit(body, timeout_s=inst.api_timeout_s))
        for addr in sorted(set(addrs))
    ]
    for addr, future in futures:
        try:
            wait(future, inst.api_timeout_s, addr)
        except SubscriptionParseError:
            raise
        except FerryError as err:
            if err.code == ResponseCode.SYSTEM_ERROR and not err.retriable:
                raise  # enablePropertyFilter=false there
            log.debug("heartbeat to %s failed: %s", addr, err)


def masters_serving(inst: ClientInstance, topics: Iterable[str]) -> set[str]:
    """Addresses of every broker (masters and slaves, as RocketMQ's heartbeats) with a cached
    route for one of `topics`: a slave that serves while its master is gone knows the group."""
    addrs: set[str] = set()
    for topic in topics:
        route = inst.routes.cached(topic)
        if route is not None:
            addrs.update(route.master_addrs.values())
            for members in route.broker_addrs.values():
                addrs.update(members.values())
    return addrs


def unregister(inst: ClientInstance, body: UnregisterClientRequest, addrs: Iterable[str]) -> None:
    """Tells brokers this client leaves (best effort, a second at most: they would expire it)."""
    futures = [inst.connection(addr).submit(body, timeout_s=1.0) for addr in set(addrs)]
    for future in futures:
        try:
            wait(future, 1.0)
        except FerryError as err:
            log.debug("unregister failed: %s", err)
