"""Request/reply over ZeroMQ: one DEALER per broker or name server, owned by one I/O thread.

Callers on any thread submit a request and get a Future of (reply, payload frames). The I/O
thread is the only one that touches the socket: submissions wait in a deque and an eventfd
wakes the thread's poller. Replies are matched to requests by correlation id, ErrorReply
becomes the typed exception of ferry.protocol.errors, and every request has a deadline after
which its Future fails with RequestTimeoutError, whatever happens to the peer.

Future callbacks run on the I/O thread: they must be quick and must never wait on a Future of
the same connection.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import logging
import math
import os
import threading
import time
from concurrent.futures import Future, InvalidStateError
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, NamedTuple, TypeVar

import msgspec
import zmq

from ferry.protocol.errors import (
    ConnectionFailedError,
    FerryError,
    RequestTimeoutError,
    error_for,
)
from ferry.protocol.framing import FrameError, RequestCodec, RequestEnvelope
from ferry.protocol.messages import AnyReply, AnyRequest, ErrorReply, Reply

log = logging.getLogger("ferry.client.transport")

Payload = list[Any]
Result = tuple[AnyReply, Payload]
R = TypeVar("R", bound=Reply)

DEFAULT_TIMEOUT_S = 3.0
READ_BATCH = 256  # replies read in a row before submissions get a turn
SEND_HWM = 10_000
# Extra wait of a blocking caller past the request's own deadline: only matters if the I/O
# thread died, which must still not hang anyone.
WAIT_GRACE_S = 1.0


def endpoint_of(address: str) -> str:
    """ "host:port" -> "tcp://host:port"; full ZeroMQ endpoints pass through."""
    return address if "://" in address else f"tcp://{address}"


class _Submission(NamedTuple):
    body: AnyRequest
    payload: Payload | None
    timeout_s: float
    deadline: float
    future: Future[Result] | None  # None: oneway
    traceparent: str
    tracestate: str


class _Waker:
    """An fd the poller watches, written by other threads to wake the I/O thread.

    Closing takes the lock so that a late wake() never writes to a reused fd number.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open = True
        self._pipe_w = -1
        if hasattr(os, "eventfd"):
            self.fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        else:  # pragma: no cover - non-Linux
            self.fd, self._pipe_w = os.pipe()
            os.set_blocking(self.fd, False)
            os.set_blocking(self._pipe_w, False)

    def wake(self) -> None:
        with self._lock:
            if not self._open:
                return
            try:
                if self._pipe_w < 0:
                    os.eventfd_write(self.fd, 1)
                else:  # pragma: no cover - non-Linux
                    os.write(self._pipe_w, b"x")
            except BlockingIOError:
                pass  # already readable

    def clear(self) -> None:
        try:
            if self._pipe_w < 0:
                os.eventfd_read(self.fd)
            else:  # pragma: no cover - non-Linux
                os.read(self.fd, 4096)
        except BlockingIOError:
            pass

    def close(self) -> None:
        with self._lock:
            if not self._open:
                return
            self._open = False
            for fd in (self.fd, self._pipe_w):
                if fd >= 0:
                    os.close(fd)


class Connection:
    """One DEALER to one address, driven by its own I/O thread."""

    def __init__(self, address: str, *, context: zmq.Context[Any] | None = None) -> None:
        self.address = address
        self._own_context = context is None
        self._ctx: zmq.Context[Any] = zmq.Context() if context is None else context
        self._queue: collections.deque[_Submission] = collections.deque()
        self._waker = _Waker()
        self._armed = False  # a wake is on its way; saves a syscall per submission
        self._closing = False
        self._stopped = threading.Event()
        self._pending: dict[int, Future[Result]] = {}
        # One deque per timeout value: ids enter in submission order, so deadlines in a deque
        # grow and answered ids are dropped from the front cheaply.
        self._deadlines: dict[float, collections.deque[tuple[float, int]]] = {}
        self._thread = threading.Thread(target=self._run, name=f"ferry-io-{address}", daemon=True)
        self._thread.start()

    @property
    def closed(self) -> bool:
        return self._closing

    # ---- any thread ----

    def submit(
        self,
        body: AnyRequest,
        payload: Payload | None = None,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        traceparent: str = "",
        tracestate: str = "",
    ) -> Future[Result]:
        """Queues a request; the Future holds (reply, payload) or the typed error."""
        future: Future[Result] = Future()
        if self._closing:
            future.set_exception(ConnectionFailedError(f"connection to {self.address} is closed"))
            return future
        deadline = time.monotonic() + timeout_s
        self._queue.append(
            _Submission(body, payload, timeout_s, deadline, future, traceparent, tracestate)
        )
        self._wake()
        if self._stopped.is_set():  # lost a race with close(): nobody will send it
            self._fail_queued(ConnectionFailedError(f"connection to {self.address} is closed"))
        return future

    def send_oneway(
        self,
        body: AnyRequest,
        payload: Payload | None = None,
        *,
        traceparent: str = "",
        tracestate: str = "",
    ) -> None:
        """Queues a request the peer does not answer; failures are only logged."""
        if self._closing:
            raise ConnectionFailedError(f"connection to {self.address} is closed")
        self._queue.append(_Submission(body, payload, 0.0, 0.0, None, traceparent, tracestate))
        self._wake()

    def request(
        self,
        body: AnyRequest,
        payload: Payload | None = None,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        traceparent: str = "",
        tracestate: str = "",
    ) -> Result:
        """Blocking request: the reply and its payload, or the typed error raised."""
        future = self.submit(
            body, payload, timeout_s=timeout_s, traceparent=traceparent, tracestate=tracestate
        )
        return wait(future, timeout_s, self.address)

    @property
    def stopped(self) -> bool:
        """True once the I/O thread has closed the socket and failed what was pending."""
        return self._stopped.is_set()

    def close(self, timeout_s: float = 5.0) -> None:
        """Stops the I/O thread, fails what is still pending and closes the socket."""
        self._closing = True
        self._waker.wake()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.warning("I/O thread of %s did not stop in %.1fs", self.address, timeout_s)

    def _wake(self) -> None:
        if not self._armed:
            self._armed = True
            self._waker.wake()

    # ---- I/O thread ----

    def _run(self) -> None:
        sock: zmq.Socket[Any] = self._ctx.socket(zmq.DEALER)
        sock.linger = 0
        sock.sndhwm = SEND_HWM
        codec = RequestCodec()
        ids = itertools.count(1)
        poller = zmq.Poller()
        try:
            sock.connect(endpoint_of(self.address))
            poller.register(sock, zmq.POLLIN)
            poller.register(self._waker.fd, zmq.POLLIN)
            while not self._closing:
                events = dict(poller.poll(self._poll_timeout_ms()))
                if self._waker.fd in events:
                    self._armed = False
                    self._waker.clear()
                if self._queue:
                    self._send_queued(sock, codec, ids)
                if sock in events:
                    self._read_replies(sock, codec)
                if self._deadlines:
                    self._expire(time.monotonic())
        except Exception:
            log.exception("I/O thread of %s failed", self.address)
        finally:
            self._closing = True
            sock.close(linger=0)
            self._fail_all(ConnectionFailedError(f"connection to {self.address} is closed"))
            self._stopped.set()
            self._waker.close()
            if self._own_context:
                self._ctx.term()

    def _poll_timeout_ms(self) -> int:
        nearest = math.inf
        for entries in self._deadlines.values():
            if entries:
                nearest = min(nearest, entries[0][0])
        if nearest == math.inf:
            return 1000
        return max(0, min(1000, math.ceil((nearest - time.monotonic()) * 1000)))

    def _send_queued(
        self, sock: zmq.Socket[Any], codec: RequestCodec, ids: itertools.count[int]
    ) -> None:
        queue = self._queue
        while queue:
            sub = queue.popleft()
            future = sub.future
            rid = 0
            if future is not None:
                if not future.set_running_or_notify_cancel():
                    continue  # cancelled before it left
                rid = next(ids)
            env = RequestEnvelope(
                rid, sub.body, sub.traceparent, sub.tracestate, oneway=future is None
            )
            try:
                frames = codec.request_frames(env, sub.payload)
                sock.send_multipart(frames, zmq.NOBLOCK, copy=False)
            except zmq.Again:
                err: FerryError = ConnectionFailedError(
                    f"send queue to {self.address} is full ({SEND_HWM} requests)"
                )
                self._fail(future, err)
                continue
            except (msgspec.EncodeError, TypeError, ValueError, zmq.ZMQError) as exc:
                self._fail(future, FerryError(f"cannot send {type(sub.body).__name__}: {exc}"))
                continue
            if future is not None:
                self._pending[rid] = future
                entries = self._deadlines.get(sub.timeout_s)
                if entries is None:
                    entries = self._deadlines[sub.timeout_s] = collections.deque()
                entries.append((sub.deadline, rid))

    def _read_replies(self, sock: zmq.Socket[Any], codec: RequestCodec) -> None:
        for _ in range(READ_BATCH):
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            if frames and not frames[0]:
                frames = frames[1:]
            try:
                env, payload = codec.decode_reply(frames)
            except FrameError as exc:
                log.warning("undecodable reply from %s: %s", self.address, exc.error)
                continue
            future = self._pending.pop(env.id, None)
            if future is None:
                continue  # timed out already
            body = env.body
            if isinstance(body, ErrorReply):
                self._fail(future, error_for(body.code, body.message, body.retriable))
            else:
                with contextlib.suppress(InvalidStateError):  # cancelled by its caller
                    future.set_result((body, payload))

    def _expire(self, now: float) -> None:
        pending = self._pending
        for timeout_s, entries in self._deadlines.items():
            while entries:
                deadline, rid = entries[0]
                if rid not in pending:
                    entries.popleft()
                elif deadline <= now:
                    entries.popleft()
                    err = RequestTimeoutError(f"no reply from {self.address} in {timeout_s:g}s")
                    self._fail(pending.pop(rid), err)
                else:
                    break

    @staticmethod
    def _fail(future: Future[Result] | None, err: FerryError) -> None:
        if future is None:
            log.debug("oneway request not sent: %s", err)
            return
        with contextlib.suppress(InvalidStateError):
            future.set_exception(err)

    def _fail_all(self, err: FerryError) -> None:
        for future in self._pending.values():
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
            if sub.future is not None and sub.future.set_running_or_notify_cancel():
                self._fail(sub.future, err)


def wait(future: Future[Result], timeout_s: float, address: str = "") -> Result:
    """Blocks for a Future of this module; raises its typed error."""
    try:
        return future.result(timeout_s + WAIT_GRACE_S)
    except FutureTimeout:
        future.cancel()
        raise RequestTimeoutError(f"no reply from {address or 'peer'} in {timeout_s:g}s") from None


def expect(result: Result, cls: type[R]) -> R:
    """The reply of a Result as the type the request promises."""
    reply = result[0]
    if not isinstance(reply, cls):
        raise FerryError(f"expected {cls.__name__}, got {type(reply).__name__}")
    return reply


class ConnectionPool:
    """Connections by address, sharing one ZeroMQ context; one pool per client."""

    def __init__(self) -> None:
        self._ctx: zmq.Context[Any] = zmq.Context()
        self._lock = threading.Lock()
        self._conns: dict[str, Connection] = {}
        self._closed = False

    def get(self, address: str) -> Connection:
        conn = self._conns.get(address)
        if conn is not None and not conn.closed:
            return conn
        with self._lock:
            if self._closed:
                raise ConnectionFailedError("client is shut down")
            conn = self._conns.get(address)
            if conn is None or conn.closed:
                if conn is not None:
                    conn.close()
                conn = Connection(address, context=self._ctx)
                self._conns[address] = conn
            return conn

    def addresses(self) -> list[str]:
        return list(self._conns)

    def close(self, timeout_s: float = 5.0) -> None:
        with self._lock:
            self._closed = True
            conns = list(self._conns.values())
            self._conns.clear()
        for conn in conns:
            conn.close(timeout_s)
        if all(conn.stopped for conn in conns):
            self._ctx.term()
        else:
            log.warning("some I/O threads did not stop; ZeroMQ context left open")
