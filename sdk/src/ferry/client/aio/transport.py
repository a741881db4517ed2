"""Request/reply on an asyncio loop: one DEALER per broker or name server, read by the loop.

The asyncio twin of ferry.client.transport, with its semantics: replies matched by
correlation id, ErrorReply raised as the typed error of ferry.protocol.errors, a deadline per
request (RequestTimeoutError), requests refused at once with ConnectionFailedError while the
peer is known to be down (its monitor says so), and notices (id 0) handed to `on_notice`.
A request whose caller is cancelled leaves nothing behind: its pending entry goes in a
`finally`, and a reply that comes later is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from typing import Any, cast

import msgspec
import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

from ferry.client.transport.base import (
    DEFAULT_TIMEOUT_S,
    HANDSHAKE_FAILED,
    MONITOR_EVENTS,
    ZERO_COPY_MIN,
    NoticeCallback,
    Payload,
    PoolBase,
    Result,
    decode_reply,
    down_error,
    endpoint_of,
    hand_notice,
    reply_error,
    setup_dealer,
)
from ferry.protocol.auth import Credentials
from ferry.protocol.curve import CurveClient
from ferry.protocol.errors import (
    ConnectionFailedError,
    FerryError,
    RequestTimeoutError,
)
from ferry.protocol.framing import RequestCodec, RequestEnvelope
from ferry.protocol.messages import AnyRequest

log = logging.getLogger("ferry.client.aio.transport")

NOBLOCK = int(zmq.NOBLOCK)
POLLIN = int(zmq.POLLIN)
POLLOUT = int(zmq.POLLOUT)
SEND_SLICE_MS = 50  # a send waiting for the connection looks at the peer's state this often


class AsyncConnection:
    """One DEALER to one address, read from the loop's own readiness callback; its monitor
    is a task of the running loop.

    The DEALER is a plain (sync) socket used with NOBLOCK only: the loop watches its FD and
    the callback receives every reply there is and resolves its future at once, with no
    reader task in between (one loop iteration less per request). ZeroMQ's FD says only that
    the socket's state changed, so after each send (which may have read the peer's replies
    in passing) the socket's EVENTS are checked again.
    """

    def __init__(
        self,
        address: str,
        ctx: zmq.asyncio.Context,
        *,
        on_notice: NoticeCallback | None = None,
        credentials: Credentials | None = None,
        curve: CurveClient | None = None,
    ) -> None:
        self.address = address
        self._on_notice = on_notice
        self._curve = curve
        self._codec = RequestCodec(credentials)
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Result]] = {}
        self._writable: asyncio.Future[None] | None = None  # a send waiting for room
        self._down = self._refused = self._mismatch = False
        self.closed = False
        self._loop = asyncio.get_running_loop()
        self._sock: zmq.Socket[Any] = zmq.Socket(ctx, zmq.DEALER)
        setup_dealer(self._sock, curve)
        # ZeroMQ reconnects silently; the monitor says when the peer went away
        self._monitor = cast(zmq.asyncio.Socket, self._sock.get_monitor_socket(MONITOR_EVENTS))
        self._sock.connect(endpoint_of(address))
        self._fd = self._sock.FD
        self._loop.add_reader(self._fd, self._on_ready)
        self._tasks = [asyncio.create_task(self._watch(), name=f"ferry-aio-monitor-{address}")]

    async def request(
        self,
        body: AnyRequest,
        payload: Payload | None = None,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        traceparent: str = "",
        tracestate: str = "",
    ) -> Result:
        """The reply and its payload, or the typed error raised."""
        rid = next(self._ids)
        future: asyncio.Future[Result] = self._loop.create_future()
        self._pending[rid] = future
        # the deadline is a timer that fails the future: no timeout scope per request
        timer = self._loop.call_later(timeout_s, self._expire, future, timeout_s)
        try:
            frames, copy = self._frames(
                RequestEnvelope(rid, body, traceparent, tracestate), payload
            )
            if not self._try_send(frames, copy):
                await self._send_waiting(frames, copy, future)
            return await future
        finally:
            timer.cancel()
            self._pending.pop(rid, None)  # answered, failed, timed out or cancelled

    def _expire(self, future: asyncio.Future[Result], timeout_s: float) -> None:
        if not future.done():
            future.set_exception(
                RequestTimeoutError(f"no reply from {self.address} in {timeout_s:g}s")
            )

    async def send_oneway(
        self,
        body: AnyRequest,
        payload: Payload | None = None,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        traceparent: str = "",
        tracestate: str = "",
    ) -> None:
        """Sends a request the peer does not answer; waits only for it to leave."""
        env = RequestEnvelope(0, body, traceparent, tracestate, oneway=True)
        frames, copy = self._frames(env, payload)
        if self._try_send(frames, copy):
            return
        left: asyncio.Future[Result] = self._loop.create_future()
        timer = self._loop.call_later(timeout_s, self._gave_up, left, timeout_s)
        try:
            await self._send_waiting(frames, copy, left)
        finally:
            timer.cancel()

    def _gave_up(self, future: asyncio.Future[Result], timeout_s: float) -> None:
        if not future.done():
            future.set_exception(
                RequestTimeoutError(f"{self.address} took no request in {timeout_s:g}s")
            )

    def _frames(self, env: RequestEnvelope, payload: Payload | None) -> tuple[list[Any], bool]:
        try:
            frames = self._codec.request_frames(env, payload)
        except (msgspec.EncodeError, TypeError, ValueError) as exc:
            raise FerryError(f"cannot send {type(env.body).__name__}: {exc}") from None
        copy = not (payload is not None and any(len(f) >= ZERO_COPY_MIN for f in payload))
        return frames, copy

    def _try_send(self, frames: list[Any], copy: bool) -> bool:
        """True once the frames are queued; False when the socket has no room (or no
        completed connection) yet; the typed error while the peer is down or on failure."""
        if self.closed:
            raise ConnectionFailedError(f"connection to {self.address} is closed")
        if self._down:
            raise down_error(self.address, self._mismatch, self._refused, self._curve is not None)
        try:
            self._sock.send_multipart(frames, NOBLOCK, copy=copy)
        except zmq.Again:
            return False  # not connected yet (immediate), or full
        except zmq.ZMQError as exc:
            raise ConnectionFailedError(f"cannot send to {self.address}: {exc}") from None
        finally:
            # the send may have taken in replies without the FD saying so again
            self._on_ready()
        return True

    async def _send_waiting(
        self, frames: list[Any], copy: bool, deadline: asyncio.Future[Result]
    ) -> None:
        """Sends once the socket has room, looking at the peer's state every slice; stops
        (raising its error) as soon as `deadline` fails: a timeout or the connection lost."""
        while not self._try_send(frames, copy):
            if self._writable is None or self._writable.done():
                self._writable = self._loop.create_future()
            await asyncio.wait((self._writable, deadline), timeout=SEND_SLICE_MS / 1000)
            if deadline.done():
                deadline.result()  # raises: the timer or _fail_pending failed it

    def _on_ready(self) -> None:
        """The FD's callback: every reply waiting is read and handed to its future."""
        sock = self._sock
        if sock.closed:
            return
        try:
            while True:
                events = cast(int, sock.getsockopt(zmq.EVENTS))
                if events & POLLOUT and self._writable is not None and not self._writable.done():
                    self._writable.set_result(None)
                if not events & POLLIN:
                    return
                # one reply per look at EVENTS: cheaper than a recv ending in zmq.Again
                self._reply(sock.recv_multipart(NOBLOCK))
        except zmq.ZMQError as exc:
            log.debug("reading from %s stopped: %s", self.address, exc)

    def _reply(self, frames: list[Any]) -> None:
        decoded = decode_reply(self._codec, frames, self.address)
        if decoded is None:
            return
        env, payload = decoded
        if env.id == 0:
            hand_notice(self._on_notice, self.address, env.body)
            return
        future = self._pending.pop(env.id, None)
        if future is None or future.done():
            return  # its caller gave up
        error = reply_error(env.body)
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result((env.body, payload))

    async def _watch(self) -> None:
        while True:
            event = cast(
                dict[str, Any], parse_monitor_message(await self._monitor.recv_multipart())
            )
            kind = event["event"]
            if kind == zmq.EVENT_CONNECTED:
                self._down = self._refused = False
            elif kind & HANDSHAKE_FAILED:
                self._down = self._mismatch = True
            elif kind == zmq.EVENT_DISCONNECTED:
                self._down = True
                self._fail_pending(ConnectionFailedError(f"connection to {self.address} was lost"))
            else:  # a connection attempt failed
                self._down = self._refused = True

    def _fail_pending(self, err: FerryError) -> None:
        pending = list(self._pending.values())
        self._pending.clear()
        for future in pending:
            if not future.done():
                future.set_exception(err)

    async def close(self) -> None:
        self.closed = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, zmq.ZMQError):
                await task
        self._fail_pending(ConnectionFailedError(f"connection to {self.address} is closed"))
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)  # its sender sees `closed`
        self._loop.remove_reader(self._fd)
        with contextlib.suppress(zmq.ZMQError):
            self._sock.disable_monitor()
        self._monitor.close(linger=0)
        self._sock.close(linger=0)


class AsyncPool(PoolBase[AsyncConnection]):
    """Connections on one zmq.asyncio context."""

    def _setup(self) -> None:
        self._ctx = zmq.asyncio.Context()

    def get(self, address: str) -> AsyncConnection:
        conn = self._conns.get(address)
        if conn is not None:
            return conn
        if self.closed:
            raise ConnectionFailedError("client is shut down")
        conn = self._conns[address] = AsyncConnection(
            address,
            self._ctx,
            on_notice=self._on_notice,
            credentials=self.credentials,
            curve=self._curve,
        )
        return conn

    async def close(self) -> None:
        self.closed = True
        conns = list(self._conns.values())
        self._conns.clear()
        for conn in conns:
            await conn.close()
        self._ctx.term()
