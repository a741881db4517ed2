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
is its hot user. A thread borrows one of at most MAX_DIRECT (direct.py) sockets per connection
(returned when the thread ends); whatever the direct socket cannot do at once (not connected
yet, peer down, socket full) goes the queued way, and the I/O thread's view of the peer (its
disconnect monitor) still fails a direct wait early.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

import zmq

from ferry.client.transport.base import DEFAULT_TIMEOUT_S, NoticeCallback, Payload, Result
from ferry.client.transport.direct import DirectRequests
from ferry.client.transport.io_thread import ConnectionIo
from ferry.client.transport.state import Submission
from ferry.protocol.auth import Credentials
from ferry.protocol.curve import CurveClient
from ferry.protocol.errors import ConnectionFailedError, FerryError, RequestTimeoutError
from ferry.protocol.messages import AnyRequest, Reply

log = logging.getLogger("ferry.client.transport")

R = TypeVar("R", bound=Reply)

# Extra wait of a blocking caller past the request's own deadline: only matters if the I/O
# thread died, which must still not hang anyone.
WAIT_GRACE_S = 1.0


class Connection(DirectRequests, ConnectionIo):
    """One DEALER to one address, driven by its own I/O thread. Its state is set up by
    ConnectionState (state.py); what runs on the I/O thread is ConnectionIo's (io_thread.py),
    a direct request DirectRequests' (direct.py)."""

    def __init__(
        self,
        address: str,
        *,
        context: zmq.Context[Any] | None = None,
        on_notice: NoticeCallback | None = None,
        credentials: Credentials | None = None,
        curve: CurveClient | None = None,
    ) -> None:
        super().__init__(
            address, context=context, on_notice=on_notice, credentials=credentials, curve=curve
        )
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
            Submission(body, payload, timeout_s, deadline, future, traceparent, tracestate)
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
        self._queue.append(Submission(body, payload, 0.0, 0.0, None, traceparent, tracestate))
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
