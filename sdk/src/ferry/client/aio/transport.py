"""Request/reply on zmq.asyncio: one DEALER per broker or name server, read by one task.

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
POLLOUT = int(zmq.POLLOUT)
SEND_SLICE_MS = 50  # a send waiting for the connection looks at the peer's state this often


class AsyncConnection:
    """One DEALER to one address; its reader and monitor are tasks of the running loop."""

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
        self._down = self._refused = self._mismatch = False
        self.closed = False
        self._sock = ctx.socket(zmq.DEALER)
        setup_dealer(self._sock, curve)
        # ZeroMQ reconnects silently; the monitor says when the peer went away
        self._monitor = self._sock.get_monitor_socket(MONITOR_EVENTS)
        self._sock.connect(endpoint_of(address))
        self._tasks = [
            asyncio.create_task(self._read(), name=f"ferry-aio-read-{address}"),
            asyncio.create_task(self._watch(), name=f"ferry-aio-monitor-{address}"),
        ]

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
        future: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self._pending[rid] = future
        try:
            async with asyncio.timeout(timeout_s):
                await self._send(RequestEnvelope(rid, body, traceparent, tracestate), payload)
                reply, frames = await future
        except TimeoutError:
            raise RequestTimeoutError(f"no reply from {self.address} in {timeout_s:g}s") from None
        finally:
            self._pending.pop(rid, None)  # answered, failed, timed out or cancelled
        return reply, frames

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
        try:
            async with asyncio.timeout(timeout_s):
                await self._send(env, payload)
        except TimeoutError:
            raise RequestTimeoutError(f"{self.address} took no request in {timeout_s:g}s") from None

    async def _send(self, env: RequestEnvelope, payload: Payload | None) -> None:
        try:
            frames = self._codec.request_frames(env, payload)
        except (msgspec.EncodeError, TypeError, ValueError) as exc:
            raise FerryError(f"cannot send {type(env.body).__name__}: {exc}") from None
        copy = not (payload is not None and any(len(f) >= ZERO_COPY_MIN for f in payload))
        while True:
            if self.closed:
                raise ConnectionFailedError(f"connection to {self.address} is closed")
            if self._down:
                raise down_error(
                    self.address, self._mismatch, self._refused, self._curve is not None
                )
            try:
                await self._sock.send_multipart(frames, flags=NOBLOCK, copy=copy)
                return
            except zmq.Again:
                pass  # not connected yet (immediate), or full: wait for room
            except zmq.ZMQError as exc:
                raise ConnectionFailedError(f"cannot send to {self.address}: {exc}") from None
            await self._sock.poll(SEND_SLICE_MS, POLLOUT)  # type: ignore[call-arg]  # stub lags

    async def _read(self) -> None:
        sock, codec, pending = self._sock, self._codec, self._pending
        while True:
            decoded = decode_reply(codec, await sock.recv_multipart(), self.address)
            if decoded is None:
                continue
            env, payload = decoded
            if env.id == 0:
                hand_notice(self._on_notice, self.address, env.body)
                continue
            future = pending.pop(env.id, None)
            if future is None or future.done():
                continue  # its caller gave up
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
