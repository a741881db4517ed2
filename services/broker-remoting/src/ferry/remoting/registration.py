"""Registration of the broker with every name server (RocketMQ's BrokerOuterAPI).

The broker sends its address and full topic table to each name server on start, on a period
and right after a topic change; a name server forgets a broker it has not heard from in a
while. Name servers are independent: one that is down must not delay the others or anything
else, so requests are fire-and-callback, and an outage is logged once when it starts and once
when it ends.

While a name server is down, registrations would pile up unsent in its socket (ZeroMQ queues
them until the connection comes back, and blocks the sender once the queue is full). So during
an outage the broker keeps a single small ping outstanding instead, with a growing timeout;
when the name server answers it, the broker registers at once.

A name server killed and restarted within a registration period is back empty, and nothing
fails on the broker's side: a socket monitor on each name server connection sees the new
connection's handshake and the broker registers with it at once, instead of leaving new
clients without routes until the next period (registerNameServerPeriod, 30 s by default).

In controller mode a master registers only under its write lease, and every registration
carries the broker's epoch: a master paused past its lease and resumed must not name itself
id 0 again over the master elected meanwhile (the name servers keep the highest epoch too).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import zmq

from ferry.protocol.codes import ResponseCode
from ferry.protocol.errors import ConfigError
from ferry.protocol.messages import (
    AnyReply,
    ErrorReply,
    PingRequest,
    PongReply,
    RegisterBrokerReply,
    RegisterBrokerRequest,
    UnregisterBrokerRequest,
)
from ferry.runtime.service import Peer, Service

log = logging.getLogger("ferry.remoting.registration")

REGISTER_TIMEOUT_S = 6.0
# Timeouts of the successive pings sent while a name server is down.
PROBE_TIMEOUTS_S = (30.0, 60.0, 120.0, 300.0, 600.0)
MIN_PERIOD_MS = 1000
MAX_PERIOD_MS = 60_000


def parse_namesrv_addr(text: str) -> list[str]:
    """RocketMQ's namesrvAddr: "host:port" or several separated by ';'."""
    addrs: list[str] = []
    for raw in text.split(";"):
        part = raw.strip()
        if not part:
            continue
        host, sep, port = part.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"namesrvAddr entry {part!r} is not host:port")
        if part not in addrs:
            addrs.append(part)
    return addrs


def register_period_s(period_ms: int) -> float:
    """registerNameServerPeriod, kept within what the name servers' expiry tolerates."""
    return min(max(period_ms, MIN_PERIOD_MS), MAX_PERIOD_MS) / 1000


@dataclass
class _Link:
    addr: str
    peer: Peer
    registered: bool = False
    down: bool = False
    probing: bool = False
    probe_step: int = 0
    last_rejection: str = ""


class NamesrvRegistrar:
    def __init__(
        self,
        service: Service,
        addrs: list[str],
        registration: Callable[[], RegisterBrokerRequest],
        unregistration: Callable[[], UnregisterBrokerRequest],
        may_register: Callable[[], bool] = lambda: True,
    ) -> None:
        self._service = service
        self._registration = registration
        # controller mode: a master registers only while it holds its write lease
        self._may_register = may_register
        self._unregistration = unregistration
        self._links = [
            _Link(addr, service.connect_peer(f"tcp://{addr}", REGISTER_TIMEOUT_S)) for addr in addrs
        ]
        self._soon = False
        self._started = False
        for link in self._links:
            self._watch_connects(link)

    @property
    def addrs(self) -> list[str]:
        return [link.addr for link in self._links]

    def start(self, period_s: float) -> None:
        if not self._links:
            log.warning("namesrvAddr is empty: this broker registers with no name server")
            return
        self._started = True
        self.register_all()
        self._service.every(period_s, self.register_all)

    def register_soon(self) -> None:
        """Registers on the next loop turn; a burst of topic changes makes one registration."""
        if self._soon or not self._links or not self._started:
            return
        self._soon = True
        self._service.later(0, self._register_now)

    def _register_now(self) -> None:
        self._soon = False
        self.register_all()

    def register_all(self) -> None:
        if not self._may_register():
            return
        request: RegisterBrokerRequest | None = None
        for link in self._links:
            if link.down:
                self._probe(link)
                continue
            if request is None:
                request = self._registration()
            link.peer.request(request, self._on_register_reply(link))

    def _watch_connects(self, link: _Link) -> None:
        """Registers with link's name server whenever a connection to it completes: a
        restarted name server knows no broker until told."""

        def on_connected() -> None:
            if self._started and self._may_register():
                log.info("connected to name server %s; registering", link.addr)
                self._mark_up(link)
                link.peer.request(self._registration(), self._on_register_reply(link))

        link.peer.watch(zmq.EVENT_HANDSHAKE_SUCCEEDED, on_connected)

    def unregister_all(self) -> None:
        """Best effort on stop: one oneway message to each name server that is up."""
        request = self._unregistration()
        for link in self._links:
            if not link.down:
                link.peer.oneway(request)

    def _on_register_reply(self, link: _Link) -> Callable[[AnyReply, list[Any]], None]:
        def on_reply(body: AnyReply, _frames: list[Any]) -> None:
            if isinstance(body, RegisterBrokerReply):
                self._mark_up(link)
                if not link.registered:
                    log.info("registered with name server %s", link.addr)
                link.registered = True
                link.last_rejection = ""
            elif isinstance(body, ErrorReply) and body.code == ResponseCode.RPC_TIME_OUT:
                self._mark_down(link)
            elif isinstance(body, ErrorReply):
                if body.message != link.last_rejection:
                    log.warning(
                        "name server %s refused the registration: [%d] %s",
                        link.addr,
                        body.code,
                        body.message,
                    )
                link.last_rejection = body.message
            else:
                log.warning("name server %s answered %s", link.addr, type(body).__name__)

        return on_reply

    def _mark_down(self, link: _Link) -> None:
        if link.down:
            return
        log.warning("name server %s does not answer; registering again when it is back", link.addr)
        link.down = True
        link.registered = False
        link.probe_step = 0
        self._probe(link)

    def _mark_up(self, link: _Link) -> None:
        if link.down:
            log.info("name server %s answers again", link.addr)
            link.down = False

    def _probe(self, link: _Link) -> None:
        if link.probing:
            return
        link.probing = True
        timeout = PROBE_TIMEOUTS_S[min(link.probe_step, len(PROBE_TIMEOUTS_S) - 1)]
        link.probe_step += 1

        def on_reply(body: AnyReply, _frames: list[Any]) -> None:
            link.probing = False
            if isinstance(body, PongReply) and link.down:
                self._mark_up(link)
                self.register_soon()
            # a timeout: the next period sends the next ping

        link.peer.request(PingRequest(), on_reply, timeout_s=timeout)
