"""The service base: one ZeroMQ ROUTER loop with a handler table, timers and peers.

A service is single-threaded: requests, replies from peers, feed messages and timers all run on
the loop, so state needs no locks. A handler returns its reply, or None to answer later through
its Call (long polling, forwarding to another service). Bad frames and unknown requests get a
typed ErrorReply and the loop goes on; a handler's crash becomes SYSTEM_ERROR for that request.
Whatever else fails while one message is read, that message is dropped with a throttled log
line: nothing a peer sends ends the loop.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import select
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import zmq
from opentelemetry.trace import SpanKind
from zmq.utils.monitor import recv_monitor_message

from ferry.protocol.errors import (
    ConnectionFailedError,
    FerryError,
    RequestCodeNotSupportedError,
    RequestTimeoutError,
    ServiceNotAvailableError,
    SystemBusyError,
)
from ferry.protocol.frames import EVENTS, NOBLOCK, POLLIN, recv_ready, recv_ready_peer, send_frames
from ferry.protocol.framing import FrameError, RequestCodec, RequestEnvelope
from ferry.protocol.messages import (
    AnyReply,
    AnyRequest,
    ErrorReply,
    MetricsReply,
    MetricsRequest,
    PingRequest,
    PongReply,
    PushAuthSnapshotRequest,
    Request,
)
from ferry.runtime import metrics, telemetry
from ferry.runtime.security import settings
from ferry.runtime.throttled_log import ThrottledLog

log = logging.getLogger("ferry.service")

Payload = list[Any]
HandlerResult = AnyReply | tuple[AnyReply, Payload] | None
Handler = Callable[[Any, "Call"], HandlerResult]
ReplyCallback = Callable[[AnyReply, Payload], None]

DRAIN_BATCH = 256  # messages taken from one socket before other sockets get a turn
# Frames up to this size are copied into ZeroMQ even when sent with copy=False. pyzmq sends
# bigger ones zero-copy (its default threshold is 64 KiB, less than one batch of 128 x 1 KB),
# and each such frame, once sent, wakes pyzmq's garbage-collector thread, which takes the GIL
# from the loop: copying a batch or a pull (~128-300 KiB) costs less than that hand-off;
# copying a log read or an HA transfer (1-4 MiB) does not.
COPY_THRESHOLD = 512 * 1024
MAX_POLL_MS = 200
# A ZeroMQ socket is woken through its ZMQ_FD, which only says "look at ZMQ_EVENTS"; any send
# or receive on the socket may take that signal, so a socket the loop used is asked again
# before the loop sleeps, and every socket at least this often (belt and braces).
SWEEP_S = 0.2


def error_reply(err: FerryError) -> ErrorReply:
    return ErrorReply(code=int(err.code), message=err.message, retriable=err.retriable)


@dataclass(frozen=True)
class ReturnAddress:
    """Where a request came from: enough to send that client something later, unasked."""

    socket: Any
    routing: tuple[Any, ...]


NOTICE_ID = 0  # the correlation id of messages a service sends unasked


class Call:
    """One request being served; answer it once with reply() or fail()."""

    __slots__ = (
        "_service",
        "_socket",
        "deferred",
        "done",
        "id",
        "oneway",
        "payload",
        "request",
        "routing",
        "signer",
        "traceparent",
        "tracestate",
    )

    def __init__(
        self,
        service: Service,
        socket: zmq.Socket[Any],
        routing: list[Any],
        env: RequestEnvelope,
        payload: Payload,
    ) -> None:
        self._service = service
        self._socket = socket
        self.routing = routing
        self.id = env.id
        self.request: AnyRequest = env.body
        self.payload = payload
        self.traceparent = env.traceparent
        self.tracestate = env.tracestate
        self.oneway = env.oneway
        # the access key that signed it ("" unsigned); the guard has checked the signature
        self.signer = env.auth.access_key if env.auth is not None else ""
        self.done = False
        self.deferred = False

    def reply(self, body: AnyReply, payload: Payload | None = None) -> None:
        if self.done:
            return
        self.done = True
        if self.deferred:
            self._service.deferred_calls -= 1
        if self.oneway:
            if isinstance(body, ErrorReply):
                log.debug("oneway %s failed: %s", type(self.request).__name__, body.message)
            return
        self._service.send_reply(self._socket, self.routing, self.id, body, payload)

    def fail(self, err: FerryError) -> None:
        self.reply(error_reply(err))

    @property
    def return_address(self) -> ReturnAddress:
        return ReturnAddress(self._socket, tuple(self.routing))


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
                seen |= bool(recv_monitor_message(sock, zmq.NOBLOCK)["event"] & events)
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


class Service:
    """Composition root helper: sockets, handler table, timers, run loop."""

    def __init__(self, name: str, *, max_deferred: int = 10_000, version: str = "") -> None:
        self.name = name
        self.version = version
        self.ctx: zmq.Context[Any] = zmq.Context()
        # signed with the cluster's inner credentials when authentication is on
        # (over their header only: a payload was checked where it entered the cluster)
        self.codec = RequestCodec(settings.inner_credentials(), sign_payload=False)
        self.guard = settings.guard_for(name)
        # tlsEnable: CURVE on every socket (security.curve); None without
        self.curve = settings.curve_server(self.ctx)
        self._curve_client = settings.curve_client()
        self.max_deferred = max_deferred
        self.deferred_calls = 0
        # One poll(2) over every socket's ZMQ_FD and every plain fd. zmq.Poller asked each
        # socket's ZMQ_EVENTS twice per wait (two syscalls each: ~50 per sync send in
        # remoting); this loop asks only the sockets whose fd fired or that it used.
        self._poll = select.poll()
        self._readers: dict[Any, Callable[[Any], None]] = {}
        self._by_fd: dict[int, Any] = {}
        self._used: set[Any] = set()  # ZeroMQ sockets to ask before sleeping
        self._next_sweep = 0.0
        self._handlers: dict[type[Any], Handler] = {
            PingRequest: self._ping,
            MetricsRequest: self._metrics,
        }
        self._timers: list[tuple[float, int, Callable[[], None], float]] = []
        self._timer_seq = itertools.count()
        self._peers: list[Peer] = []
        self._stop_hooks: list[Callable[[], None]] = []
        self._after_poll: list[Callable[[], None]] = []
        self._stopping = False
        self._signals_installed = False
        self._bad_frames = 0
        # bad frames and messages dropped by the loop's last-resort guard
        self.bad_input = ThrottledLog(log)
        # a periodic step failing every round (a save on a full disk) logs a few lines, not
        # one per round
        self._timer_failures = ThrottledLog(log)
        self.busy_exempt: set[type[Any]] = {PingRequest, MetricsRequest}
        if self.guard is not None and metrics.enabled():
            refusals = self.guard.refusals
            metrics.observe(
                metrics.registry(),
                metrics.AUTH_REFUSALS,
                "counter",
                "requests refused by authentication or authorization",
                lambda: [
                    (n, {"reason": reason, "request": request})
                    for (reason, request), n in list(refusals.items())
                ],
            )
        if self.guard is not None and name in settings.MIRRORS:
            # users are the brokers': they push them here (security.mirror)
            mirror = settings.mirror()
            self.guard.users = mirror
            self.on(PushAuthSnapshotRequest, mirror.push)

    # ---- wiring ----

    def bind_router(self, endpoint: str) -> str:
        """Binds a ROUTER for requests; returns the actual endpoint (port 0 resolved)."""
        sock = self.ctx.socket(zmq.ROUTER)
        sock.linger = 500
        sock.copy_threshold = COPY_THRESHOLD
        sock.setsockopt(zmq.ROUTER_MANDATORY, 0)
        if self.curve is not None:
            self.curve.serve(sock, internal=self.name not in settings.CLIENT_FACING)
        bound = bind(sock, endpoint)
        self.add_reader(sock, self._on_router)
        if threading.current_thread() is threading.main_thread():
            # before the READY line goes out: a SIGTERM right after it must stop us cleanly
            self._install_signals()
        return bound

    def bind_pub(
        self, endpoint: str, hwm: int = 1000, xpub: bool = False
    ) -> tuple[zmq.Socket[Any], str]:
        """A PUB socket; a subscriber that falls `hwm` messages behind loses the excess.
        xpub: an XPUB, whose owner reads the (un)subscriptions from it."""
        sock = self.ctx.socket(zmq.XPUB if xpub else zmq.PUB)
        sock.linger = 0
        sock.copy_threshold = COPY_THRESHOLD
        sock.sndhwm = hwm
        if self.curve is not None:  # a feed is the services' alone
            self.curve.serve(sock, internal=True)
        return sock, bind(sock, endpoint)

    def secure_client(self, sock: zmq.Socket[Any]) -> None:
        """Before connect: with tlsEnable, this socket speaks CURVE as the cluster's own
        (peers made by connect_peer already do; feeds' SUB sockets call this)."""
        if self._curve_client is not None:
            self._curve_client.apply(sock)

    def on(self, request_type: type[Request], handler: Handler) -> None:
        self._handlers[request_type] = handler

    def add_reader(self, sock: Any, fn: Callable[[Any], None]) -> None:
        """fn(sock) runs on the loop when sock (a ZeroMQ socket or a plain fd) may have
        input; it must read until nothing is left (or a batch) and may find nothing."""
        self._readers[sock] = fn
        fd = int(sock.get(zmq.FD)) if isinstance(sock, zmq.Socket) else int(sock)
        self._by_fd[fd] = sock
        self._poll.register(fd, select.POLLIN)
        if isinstance(sock, zmq.Socket):
            self._used.add(sock)

    def used(self, sock: zmq.Socket[Any]) -> None:
        """A send on sock outside its reader: the loop asks it for input before sleeping
        (the send may have taken the wake-up of a message that arrived meanwhile)."""
        self._used.add(sock)

    def connect_peer(self, endpoint: str, default_timeout_s: float = 10.0) -> Peer:
        peer = Peer(self, endpoint, default_timeout_s)
        self._peers.append(peer)
        return peer

    def every(
        self, interval_s: float, fn: Callable[[], None], *, first_s: float | None = None
    ) -> None:
        when = time.monotonic() + (interval_s if first_s is None else first_s)
        heapq.heappush(self._timers, (when, next(self._timer_seq), fn, interval_s))

    def later(self, delay_s: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self._timers, (time.monotonic() + delay_s, next(self._timer_seq), fn, 0.0))

    def on_stop(self, fn: Callable[[], None]) -> None:
        self._stop_hooks.append(fn)

    def after_poll(self, fn: Callable[[], None]) -> None:
        """Runs fn after every round of socket reads: where a group commit flushes once for
        every request that arrived together."""
        self._after_poll.append(fn)

    # ---- run ----

    def run(self, *, handle_signals: bool = True) -> None:
        """Serves until stop() or SIGTERM/SIGINT (signals only from the main thread)."""
        if handle_signals and not self._signals_installed:
            self._install_signals()
        parent = os.environ.get("FERRY_PARENT_PID")
        if parent and parent.isdigit():
            parent_pid = int(parent)
            self.every(0.5, lambda: self._check_parent(parent_pid))
        try:
            while not self._stopping:
                for sock in self._ready():
                    try:
                        self._readers[sock](sock)
                    except Exception:  # noqa: BLE001 - logged (throttled) with its traceback
                        # the last resort: readers handle their own input's errors
                        self.bad_input.exception("%s: reading a socket failed", self.name)
                for fn in self._after_poll:
                    try:
                        fn()
                    except Exception:  # noqa: BLE001 - logged (throttled) with its traceback
                        self.bad_input.exception("%s: after-poll step failed", self.name)
                self._run_timers()
        finally:
            self._shutdown()

    def stop(self) -> None:
        self._stopping = True

    def _ready(self) -> list[Any]:
        """The sockets and fds to read now: the used sockets that have input, then whatever
        poll(2) reports (at once if some are ready, else waiting up to the next timer)."""
        now = time.monotonic()
        if now >= self._next_sweep:
            self._next_sweep = now + SWEEP_S
            self._used.update(s for s in self._readers if isinstance(s, zmq.Socket))
        used, self._used = self._used, set()
        ready = [s for s in used if int(s.get(EVENTS)) & POLLIN]
        timeout = 0 if ready else MAX_POLL_MS
        if self._timers and timeout:
            timeout = max(0, min(timeout, int((self._timers[0][0] - now) * 1000) + 1))
        for fd, _ in self._poll.poll(timeout):
            sock = self._by_fd[fd]
            if sock not in ready:
                ready.append(sock)
        for sock in ready:
            if isinstance(sock, zmq.Socket):
                self._used.add(sock)  # its reader receives on it
        return ready

    def _install_signals(self) -> None:
        self._signals_installed = True

        def handler(signum: int, _frame: Any) -> None:
            log.info("%s: signal %d, stopping", self.name, signum)
            self._stopping = True

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def _check_parent(self, parent_pid: int) -> None:
        if os.getppid() != parent_pid:
            log.warning("%s: parent %d is gone, stopping", self.name, parent_pid)
            self._stopping = True

    def _run_timers(self) -> None:
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            _, _, fn, interval = heapq.heappop(self._timers)
            if interval > 0:
                heapq.heappush(self._timers, (now + interval, next(self._timer_seq), fn, interval))
            try:
                fn()
            except Exception:  # noqa: BLE001 - logged (throttled) with its traceback
                self._timer_failures.exception(
                    "%s: timer %s failed", self.name, getattr(fn, "__name__", fn)
                )
        for peer in self._peers:
            peer.expire(now)

    def _shutdown(self) -> None:
        for hook in reversed(self._stop_hooks):
            try:
                hook()
            except Exception:
                log.exception("%s: stop hook failed", self.name)
        if self.curve is not None:
            self.curve.stop()
        self.ctx.destroy(linger=500)
        log.info("%s: stopped", self.name)

    # ---- requests ----

    def _on_router(self, sock: zmq.Socket[Any]) -> None:
        guarded = self.guard is not None
        for _ in range(DRAIN_BATCH):
            source_ip = ""
            if guarded:  # the sender's address, for the ACLs' source IP ranges
                got = recv_ready_peer(sock)
                if got is None:
                    return
                frames, source_ip = got
            else:
                plain = recv_ready(sock)
                if plain is None:
                    return
                frames = plain
            try:
                self._dispatch(sock, frames, source_ip)
            except Exception:  # noqa: BLE001 - logged (throttled) with its traceback
                # a bug reached by some input: that request is dropped, the rest are served
                self.bad_input.exception("%s: request dropped", self.name)

    def _dispatch(self, sock: zmq.Socket[Any], frames: list[Any], source_ip: str = "") -> None:
        routing = frames[:1]
        rest = frames[2:] if len(frames) > 1 and len(frames[1]) == 0 else frames[1:]
        try:
            env, payload = self.codec.decode_request(rest)
        except FrameError as exc:
            self._bad_frame(exc.error)
            self.send_reply(sock, routing, exc.request_id, error_reply(exc.error))
            return
        call = Call(self, sock, routing, env, payload)
        if self.guard is not None:
            refused = self.guard.check(env, rest, source_ip)
            if refused is not None:
                self._trace_refusal(env, refused)
                call.fail(refused)
                return
        handler = self._handlers.get(type(env.body))
        if handler is None:
            call.fail(
                RequestCodeNotSupportedError(
                    f"{self.name} does not serve {type(env.body).__name__}"
                )
            )
            return
        if self.deferred_calls >= self.max_deferred and type(env.body) not in self.busy_exempt:
            call.fail(
                SystemBusyError(
                    f"{self.name} is overloaded "
                    f"({self.deferred_calls} requests pending), retry later"
                )
            )
            return
        try:
            result = handler(env.body, call)
        except FerryError as err:
            call.fail(err)
            return
        except Exception as exc:
            log.exception("%s: %s failed", self.name, type(env.body).__name__)
            call.fail(FerryError(f"internal error in {self.name}: {type(exc).__name__}: {exc}"))
            return
        if result is None:
            if not call.done:
                call.deferred = True
                self.deferred_calls += 1
        elif isinstance(result, tuple):
            call.reply(result[0], result[1])
        else:
            call.reply(result)

    def _trace_refusal(self, env: RequestEnvelope, refused: FerryError) -> None:
        """A refused request shows in its caller's trace (when it is sampled) as an error span
        of this service naming the refusal."""
        if not env.traceparent or not telemetry.traced(env.traceparent):
            return  # a caller's sampled trace only: refusals must not mint traces
        with telemetry.server_span(
            "ferry.security",
            f"{type(env.body).__name__} refused",
            env.traceparent,
            env.tracestate,
            SpanKind.SERVER,
            **{
                "messaging.system": "rocketmq",
                "ferry.service": self.name,
                "ferry.auth.access_key": env.auth.access_key if env.auth else "",
            },
        ) as span:
            telemetry.end_error(span, refused)

    def _bad_frame(self, err: FerryError) -> None:
        self._bad_frames += 1
        self.bad_input.warning("%s: bad request #%d: %s", self.name, self._bad_frames, err)

    def send_reply(
        self,
        sock: zmq.Socket[Any],
        routing: list[Any],
        request_id: int,
        body: AnyReply,
        payload: Payload | None = None,
    ) -> None:
        frames = self.codec.reply_frames(routing, request_id, body, payload)
        self._used.add(sock)
        try:
            send_frames(sock, frames, 0, False)
        except zmq.ZMQError as exc:
            log.warning("%s: reply not sent: %s", self.name, exc)

    def notify(self, to: ReturnAddress, body: AnyReply) -> None:
        """Sends a client a message it did not ask for (a ReplyEnvelope with id NOTICE_ID)."""
        self.send_reply(to.socket, list(to.routing), NOTICE_ID, body)

    def run_callback(self, callback: ReplyCallback, body: AnyReply, payload: Payload) -> None:
        try:
            callback(body, payload)
        except FerryError as err:
            log.warning("%s: reply handler: %s", self.name, err)
        except Exception:
            log.exception("%s: reply handler failed", self.name)

    def _ping(self, _req: PingRequest, _call: Call) -> AnyReply:
        return PongReply(service=self.name, version=self.version)

    def _metrics(self, _req: MetricsRequest, _call: Call) -> AnyReply:
        return MetricsReply(service=self.name, families=metrics.snapshot())


def bind(sock: zmq.Socket[Any], endpoint: str) -> str:
    """Binds, turning a tcp port 0 into a free port; returns the endpoint actually bound."""
    if endpoint.startswith("tcp://") and endpoint.endswith(":0"):
        endpoint = endpoint[:-2] + ":*"
    if endpoint.startswith("ipc://"):
        os.makedirs(os.path.dirname(endpoint[len("ipc://") :]) or ".", exist_ok=True)
    sock.bind(endpoint)
    last = sock.getsockopt(zmq.LAST_ENDPOINT)
    return last.decode() if isinstance(last, bytes) else str(last)


def dial_address(endpoint: str) -> str:
    """A bound tcp endpoint as the host:port peers dial: 'tcp://0.0.0.0:9876' ->
    '127.0.0.1:9876' (a wildcard host is this machine's loopback)."""
    host, _, port = endpoint.removeprefix("tcp://").rpartition(":")
    if host in ("0.0.0.0", "*", ""):
        host = "127.0.0.1"
    return f"{host}:{port}"


def announce_ready(name: str, **endpoints: str) -> None:
    """The one machine-readable line a launcher waits for."""
    fields = " ".join(f"{k}={v}" for k, v in endpoints.items())
    print(f"READY {name} {fields}".rstrip(), flush=True)
