"""What the pages share: the config, the sampler, the trace store, the renderer, and the
clients that talk to the cluster (an Admin, the controllers' clients, a producer for resends,
started on first use).

With a login (login.py) each session has clients of its own, signing with the logged-in
user's credentials, and the pages of that session use them: the cluster's ACLs decide what
the user may see and do. The console's own credentials sign only its background work (the
sampler), never a page's request."""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass, field

from ferry.admin import Admin
from ferry.client import Credentials, Producer
from ferry.console.config import ConsoleConfig
from ferry.console.controller_view import Controllers
from ferry.console.sampler import Sampler
from ferry.console.trace_store import TraceStore
from ferry.console.web import Renderer

RESEND_GROUP = "FERRY_CONSOLE_RESEND"


@dataclass
class Clients:
    """One set of credentials' clients of the cluster (None: unsigned requests)."""

    config: ConsoleConfig
    credentials: Credentials | None
    tls_server_key: str | None
    admin: Admin = field(init=False)
    controllers: Controllers = field(init=False)  # controller mode's groups (cluster page)
    _producer: Producer | None = None
    _producer_lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        creds, key, timeout_ms = self.credentials, self.tls_server_key, self.config.admin_timeout_ms
        self.admin = Admin(
            self.config.namesrv_addr, timeout_ms=timeout_ms, credentials=creds, tls_server_key=key
        )
        self.controllers = Controllers(timeout_ms, credentials=creds, tls_server_key=key)

    def start(self) -> None:
        self.admin.start()

    def producer(self) -> Producer:
        with self._producer_lock:
            if self._producer is None:
                producer = Producer(
                    RESEND_GROUP,
                    self.config.namesrv_addr,
                    send_timeout_ms=self.config.admin_timeout_ms,
                    credentials=self.credentials,
                    tls_server_key=self.tls_server_key,
                )
                producer.start()
                self._producer = producer
            return self._producer

    def close(self) -> None:
        self.controllers.close()
        with self._producer_lock:
            if self._producer is not None:
                self._producer.shutdown()
                self._producer = None
        self.admin.shutdown()


@dataclass
class ConsoleState:
    config: ConsoleConfig
    clients: Clients
    sampler: Sampler
    traces: TraceStore
    renderer: Renderer
    user: str = ""  # the logged-in user whose clients these are ("": the console's own)

    @property
    def admin(self) -> Admin:
        return self.clients.admin

    @property
    def controllers(self) -> Controllers:
        return self.clients.controllers

    def producer(self) -> Producer:
        return self.clients.producer()

    def scoped(self, clients: Clients, user: str) -> ConsoleState:
        """This state as one session's pages see it: its clients instead of the console's."""
        view = copy.copy(self)
        view.clients, view.user = clients, user
        return view

    def close(self) -> None:
        self.clients.close()
