"""Direct requests: a blocking caller sends on a DEALER of its own and waits there for the
reply, sparing the two thread hand-offs of the queued path (see connection.py). A thread
borrows one of at most MAX_DIRECT such sockets per connection, returned when the thread ends;
whatever a direct socket cannot do at once goes the queued way."""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any

import msgspec
import zmq

from ferry.client.transport.base import ZERO_COPY_MIN, Payload, Result, endpoint_of
from ferry.client.transport.state import ConnectionState
from ferry.protocol.auth import Credentials
from ferry.protocol.curve import CurveClient
from ferry.protocol.errors import (
    ConnectionFailedError,
    FerryError,
    RequestTimeoutError,
    error_for,
)
from ferry.protocol.framing import ReplyEnvelope
from ferry.protocol.messages import AnyRequest, ErrorReply
from ferry.protocol.rpc import BlockingClient

log = logging.getLogger("ferry.client.transport")

NOBLOCK = int(zmq.NOBLOCK)  # a plain int: pyzmq's flag enums cost microseconds per use
MAX_DIRECT = 8  # caller-owned sockets per connection (threads beyond it use the I/O thread)
# A direct wait wakes this often to see whether the peer went away or the connection closed.
DIRECT_SLICE_MS = 50


class Direct:
    """A blocking client for direct requests, used by one thread at a time (its lock held)."""

    def __init__(
        self,
        ctx: zmq.Context[Any],
        address: str,
        credentials: Credentials | None,
        curve: CurveClient | None,
    ) -> None:
        self.lock = threading.Lock()
        self.open = True
        # immediate: a send fails at once (zmq.Again) until the peer is connected
        self.client = BlockingClient(
            endpoint_of(address),
            ctx,
            immediate=True,
            slice_ms=DIRECT_SLICE_MS,
            credentials=credentials,
            curve=curve,
        )
        self.client.connect()  # connecting starts now, not on the first request

    def close(self) -> None:
        self.open = False
        self.client.reset()


class Lease:
    """A thread's hold on a Direct, kept in the connection's thread-local: when the thread
    ends, the lease is dropped and the socket goes back to the free list."""

    def __init__(self, conn: DirectRequests, direct: Direct) -> None:
        self.direct = direct
        # a weak reference: a lease must not keep a connection nobody uses any more alive
        self._finalizer = weakref.finalize(self, Lease._release, weakref.ref(conn), direct)

    @staticmethod
    def _release(conn_ref: weakref.ref[DirectRequests], direct: Direct) -> None:
        conn = conn_ref()
        if conn is not None:
            conn._release_direct(direct)


class DirectRequests(ConnectionState):
    """The calling thread's side of a connection: its direct socket, and a request on it."""

    def _lease(self) -> Lease | None:
        """The calling thread's direct socket, borrowed on first use; None when there is none
        to be had (closing, all taken, or this is the I/O thread)."""
        lease: Lease | None = getattr(self._local, "lease", None)
        if lease is not None:
            return lease if lease.direct.open else None
        if threading.current_thread() is self._thread:
            return None
        with self._direct_lock:
            if self._closing:
                return None
            if self._direct_free:
                direct = self._direct_free.pop()
            elif len(self._direct_all) < MAX_DIRECT:
                try:
                    direct = Direct(self._ctx, self.address, self._credentials, self._curve)
                except zmq.ZMQError as exc:
                    log.debug("no direct socket to %s: %s", self.address, exc)
                    return None
                self._direct_all.append(direct)
            else:
                return None
        lease = Lease(self, direct)
        self._local.lease = lease
        return lease

    def _release_direct(self, direct: Direct) -> None:
        with self._direct_lock:
            if direct.open and not self._closing:
                self._direct_free.append(direct)

    def _close_direct(self, timeout_s: float) -> None:
        with self._direct_lock:
            directs = list(self._direct_all)
            self._direct_all.clear()
            self._direct_free.clear()
        for direct in directs:
            # a thread in a direct wait notices `_closing` within a slice and lets go
            if direct.lock.acquire(timeout=max(timeout_s, 2 * DIRECT_SLICE_MS / 1000)):
                try:
                    direct.close()
                finally:
                    direct.lock.release()
            else:  # pragma: no cover - a wedged caller; leave its socket to the context
                log.warning("direct socket to %s still in use at close", self.address)

    def _request_direct(
        self,
        direct: Direct,
        body: AnyRequest,
        payload: Payload | None,
        timeout_s: float,
        traceparent: str,
        tracestate: str,
    ) -> Result | None:
        """Sends on `direct` and waits there; None when it could not be sent (the caller
        falls back to the I/O thread, which decides whether the peer is reachable)."""
        if self._down:
            return None
        with direct.lock:
            if not direct.open or self._closing:
                return None
            client = direct.client
            big = payload is not None and any(len(f) >= ZERO_COPY_MIN for f in payload)
            disconnects = self._disconnects
            try:
                rid = client.send(
                    body,
                    payload,
                    traceparent=traceparent,
                    tracestate=tracestate,
                    flags=NOBLOCK,
                    copy=not big,
                )
            except zmq.Again:
                return None  # not connected (yet), or full: nothing was sent
            except (msgspec.EncodeError, TypeError, ValueError) as exc:
                raise FerryError(f"cannot send {type(body).__name__}: {exc}") from None
            except zmq.ZMQError as exc:
                raise ConnectionFailedError(f"cannot send to {self.address}: {exc}") from None
            try:
                answer = client.receive(
                    rid,
                    timeout_s * 1000,
                    keep_waiting=lambda: not self._closing and self._disconnects == disconnects,
                    on_other=self._other_reply,
                )
            except zmq.ZMQError as exc:
                raise ConnectionFailedError(f"{self.address}: {exc}") from None
            if answer is None:
                if self._closing:
                    raise ConnectionFailedError(f"connection to {self.address} is closed")
                if self._disconnects != disconnects:
                    raise ConnectionFailedError(f"connection to {self.address} was lost")
                raise RequestTimeoutError(f"no reply from {self.address} in {timeout_s:g}s")
            reply = answer[0]
            if isinstance(reply, ErrorReply):
                raise error_for(reply.code, reply.message, reply.retriable)
            return answer

    def _other_reply(self, env: ReplyEnvelope) -> None:
        """A reply on a direct socket that is not the one waited for: a notice is handed on;
        a late reply to an earlier request is dropped."""
        if env.id == 0:
            self._notice(env.body)
