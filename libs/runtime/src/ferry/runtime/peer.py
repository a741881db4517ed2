"""A DEALER connection from a service to another, driven by the owner's loop (Peer)."""

from __future__ import annotations

import heapq
import itertools
import struct
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import zmq

from ferry.protocol.errors import (
    ConnectionFailedError,
    RequestTimeoutError,
    ServiceNotAvailableError,
)
from ferry.protocol.frames import NOBLOCK, recv_ready, send_frames
from ferry.protocol.framing import FrameError, RequestEnvelope
from ferry.protocol.messages import AnyRequest
from ferry.runtime.call import Payload, ReplyCallback, error_reply

if TYPE_CHECKING:
    from ferry.runtime.service import Service

DRAIN_BATCH = 256  # messages taken from one socket before other sockets get a turn
# Frames up to this size are copied into ZeroMQ even when sent with copy=False. pyzmq sends
# bigger ones zero-copy (its default threshold is 64 KiB, less than one batch of 128 x 1 KB),
# and each such frame, once sent, wakes pyzmq's garbage-collector thread, which takes the GIL
# from the loop: copying a batch or a pull (~128-300 KiB) costs less than that hand-off;
# copying a log read or an HA transfer (1-4 MiB) does not.
COPY_THRESHOLD = 512 * 1024


_MONITOR_EVENT = struct.Struct("=H")  # a monitor message's first frame: event id, value


def monitor_event(frames: list[bytes]) -> int:
    """The event id of a ZeroMQ monitor message (zmq.utils.monitor would bring in asyncio)."""
    if len(frames) != 2 or len(frames[0]) != 6:
        return 0
    return int(_MONITOR_EVENT.unpack_from(frames[0])[0])


class Peer:
    """A DEALER connection to another service, driven by the owner's loop."""

    def __init__(self, service: Service, endpoint: str, default_timeout_s: float = 10.0) -> None:
        self.endpoint = endpoint
        self._service = service
        self._socket = service.ctx.socket(zmq.DEALER)
        service.secure_client(self._socket)
        self._socket.linger = 0
        self._socket.copy_threshold = COPY_THRESHOLD
        # Sends are NOBLOCK: requests to a peer that is down queue up to the socket's limit
        # and time out; past it they fail at once, and the loop never blocks.
        self._socket.connect(endpoint)
        self._ids = itertools.count(1)
        self._pending: dict[int, ReplyCallback] = {}
        self._deadlines: list[tuple[float, int]] = []
        self.default_timeout_s = default_timeout_s
        service.add_reader(self._socket, self._on_readable)

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def request(
        self,
        body: AnyRequest,
        on_reply: ReplyCallback,
        payload: Payload | None = None,
        *,
        timeout_s: float | None = None,
        traceparent: str = "",
        tracestate: str = "",
    ) -> None:
        rid = next(self._ids)
        self._pending[rid] = on_reply
        deadline = time.monotonic() + (timeout_s or self.default_timeout_s)
        heapq.heappush(self._deadlines, (deadline, rid))
        env = RequestEnvelope(rid, body, traceparent, tracestate)
        if not self._send(self._service.codec.request_frames(env, payload)):
            self._pending.pop(rid, None)
            err = error_reply(
                ServiceNotAvailableError(f"{self.endpoint} is not reachable or its queue is full")
            )
            # answered from the loop, never re-entrantly from inside request()
            self._service.later(0, lambda: self._service.run_callback(on_reply, err, []))

    def oneway(self, body: AnyRequest, payload: Payload | None = None) -> bool:
        """Fire and forget; False when the peer could not take it."""
        env = RequestEnvelope(0, body, oneway=True)
        return self._send(self._service.codec.request_frames(env, payload))

    def _send(self, frames: list[Any]) -> bool:
        self._service.used(self._socket)
        try:
            send_frames(self._socket, frames, NOBLOCK, False)
        except zmq.Again:
            return False
        return True

    def _on_readable(self, sock: zmq.Socket[Any]) -> None:
        for _ in range(DRAIN_BATCH):
            frames = recv_ready(sock)
            if frames is None:
                return
            if frames and len(frames[0]) == 0:
                frames = frames[1:]
            try:
                env, payload = self._service.codec.decode_reply(frames)
            except FrameError as exc:
                self._service.bad_input.warning(
                    "undecodable reply from %s: %s", self.endpoint, exc.error
                )
                continue
            callback = self._pending.pop(env.id, None)
            if callback is not None:
                self._service.run_callback(callback, env.body, payload)

    def watch(self, events: int, on_event: Callable[[], None]) -> None:
        """Calls on_event from the loop after any of `events` (zmq.EVENT_* bits) on this
        connection, once per loop turn however many arrived together. ZeroMQ reconnects by
        itself and says nothing: a request a killed peer held is otherwise only a timeout,
        and a peer restarted empty is not seen at all."""
        monitor = self._socket.get_monitor_socket(events)

        def on_readable(sock: zmq.Socket[Any]) -> None:
            seen = False
            while sock.poll(0):
                seen |= bool(monitor_event(sock.recv_multipart(zmq.NOBLOCK)) & events)
            if seen:
                on_event()

        self._service.add_reader(monitor, on_readable)  # closed with the context on stop

    def fail_pending_when_lost(self) -> None:
        """Once the connection drops (the peer killed or restarted), everything in flight to
        it fails at once (retriable): what the peer held is gone, and callers ask again of
        its restart instead of waiting out their timeouts."""
        self.watch(zmq.EVENT_DISCONNECTED, lambda: self.fail_pending("the connection dropped"))

    def fail_pending(self, why: str) -> None:
        """Answers every request in flight with a retriable ConnectionFailedError (the peer
        went away holding them: a long poll, a put), so that callers ask again at once."""
        waiting, self._pending = self._pending, {}
        self._deadlines.clear()
        for callback in waiting.values():
            err = ConnectionFailedError(f"{self.endpoint}: {why}")
            self._service.run_callback(callback, error_reply(err), [])

    def expire(self, now: float) -> None:
        while self._deadlines and self._deadlines[0][0] <= now:
            _, rid = heapq.heappop(self._deadlines)
            callback = self._pending.pop(rid, None)
            if callback is not None:
                err = RequestTimeoutError(f"no reply from {self.endpoint} in time")
                self._service.run_callback(callback, error_reply(err), [])
        if not self._pending and self._deadlines:
            self._deadlines.clear()
