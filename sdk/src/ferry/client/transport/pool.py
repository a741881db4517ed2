"""The blocking client's connections by address, sharing one ZeroMQ context."""

from __future__ import annotations

import logging
import threading
from typing import Any

import zmq

from ferry.client.transport.base import PoolBase
from ferry.client.transport.connection import Connection
from ferry.protocol.errors import ConnectionFailedError

log = logging.getLogger("ferry.client.transport")


class ConnectionPool(PoolBase[Connection]):
    """Connections sharing one ZeroMQ context."""

    def _setup(self) -> None:
        self._ctx: zmq.Context[Any] = zmq.Context()
        self._lock = threading.Lock()

    def get(self, address: str) -> Connection:
        conn = self._conns.get(address)
        if conn is not None and not conn.closed:
            return conn
        with self._lock:
            if self.closed:
                raise ConnectionFailedError("client is shut down")
            conn = self._conns.get(address)
            if conn is None or conn.closed:
                if conn is not None:
                    conn.close()
                conn = Connection(
                    address,
                    context=self._ctx,
                    on_notice=self._on_notice,
                    credentials=self.credentials,
                    curve=self._curve,
                )
                self._conns[address] = conn
            return conn

    def addresses(self) -> list[str]:
        return list(self._conns)

    def close(self, timeout_s: float = 5.0) -> None:
        with self._lock:
            self.closed = True
            conns = list(self._conns.values())
            self._conns.clear()
        for conn in conns:
            conn.close(timeout_s)
        if all(conn.stopped for conn in conns):
            self._ctx.term()
        else:
            log.warning("some I/O threads did not stop; ZeroMQ context left open")
