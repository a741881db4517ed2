"""The state of one connection: what its I/O thread (io_thread.py) and its callers
(connection.py, direct.py) share. The I/O thread alone touches its socket; callers queue
submissions for it, and read what its monitor saw of the peer."""

from __future__ import annotations

import collections
import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, NamedTuple

import zmq

from ferry.client.transport.base import NoticeCallback, Payload, Result, hand_notice
from ferry.client.transport.waker import Waker
from ferry.protocol.auth import Credentials
from ferry.protocol.curve import CurveClient
from ferry.protocol.messages import AnyReply, AnyRequest

if TYPE_CHECKING:
    from ferry.client.transport.direct import Direct


class Submission(NamedTuple):
    body: AnyRequest
    payload: Payload | None
    timeout_s: float
    deadline: float
    future: Future[Result] | None  # None: oneway
    traceparent: str
    tracestate: str


class ConnectionState:
    """One connection's state, set up before its I/O thread starts."""

    _thread: threading.Thread  # the I/O thread, made and started by Connection

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
        self._queue: collections.deque[Submission] = collections.deque()
        self._waker = Waker()
        self._armed = False  # a wake is on its way; saves a syscall per submission
        self._closing = False
        self._stopped = threading.Event()
        # Requests sent and not answered, by correlation id: (future, deadline, timeout).
        self._pending: dict[int, tuple[Future[Result], float, float]] = {}
        # (deadline, id) of pending requests; answered ones are dropped lazily.
        self._deadlines: list[tuple[float, int]] = []
        self._disconnects = 0  # times the monitor saw the peer go (I/O thread writes)
        self._direct_lock = threading.RLock()  # RLock: a lease may be finalized anywhere
        self._direct_all: list[Direct] = []
        self._direct_free: list[Direct] = []
        self._local = threading.local()

    def _notice(self, body: AnyReply) -> None:
        hand_notice(self._on_notice, self.address, body)
