"""Request/reply over ZeroMQ: one DEALER per broker or name server, owned by one I/O thread.

Callers on any thread submit a request and get a Future of (reply, payload frames). The I/O
thread is the only one that touches the socket: submissions wait in a deque and an eventfd
wakes the thread's poller. Replies are matched to requests by correlation id, ErrorReply
becomes the typed exception of ferry.protocol.errors, and every request has a deadline after
which its Future fails with RequestTimeoutError, whatever happens to the peer.

Future callbacks run on the I/O thread: they must be quick and must never wait on a Future of
the same connection.

A peer may also send notices unasked (a ReplyEnvelope with id 0, e.g. the broker's
ConsumerIdsChangedNotice); they go to the connection's `on_notice` callback, on the I/O thread.
Requests go out only on a completed connection (ZMQ_IMMEDIATE): while a peer is unreachable
(it went away, or refuses connections) they fail at once with ConnectionFailedError rather
than wait out their timeout in a queue nobody reads, and none is delivered late after its
caller gave up. A producer then retries on another broker within its send timeout.

A blocking request may also go `direct`: the calling thread sends on a DEALER of its own (a
ferry.protocol.rpc.BlockingClient) and waits on that socket for the reply, which saves the two
thread hand-offs (caller -> I/O thread, I/O thread -> caller) of the queued path; a sync send
is its hot user. A thread borrows one of at most MAX_DIRECT such sockets per connection
(returned when the thread ends); whatever the direct socket cannot do at once (not connected
yet, peer down, socket full) goes the queued way, and the I/O thread's view of the peer (its
disconnect monitor) still fails a direct wait early.
"""

from __future__ import annotations

import collections
import contextlib
import heapq
import itertools
import logging
import math
import os
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Generic, NamedTuple, TypeVar, cast

import msgspec
import zmq
from zmq.utils.monitor import recv_monitor_message

from ferry.protocol.auth import Credentials
from ferry.protocol.curve import CurveClient, client_for
from ferry.protocol.errors import (
    ConnectionFailedError,
    FerryError,
    RequestTimeoutError,
    error_for,
)
from ferry.protocol.frames import recv_ready, send_frames
from ferry.protocol.framing import FrameError, ReplyEnvelope, RequestCodec, RequestEnvelope
from ferry.protocol.messages import AnyReply, AnyRequest, ErrorReply, Reply
from ferry.protocol.rpc import BlockingClient

log = logging.getLogger("ferry.client.transport")

Payload = list[Any]
Result = tuple[AnyReply, Payload]
R = TypeVar("R", bound=Reply)
ConnT = TypeVar("ConnT")
NoticeCallback = Callable[[str, AnyReply], None]  # (peer address, notice)

DEFAULT_TIMEOUT_S = 3.0
READ_BATCH = 256  # replies read in a row before submissions get a turn
SEND_HWM = 10_000  # requests ZeroMQ queues per peer; beyond it they wait in our deque
IDLE_POLL_MS = 1000
# Plain ints: pyzmq's flag enums cost microseconds per operation on the hot path.
POLLIN = int(zmq.POLLIN)
POLLOUT = int(zmq.POLLOUT)
NOBLOCK = int(zmq.NOBLOCK)
EVENTS = int(zmq.EVENTS)
# Frames from this size on are handed to ZeroMQ without a copy. Each such frame, once sent,
# wakes pyzmq's garbage-collector thread, which takes the GIL: copying a batch (up to
# send_async's 512 KiB) costs less than that, as in the services (ferry.runtime.service).
ZERO_COPY_MIN = 512 * 1024 + 1
BLOCKED_POLL_MS = 100
# Extra wait of a blocking caller past the request's own deadline: only matters if the I/O
# thread died, which must still not hang anyone.
WAIT_GRACE_S = 1.0
MAX_DIRECT = 8  # caller-owned sockets per connection (threads beyond it use the I/O thread)
# A direct wait wakes this often to see whether the peer went away or the connection closed.
DIRECT_SLICE_MS = 50


def endpoint_of(address: str) -> str:
    """ "host:port" -> "tcp://host:port"; full ZeroMQ endpoints pass through."""
    return address if "://" in address else f"tcp://{address}"


# a peer that speaks CURVE to a plain client, or with another key (ZMQ_EVENT_HANDSHAKE_*)
HANDSHAKE_FAILED = (
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)


# what a client's monitor watches on its DEALER
MONITOR_EVENTS = (
    zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECTED | zmq.EVENT_CONNECT_RETRIED | HANDSHAKE_FAILED
)


def setup_dealer(sock: zmq.Socket[Any], curve: CurveClient | None) -> None:
    """A client's DEALER to a broker or name server (the sync and the asyncio transport's)."""
    sock.linger = 0
    sock.sndhwm = SEND_HWM
    # Replies are never dropped on our side: a full receive queue would push back through
    # TCP to the peer's ROUTER, which drops what passes its own high-water mark, and the
    # request would then wait out its timeout (seen with 5,000 requests in flight).
    sock.rcvhwm = 0
    sock.immediate = True  # queue only on completed connections
    if curve is not None:
        curve.apply(sock)


def down_error(address: str, mismatch: bool, refused: bool, curve: bool) -> ConnectionFailedError:
    """Why a request cannot go now, said once and plainly (callers add who the peer is)."""
    if mismatch:
        return ConnectionFailedError(
            f"{address} did not complete the security handshake: the cluster has "
            "tlsEnable (give tls_server_key, its server.key) or the key is not its key"
            if not curve
            else f"{address} did not complete the CURVE handshake: is tls_server_key "
            "this cluster's server.key, and does it have tlsEnable?"
        )
    if refused:
        return ConnectionFailedError(f"connection refused: nothing answers at {address}")
    return ConnectionFailedError(f"connection to {address} was lost")


def decode_reply(
    codec: RequestCodec, frames: list[Any], address: str
) -> tuple[ReplyEnvelope, Payload] | None:
    """A reply's envelope and payload frames; None (logged) when it does not decode."""
    if frames and not frames[0]:
        frames = frames[1:]
    try:
        return codec.decode_reply(frames)
    except FrameError as exc:
        log.warning("undecodable reply from %s: %s", address, exc.error)
        return None


def reply_error(body: AnyReply) -> FerryError | None:
    """The typed error an ErrorReply stands for; None for any other reply."""
    if isinstance(body, ErrorReply):
        return error_for(body.code, body.message, body.retriable)
    return None


def hand_notice(on_notice: NoticeCallback | None, address: str, body: AnyReply) -> None:
    """A notice (a reply with id 0) to the client's callback; its failure is only logged."""
    if on_notice is None:
        return
    try:
        on_notice(address, body)
    except Exception:
        log.exception("notice handler failed for %s from %s", type(body).__name__, address)


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


class _Direct:
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


class _Lease:
    """A thread's hold on a _Direct, kept in the connection's thread-local: when the thread
    ends, the lease is dropped and the socket goes back to the free list."""

    def __init__(self, conn: Connection, direct: _Direct) -> None:
        self.direct = direct
        # a weak reference: a lease must not keep a connection nobody uses any more alive
        self._finalizer = weakref.finalize(self, _Lease._release, weakref.ref(conn), direct)

    @staticmethod
    def _release(conn_ref: weakref.ref[Connection], direct: _Direct) -> None:
        conn = conn_ref()
        if conn is not None:
            conn._release_direct(direct)


class Connection:
    """One DEALER to one address, driven by its own I/O thread."""

    def __init__(
        self,
        address: str,
        *,
        context: zmq.Context[Any] | None = None,
        on_notice: NoticeCallback | None = None,
        credentials: Credentials | None = None,
        curve: CurveClient | None = None,
    ) -> None:
        self.address = address
        self._credentials = credentials
        self._curve = curve
        self._on_notice = on_notice
        self._down = False  # the peer went away and ZeroMQ has not reconnected yet (I/O thread)
        self._refused = False  # ... and the last connection attempt failed (I/O thread)
        self._mismatch = False  # ... and its security handshake failed (I/O thread)
        self._own_context = context is None
        self._ctx: zmq.Context[Any] = zmq.Context() if context is None else context
        self._queue: collections.deque[_Submission] = collections.deque()
        self._waker = _Waker()
        self._armed = False  # a wake is on its way; saves a syscall per submission
        self._closing = False
        self._stopped = threading.Event()
        # Requests sent and not answered, by correlation id: (future, deadline, timeout).
        self._pending: dict[int, tuple[Future[Result], float, float]] = {}
        # (deadline, id) of pending requests; answered ones are dropped lazily.
        self._deadlines: list[tuple[float, int]] = []
        self._disconnects = 0  # times the monitor saw the peer go (I/O thread writes)
        self._direct_lock = threading.RLock()  # RLock: a lease may be finalized anywhere
        self._direct_all: list[_Direct] = []
        self._direct_free: list[_Direct] = []
        self._local = threading.local()
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
        direct: bool = False,
    ) -> Result:
        """Blocking request: the reply and its payload, or the typed error raised.

        direct: send and wait on a socket of the calling thread when one is ready (see the
        module's doc); never from a Future callback (an I/O thread)."""
        if direct:
            lease = self._lease()
            if lease is not None:
                result = self._request_direct(
                    lease.direct, body, payload, timeout_s, traceparent, tracestate
                )
                if result is not None:
                    return result
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
        self._close_direct(timeout_s)
        self._waker.wake()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.warning("I/O thread of %s did not stop in %.1fs", self.address, timeout_s)

    def _wake(self) -> None:
        if not self._armed:
            self._armed = True
            self._waker.wake()

    # ---- direct requests (calling thread) ----

    def _lease(self) -> _Lease | None:
        """The calling thread's direct socket, borrowed on first use; None when there is none
        to be had (closing, all taken, or this is the I/O thread)."""
        lease: _Lease | None = getattr(self._local, "lease", None)
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
                    direct = _Direct(self._ctx, self.address, self._credentials, self._curve)
                except zmq.ZMQError as exc:
                    log.debug("no direct socket to %s: %s", self.address, exc)
                    return None
                self._direct_all.append(direct)
            else:
                return None
        lease = _Lease(self, direct)
        self._local.lease = lease
        return lease

    def _release_direct(self, direct: _Direct) -> None:
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
        direct: _Direct,
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

    # ---- I/O thread ----

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

    def _notice(self, body: AnyReply) -> None:
        hand_notice(self._on_notice, self.address, body)

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
        kept: collections.deque[_Submission] = collections.deque()
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


class PoolBase(Generic[ConnT]):
    """Connections by address, one pool per client: what the sync and the asyncio pools
    keep alike (the options each connection gets)."""

    def __init__(
        self,
        on_notice: NoticeCallback | None = None,
        credentials: Credentials | None = None,
        tls_server_key: str | None = None,
    ) -> None:
        # tlsEnable: CURVE to servers with this public key (a key file or the key itself)
        self._curve = client_for(tls_server_key) if tls_server_key else None
        self._on_notice = on_notice
        self.credentials = credentials
        self._conns: dict[str, ConnT] = {}
        self.closed = False
        self._setup()

    def _setup(self) -> None:
        """What a kind of pool adds: its ZeroMQ context (the constructor's last step)."""
        raise NotImplementedError


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
