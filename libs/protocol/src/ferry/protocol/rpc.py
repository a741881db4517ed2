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
from typing import Any

import zmq

from ferry.protocol.frames import recv_frames, send_frames
from ferry.protocol.framing import FrameError, RequestCodec, RequestEnvelope
from ferry.protocol.messages import AnyReply, AnyRequest

Payload = list[Any]


class BlockingClient:
    """Request/reply to one endpoint. `call` answers (reply, payload) or None on timeout."""

    def __init__(self, endpoint: str, ctx: zmq.Context[Any] | None = None) -> None:
        self.endpoint = endpoint
        self._own_ctx = ctx is None
        self._ctx: zmq.Context[Any] = zmq.Context() if ctx is None else ctx
        self._codec = RequestCodec()
        self._ids = itertools.count(1)
        self._sock: zmq.Socket[Any] | None = None

    def call(
        self,
        body: AnyRequest,
        timeout_ms: int,
        payload: Payload | None = None,
        *,
        traceparent: str = "",
        tracestate: str = "",
    ) -> tuple[AnyReply, Payload] | None:
        if self._sock is None:
            self._sock = self._ctx.socket(zmq.DEALER)
            self._sock.linger = 0
            self._sock.connect(self.endpoint)
        sock = self._sock
        rid = next(self._ids)
        env = RequestEnvelope(rid, body, traceparent, tracestate)
        send_frames(sock, self._codec.request_frames(env, payload))
        deadline = time.monotonic() + timeout_ms / 1000
        while (left := deadline - time.monotonic()) > 0 and sock.poll(max(1, int(left * 1000))):
            frames: list[Any] = recv_frames(sock)
            if frames and not frames[0]:
                frames = frames[1:]
            try:
                reply, reply_payload = self._codec.decode_reply(frames)
            except FrameError:
                continue  # a garbled answer is no answer; keep waiting for ours
            if reply.id == rid:
                return reply.body, reply_payload
        self.reset()
        return None

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
