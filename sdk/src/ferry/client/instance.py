"""What every client of the SDK needs once: connections, routes, a timer thread, its id.

Each Producer, PullConsumer and Admin builds one ClientInstance in start() and closes it in
shutdown(); nothing here runs at import.
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Callable
from importlib import metadata
from typing import TypeVar

from opentelemetry import trace

from ferry.client.msg_id import MessageIdGenerator, local_ip
from ferry.client.route import RouteCache, RouteTable, parse_namesrv
from ferry.client.timers import Ticker
from ferry.client.tracing import Tracing
from ferry.client.transport import Connection, ConnectionPool
from ferry.protocol import record
from ferry.protocol.auth import Credentials
from ferry.protocol.errors import IllegalStateError
from ferry.protocol.messages import AnyReply

log = logging.getLogger("ferry.client")

DEFAULT_API_TIMEOUT_S = 3.0  # mqClientApiTimeout
# How often a client without a tracer provider looks for a global one installed since it started
TRACING_LOOK_S = 1.0


def sdk_version() -> str:
    try:
        return metadata.version("ferry")
    except metadata.PackageNotFoundError:
        return ""


class ClientIdentity:
    """Who a client is: its IP, client id, born host and message ids (sync and asyncio)."""

    def __init__(self, namesrv_addrs: list[str], role: str) -> None:
        self.ip = local_ip(namesrv_addrs[0])
        self.sdk_version = sdk_version()
        self.client_id = f"{self.ip}@{os.getpid()}@{role}-{random.getrandbits(32):08x}"
        self.born_host = record.pack_host(f"{self.ip}:0")
        self.msg_ids = MessageIdGenerator(self.ip)


class ClientBase(ClientIdentity):
    """What a sync and an asyncio client instance build alike from the same arguments; each
    opens its own connections and routes in _open()."""

    routes: RouteTable

    def __init__(
        self,
        namesrv: str,
        *,
        role: str,
        api_timeout_s: float = DEFAULT_API_TIMEOUT_S,
        tracer_provider: trace.TracerProvider | None = None,
        credentials: Credentials | None = None,
        tls_server_key: str | None = None,
    ) -> None:
        addrs = parse_namesrv(namesrv)
        self.api_timeout_s = api_timeout_s
        super().__init__(addrs, role)
        self._notice_listeners: list[Callable[[str, AnyReply], None]] = []
        self.tracing = Tracing(tracer_provider, self.client_id)
        self._open(addrs, role, credentials, tls_server_key)

    def _open(
        self, addrs: list[str], role: str, credentials: Credentials | None, key: str | None
    ) -> None:
        raise NotImplementedError

    def on_notice(self, listener: Callable[[str, AnyReply], None]) -> None:
        """listener(broker address, notice) for notices brokers send unasked; it must not
        block (it runs on an I/O thread, or on the loop in asyncio)."""
        self._notice_listeners.append(listener)

    def _on_notice(self, address: str, body: AnyReply) -> None:
        for listener in list(self._notice_listeners):
            listener(address, body)


class ClientInstance(ClientBase):
    routes: RouteCache

    def _open(
        self, addrs: list[str], role: str, credentials: Credentials | None, key: str | None
    ) -> None:
        self.pool = ConnectionPool(
            on_notice=self._on_notice, credentials=credentials, tls_server_key=key
        )
        self.routes = RouteCache(addrs, self.pool, self.api_timeout_s)
        self.ticker = Ticker(f"ferry-{role}-timer")
        if not self.tracing.fixed:
            self.ticker.later(TRACING_LOOK_S, self._look_for_tracing)

    def connection(self, address: str) -> Connection:
        return self.pool.get(address)

    def _look_for_tracing(self) -> None:
        """Until a global provider is installed (an application may set OpenTelemetry up
        after its clients started): then this client's spans are made from it on."""
        if not self.tracing.refresh():
            self.ticker.later(TRACING_LOOK_S, self._look_for_tracing)

    def close(self) -> None:
        self.ticker.close()
        self.pool.close()


InstanceT = TypeVar("InstanceT", bound=ClientBase)


class InstanceOptions:
    """The options a client's start() opens its instance with, sync or asyncio."""

    namesrv: str
    _tracer_provider: trace.TracerProvider | None
    _credentials: Credentials | None
    _tls_server_key: str | None

    def _open_instance(self, kind: type[InstanceT], role: str) -> InstanceT:
        return kind(
            self.namesrv,
            role=role,
            tracer_provider=self._tracer_provider,
            credentials=self._credentials,
            tls_server_key=self._tls_server_key,
        )


def not_started(what: str) -> IllegalStateError:
    """A client used before start() or after shutdown()."""
    return IllegalStateError(f"{what} is not started")
