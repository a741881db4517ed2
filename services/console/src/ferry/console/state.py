"""What the pages share: the config, one Admin, the sampler, the trace store, the renderer,
and a producer for resends (started on first use)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from ferry.client import Admin, Producer
from ferry.console.config import ConsoleConfig
from ferry.console.sampler import Sampler
from ferry.console.trace_store import TraceStore
from ferry.console.web import Renderer

RESEND_GROUP = "FERRY_CONSOLE_RESEND"


@dataclass
class ConsoleState:
    config: ConsoleConfig
    admin: Admin
    sampler: Sampler
    traces: TraceStore
    renderer: Renderer
    _producer: Producer | None = None
    _producer_lock: threading.Lock = field(default_factory=threading.Lock)

    def producer(self) -> Producer:
        with self._producer_lock:
            if self._producer is None:
                producer = Producer(
                    RESEND_GROUP,
                    self.config.namesrv_addr,
                    send_timeout_ms=self.config.admin_timeout_ms,
                )
                producer.start()
                self._producer = producer
            return self._producer

    def close(self) -> None:
        with self._producer_lock:
            if self._producer is not None:
                self._producer.shutdown()
                self._producer = None
