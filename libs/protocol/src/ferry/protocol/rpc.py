"""The one blocking request client: a request and its reply on a DEALER of the caller's own.

For code that waits on one answer at a time off any service loop: the launcher waiting for a
broker to register, the containers' health probe, a Prometheus scrape asking the group's
processes, the SDK's direct path for a sync send. It sends one envelope, waits on its socket
for the reply that echoes the request's id, and never hangs past the timeout. A reply that
comes after its caller gave up must not be taken for the next call's, so a timeout drops the
socket and the next call opens a new one. Not thread-safe: one client per thread or a lock.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

import zmq

from ferry.protocol.auth import Credentials
from ferry.protocol.curve import CurveClient
from ferry.protocol.frames import recv_frames, send_frames
from ferry.protocol.framing import FrameError, ReplyEnvelope, RequestCodec, RequestEnvelope
from ferry.protocol.messages import AnyReply, AnyRequest

Payload = list[Any]
SLICE_MS = 50  # a wait wakes this often to ask keep_waiting (and to see its deadline)


class BlockingClient:
    """Request/reply to one endpoint. `call` answers (reply, payload) or None on timeout.

    call() is send() then receive(), which callers with more to decide use apart (the SDK's
    direct path): an `immediate` socket takes a request only on a completed connection, so a
    NOBLOCK send raises zmq.Again, nothing sent, while the peer is not there; receive() waits
    in slices of `slice_ms`, asking `keep_waiting` between them whether to go on, and gives
    replies to other requests (a peer's notices, id 0) to `on_other`.
    """

    def __init__(
        self,
        endpoint: str,
        ctx: zmq.Context[Any] | None = None,
        *,
        immediate: bool = False,
        slice_ms: int = SLICE_MS,
        credentials: Credentials | None = None,
        curve: CurveClient | None = None,
    ) -> None:
        self.endpoint = endpoint
        self._curve = curve
        self._own_ctx = ctx is None
        self._ctx: zmq.Context[Any] = zmq.Context() if ctx is None else ctx
        self._codec = RequestCodec(credentials)
        self._ids = itertools.count(1)
        self._immediate = immediate
        self._slice_ms = slice_ms
        self._wait_ms = slice_ms  # the socket's receive timeout now
        self._sock: zmq.Socket[Any] | None = None

    def call(
        self,
        body: AnyRequest,
        timeout_ms: float,
        payload: Payload | None = None,
        *,
        traceparent: str = "",
        tracestate: str = "",
    ) -> tuple[AnyReply, Payload] | None:
        rid = self.send(body, payload, traceparent=traceparent, tracestate=tracestate)
        return self.receive(rid, timeout_ms)

    def connect(self) -> zmq.Socket[Any]:
        """The socket, made and connected on first use (or after a reset)."""
        sock = self._sock
        if sock is None:
            sock = self._ctx.socket(zmq.DEALER)
            sock.linger = 0
            sock.immediate = self._immediate
            sock.rcvtimeo = self._wait_ms = self._slice_ms
            if self._curve is not None:
                self._curve.apply(sock)
            sock.connect(self.endpoint)
            self._sock = sock
        return sock

    def send(
        self,
        body: AnyRequest,
        payload: Payload | None = None,
        *,
        traceparent: str = "",
        tracestate: str = "",
        flags: int = 0,
        copy: bool = True,
    ) -> int:
        """Sends one request; its id, for receive(). Encoding errors (msgspec.EncodeError,
        TypeError, ValueError) and zmq's (zmq.Again with NOBLOCK) raise, nothing sent."""
        sock = self.connect()
        rid = next(self._ids)
        frames = self._codec.request_frames(
            RequestEnvelope(rid, body, traceparent, tracestate), payload
        )
        send_frames(sock, frames, flags, copy)
        return rid

    def receive(
        self,
        rid: int,
        timeout_ms: float,
        *,
        keep_waiting: Callable[[], bool] | None = None,
        on_other: Callable[[ReplyEnvelope], None] | None = None,
    ) -> tuple[AnyReply, Payload] | None:
        """The reply to request `rid`, or None when timeout_ms passed first or keep_waiting
        said no; then the socket is dropped, so that a late reply is never taken for the next
        request's. A garbled answer is no answer: it is skipped."""
        sock = self._sock
        if sock is None:
            raise zmq.ZMQError(zmq.ENOTSOCK, "receive() without a send()")
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            try:
                frames: list[Any] | None = recv_frames(sock)  # waits up to _wait_ms
            except zmq.Again:
                frames = None
            if frames is not None:
                if frames and not frames[0]:
                    frames = frames[1:]
                try:
                    reply, reply_payload = self._codec.decode_reply(frames)
                except FrameError:
                    continue
                if reply.id == rid:
                    return reply.body, reply_payload
                if on_other is not None:
                    on_other(reply)
                continue
            left_ms = (deadline - time.monotonic()) * 1000
            if left_ms <= 0 or (keep_waiting is not None and not keep_waiting()):
                self.reset()
                return None
            wait_ms = max(1, min(self._slice_ms, int(left_ms)))
            if wait_ms != self._wait_ms:  # the last slice: no longer than the time left
                sock.rcvtimeo = self._wait_ms = wait_ms

    def reset(self) -> None:
        """Drops the socket: a late answer to an abandoned call dies with it."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def close(self) -> None:
        self.reset()
        if self._own_ctx:
            self._ctx.term()

    def __enter__(self) -> BlockingClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def ask(endpoint: str, body: AnyRequest, timeout_ms: int) -> AnyReply | None:
    """One request on a socket of its own; the reply's body, or None on timeout."""
    with BlockingClient(endpoint) as client:
        answer = client.call(body, timeout_ms)
    return None if answer is None else answer[0]
