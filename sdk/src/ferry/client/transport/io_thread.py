"""A connection's I/O thread: the only one that touches its DEALER. It sends what callers
queued (waiting for room when ZeroMQ's queue is full), matches replies to requests by
correlation id, fails each request at its deadline, and follows the peer through the socket's
monitor: a peer gone fails its pending requests at once, and what is queued while it is down."""

from __future__ import annotations

import collections
import contextlib
import heapq
import itertools
import logging
import math
import time
from concurrent.futures import Future, InvalidStateError
from typing import Any, cast

import msgspec
import zmq
from zmq.utils.monitor import recv_monitor_message

from ferry.client.transport.base import (
    HANDSHAKE_FAILED,
    MONITOR_EVENTS,
    ZERO_COPY_MIN,
    Result,
    decode_reply,
    down_error,
    endpoint_of,
    reply_error,
    setup_dealer,
)
from ferry.client.transport.state import ConnectionState, Submission
from ferry.protocol.errors import ConnectionFailedError, FerryError, RequestTimeoutError
from ferry.protocol.frames import recv_ready, send_frames
from ferry.protocol.framing import RequestCodec, RequestEnvelope

log = logging.getLogger("ferry.client.transport")

READ_BATCH = 256  # replies read in a row before submissions get a turn
IDLE_POLL_MS = 1000
BLOCKED_POLL_MS = 100
# Plain ints: pyzmq's flag enums cost microseconds per operation on the hot path.
POLLIN = int(zmq.POLLIN)
POLLOUT = int(zmq.POLLOUT)
NOBLOCK = int(zmq.NOBLOCK)
EVENTS = int(zmq.EVENTS)


class ConnectionIo(ConnectionState):
    """What runs on the I/O thread (started by Connection with _run as its target)."""

    def _run(self) -> None:
        sock: zmq.Socket[Any] = self._ctx.socket(zmq.DEALER)
        setup_dealer(sock, self._curve)
        codec = RequestCodec(self._credentials)
        ids = itertools.count(1)
        poller = zmq.Poller()
        # ZeroMQ reconnects silently; the monitor tells us the peer went away, so that requests
        # it will never answer fail now rather than at their deadline.
        monitor = sock.get_monitor_socket(MONITOR_EVENTS)
        try:
            sock.connect(endpoint_of(self.address))
            poller.register(sock, POLLIN)
            poller.register(self._waker.fd, POLLIN)
            poller.register(monitor, POLLIN)
            blocked = False  # the socket's send queue is full: wait for POLLOUT
            while not self._closing:
                events = dict(poller.poll(self._poll_timeout_ms(blocked)))
                if self._waker.fd in events:
                    # Clear first, then disarm: a submitter who still sees "armed" queued
                    # before the drain below; one who sees "disarmed" writes a new wake.
                    self._waker.clear()
                    self._armed = False
                flags = events.get(sock, 0)
                if flags & POLLIN:
                    self._read_replies(sock, codec)
                if monitor in events:
                    self._on_monitor(monitor)
                if self._queue and self._down:
                    self._fail_queued(self._down_error())
                if self._queue and (not blocked or flags & POLLOUT):
                    now_blocked = not self._send_queued(sock, codec, ids)
                    if now_blocked != blocked:
                        blocked = now_blocked
                        poller.modify(sock, POLLIN | (POLLOUT if blocked else 0))
                if self._deadlines:
                    self._expire(time.monotonic())
                if blocked:
                    self._expire_queued(time.monotonic())
        except Exception:
            log.exception("I/O thread of %s failed", self.address)
        finally:
            self._closing = True
            with contextlib.suppress(zmq.ZMQError):
                sock.disable_monitor()
            monitor.close(linger=0)
            sock.close(linger=0)
            self._fail_all(ConnectionFailedError(f"connection to {self.address} is closed"))
            self._stopped.set()
            self._waker.close()
            if self._own_context:
                self._ctx.term()

    def _poll_timeout_ms(self, blocked: bool) -> int:
        longest = BLOCKED_POLL_MS if blocked else IDLE_POLL_MS
        heap, pending = self._deadlines, self._pending
        while heap and heap[0][1] not in pending:
            heapq.heappop(heap)
        if not heap:
            return longest
        return max(0, min(longest, math.ceil((heap[0][0] - time.monotonic()) * 1000)))

    def _send_queued(
        self, sock: zmq.Socket[Any], codec: RequestCodec, ids: itertools.count[int]
    ) -> bool:
        """Sends what is queued; False when the socket is full and the rest must wait."""
        queue = self._queue
        while queue:
            sub = queue.popleft()
            future = sub.future
            if future is not None and future.cancelled():
                continue  # its caller gave up before it left
            rid = 0 if future is None else next(ids)
            env = RequestEnvelope(
                rid, sub.body, sub.traceparent, sub.tracestate, oneway=future is None
            )
            try:
                frames = codec.request_frames(env, sub.payload)
                big = sub.payload is not None and any(len(f) >= ZERO_COPY_MIN for f in sub.payload)
                send_frames(sock, frames, NOBLOCK, not big)
            except zmq.Again:
                queue.appendleft(sub)
                return False
            except (msgspec.EncodeError, TypeError, ValueError, zmq.ZMQError) as exc:
                self._fail(future, FerryError(f"cannot send {type(sub.body).__name__}: {exc}"))
                continue
            if future is not None:
                self._pending[rid] = (future, sub.deadline, sub.timeout_s)
                heapq.heappush(self._deadlines, (sub.deadline, rid))
        if len(self._deadlines) > 2 * len(self._pending) + 1024:
            # Mostly answered entries: rebuild rather than let them pile up.
            self._deadlines = [(d, rid) for rid, (_, d, _) in self._pending.items()]
            heapq.heapify(self._deadlines)
        return True

    def _read_replies(self, sock: zmq.Socket[Any], codec: RequestCodec) -> None:
        for _ in range(READ_BATCH):
            frames: list[Any] | None = recv_ready(sock)
            if frames is None:
                return
            decoded = decode_reply(codec, frames, self.address)
            if decoded is None:
                continue
            env, payload = decoded
            if env.id == 0:
                self._notice(env.body)
                continue
            entry = self._pending.pop(env.id, None)
            if entry is None:
                continue  # timed out already
            future = entry[0]
            error = reply_error(env.body)
            if error is not None:
                self._fail(future, error)
            else:
                with contextlib.suppress(InvalidStateError):  # cancelled by its caller
                    future.set_result((env.body, payload))

    def _on_monitor(self, monitor: zmq.Socket[Any]) -> None:
        while int(monitor.get(EVENTS)) & POLLIN:
            event = cast(dict[str, Any], recv_monitor_message(monitor, NOBLOCK))
            if event["event"] == zmq.EVENT_CONNECTED:
                self._down = self._refused = False
                continue
            if event["event"] & HANDSHAKE_FAILED:
                self._down = self._mismatch = True
                continue
            self._down = True  # disconnected, or a connection attempt failed
            if event["event"] != zmq.EVENT_DISCONNECTED:
                self._refused = True
                continue
            self._disconnects += 1  # direct waits give up too
            if self._pending:
                log.info("%s disconnected: failing %d requests", self.address, len(self._pending))
                err = ConnectionFailedError(f"connection to {self.address} was lost")
                pending = list(self._pending.values())
                self._pending.clear()
                self._deadlines.clear()
                for future, _, _ in pending:
                    self._fail(future, err)

    def _down_error(self) -> ConnectionFailedError:
        return down_error(self.address, self._mismatch, self._refused, self._curve is not None)

    def _expire(self, now: float) -> None:
        heap, pending = self._deadlines, self._pending
        while heap and heap[0][0] <= now:
            _, rid = heapq.heappop(heap)
            entry = pending.pop(rid, None)
            if entry is not None:
                err = RequestTimeoutError(f"no reply from {self.address} in {entry[2]:g}s")
                self._fail(entry[0], err)

    def _expire_queued(self, now: float) -> None:
        """While the peer takes nothing, queued requests time out here (rare: a full queue)."""
        queue = self._queue
        if not queue or not any(sub.deadline <= now for sub in queue):
            return
        kept: collections.deque[Submission] = collections.deque()
        while True:
            try:
                sub = queue.popleft()
            except IndexError:
                break
            if sub.future is not None and sub.deadline <= now:
                err = RequestTimeoutError(f"{self.address} took no request in {sub.timeout_s:g}s")
                self._fail(sub.future, err)
            else:
                kept.append(sub)
        # Submitters may have appended meanwhile; they stay behind the kept ones.
        queue.extendleft(reversed(kept))

    @staticmethod
    def _fail(future: Future[Result] | None, err: FerryError) -> None:
        if future is None:
            log.debug("oneway request not sent: %s", err)
            return
        with contextlib.suppress(InvalidStateError):
            future.set_exception(err)

    def _fail_all(self, err: FerryError) -> None:
        for future, _, _ in self._pending.values():
            self._fail(future, err)
        self._pending.clear()
        self._deadlines.clear()
        self._fail_queued(err)

    def _fail_queued(self, err: FerryError) -> None:
        while True:
            try:
                sub = self._queue.popleft()
            except IndexError:
                return
            self._fail(sub.future, err)
