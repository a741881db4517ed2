"""Request/reply over ZeroMQ for the blocking client: one DEALER per broker or name server,
owned by one I/O thread (connection.py tells the whole story).

- base: what this transport and the asyncio one share (result types, DEALER options, replies
  and peer states as errors, PoolBase);
- state: one connection's state, shared by its I/O thread and its callers;
- io_thread: the I/O thread (sending, reply correlation, deadlines, the peer's monitor);
- direct: direct requests, sent and awaited on a socket of the calling thread;
- connection: Connection, what callers use, with wait() and expect();
- pool: ConnectionPool, connections by address.
"""

from ferry.client.transport.base import DEFAULT_TIMEOUT_S, NoticeCallback, Payload, Result
from ferry.client.transport.connection import Connection, expect, wait
from ferry.client.transport.pool import ConnectionPool

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "Connection",
    "ConnectionPool",
    "NoticeCallback",
    "Payload",
    "Result",
    "expect",
    "wait",
]
