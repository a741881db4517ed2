"""The service base: one ZeroMQ ROUTER loop with a handler table, timers and peers.

A service is single-threaded: requests, replies from peers, feed messages and timers all run on
the loop, so state needs no locks. A handler returns its reply, or None to answer later through
its Call (long polling, forwarding to another service). Bad frames and unknown requests get a
typed ErrorReply and the loop goes on; a handler's crash becomes SYSTEM_ERROR for that request.
Whatever else fails while one message is read, that message is dropped with a throttled log
line: nothing a peer sends ends the loop.

The Call (ferry.runtime.call), the Peer (ferry.runtime.peer) and the endpoint helpers
(ferry.runtime.endpoints) live beside it and are importable from here, as they always were.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import zmq

from ferry.protocol.errors import (
    FerryError,
    RequestCodeNotSupportedError,
    SystemBusyError,
)
from ferry.protocol.frames import recv_ready, recv_ready_peer, send_frames
from ferry.protocol.framing import FrameError, RequestCodec
from ferry.protocol.messages import (
    AnyReply,
    MetricsReply,
    MetricsRequest,
    PingRequest,
    PongReply,
    PushAuthSnapshotRequest,
    Request,
)
from ferry.runtime import metrics
from ferry.runtime.call import (
    NOTICE_ID,
    Call,
    Handler,
    HandlerResult,
    Payload,
    ReplyCallback,
    ReturnAddress,
    error_reply,
)
from ferry.runtime.endpoints import announce_ready, bind, dial_address
from ferry.runtime.peer import COPY_THRESHOLD, DRAIN_BATCH, Peer
from ferry.runtime.poller import Poller
from ferry.runtime.security import settings
from ferry.runtime.security.refusal_trace import trace_refusal
from ferry.runtime.throttled_log import ThrottledLog

__all__ = [
    "COPY_THRESHOLD",
    "DRAIN_BATCH",
    "NOTICE_ID",
    "Call",
    "Handler",
    "HandlerResult",
    "Payload",
    "Peer",
    "ReplyCallback",
    "ReturnAddress",
    "Service",
    "announce_ready",
    "bind",
    "dial_address",
    "error_reply",
]

log = logging.getLogger("ferry.service")


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
        self._poller = Poller()
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
        self._poller.add(sock, fn)

    @property
    def poller(self) -> Poller:
        """The loop's Poller: a transport on plain sockets (ferry.runtime.tcp_door) adds,
        removes and asks write readiness for its fds there."""
        return self._poller

    def used(self, sock: zmq.Socket[Any]) -> None:
        """A send on sock outside its reader: the loop asks it for input before sleeping
        (the send may have taken the wake-up of a message that arrived meanwhile)."""
        self._poller.used.add(sock)

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
            readers = self._poller.readers
            while not self._stopping:
                for sock in self._poller.ready(self._timers[0][0] if self._timers else None):
                    try:
                        readers[sock](sock)
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
                trace_refusal(self.name, env, refused)
                call.fail(refused)
                return
        self.serve(env.body, call)

    def serve(self, body: Any, call: Any) -> None:
        """Runs the handler of one decoded (and, where security is on, checked) request and
        answers through call: the one path every wire's requests take to the handlers (a
        protocol door brings a call of its own with done, deferred, reply() and fail())."""
        handler = self._handlers.get(type(body))
        if handler is None:
            call.fail(
                RequestCodeNotSupportedError(f"{self.name} does not serve {type(body).__name__}")
            )
            return
        if self.deferred_calls >= self.max_deferred and type(body) not in self.busy_exempt:
            call.fail(
                SystemBusyError(
                    f"{self.name} is overloaded "
                    f"({self.deferred_calls} requests pending), retry later"
                )
            )
            return
        try:
            result = handler(body, call)
        except FerryError as err:
            call.fail(err)
            return
        except Exception as exc:
            log.exception("%s: %s failed", self.name, type(body).__name__)
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
        self._poller.used.add(sock)
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
