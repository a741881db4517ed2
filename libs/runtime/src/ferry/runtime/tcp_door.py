"""A TCP door into a Service: a listening socket whose connections carry length-prefixed frames,
served on the service's own loop (its Poller) beside the ZeroMQ sockets. No threads.

The door knows one thing of the protocol above it: a frame is a 4-byte big-endian length, then
that many bytes. Each whole frame goes to on_frame(conn, frame) (the bytes after the length);
replies go out through conn.send() or conn.send_frame(). The connection's code is in
ferry.runtime.tcp_connection.

Bounds: frames longer than max_frame_bytes or shorter than min_frame_bytes, and output a peer
does not read past max_output_bytes, close that connection; past max_connections a new
connection is accepted and closed at once. Errors on one connection (a reset, a broken pipe)
close it and reach the owner as on_close(conn); they never reach the loop.
"""

from __future__ import annotations

import errno
import itertools
import logging
import socket
from collections.abc import Callable

from ferry.runtime.poller import Poller
from ferry.runtime.service import Service
from ferry.runtime.tcp_connection import READ_CHUNK, Connection
from ferry.runtime.throttled_log import ThrottledLog

__all__ = ["Connection", "TcpDoor"]

log = logging.getLogger("ferry.tcp_door")

MAX_FRAME_BYTES = 16 * 1024 * 1024  # RocketMQ's remoting frame limit
MAX_OUTPUT_BYTES = 64 * 1024 * 1024
MAX_CONNECTIONS = 10_000
ACCEPT_BATCH = 64
# ZMTP 3 greetings start with 0xFF: read as a frame length, a Ferry client on the wrong port
ZMTP_SIGNATURE_FIRST_BYTE = 0xFF
# accept(2) failing for want of fds (EMFILE) would wake the loop at once forever: stop
# listening for a while instead
ACCEPT_PAUSE_S = 0.5

FrameHandler = Callable[[Connection, bytes], None]
ConnectionHandler = Callable[[Connection], None]


def _peer_name(address: object) -> str:
    if isinstance(address, tuple) and len(address) >= 2:
        host, port = address[0], address[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return str(address)


class TcpDoor:
    """Listens on host:port (port 0: a free one; the bound one is in .host, .port, .address)
    from construction on; serves once service.run() runs; closes with the service."""

    def __init__(
        self,
        service: Service,
        host: str,
        port: int,
        on_frame: FrameHandler,
        *,
        on_open: ConnectionHandler | None = None,
        on_close: ConnectionHandler | None = None,
        name: str = "tcp",
        min_frame_bytes: int = 0,
        max_frame_bytes: int = MAX_FRAME_BYTES,
        max_output_bytes: int = MAX_OUTPUT_BYTES,
        max_connections: int = MAX_CONNECTIONS,
        backlog: int = 1024,
    ) -> None:
        self.service = service
        self.poller: Poller = service.poller
        self.name = name
        self.on_frame = on_frame
        self.on_open = on_open
        self.on_close = on_close
        self.min_frame_bytes = min_frame_bytes
        self.max_frame_bytes = max_frame_bytes
        self.max_output_bytes = max_output_bytes
        self.max_connections = max_connections
        # counters, for the protocol layer to report
        self.connections = 0  # open now
        self.accepted = 0
        self.refused = 0  # over max_connections
        self.frames_in = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.writes = 0  # send/sendmsg syscalls that wrote something
        self.write_waits = 0  # times a connection waited for POLLOUT
        self.closed_for_bad_length = 0
        self.closed_for_backlog = 0
        self.closed_for_error = 0
        self.handler_errors = 0
        self.open: dict[int, Connection] = {}  # by Connection.id
        self.closed = False
        self.scratch = memoryview(bytearray(READ_CHUNK))  # every connection reads into it
        self._ids = itertools.count(1)
        self._dirty: list[Connection] = []
        self._flushed_round = self.poller.rounds
        self._complaints = ThrottledLog(log)
        self._listener = socket.create_server((host, port), backlog=backlog)
        self._listener.setblocking(False)
        self._listen_fd = self._listener.fileno()
        bound = self._listener.getsockname()
        self.host: str = bound[0]
        self.port: int = bound[1]
        self.address = _peer_name(bound)
        self._listening = True
        self.poller.add(self._listen_fd, self._accept)
        service.after_poll(self._end_of_round)
        service.on_stop(self.close)

    def __repr__(self) -> str:
        return f"TcpDoor({self.name}, {self.address}, {self.connections} open)"

    # ---- accepting ----

    def _accept(self, _fd: int) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                sock, address = self._listener.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno == errno.ECONNABORTED:
                    continue
                self._complaints.warning(
                    "%s: accept failed (%s); not accepting for %.1f s",
                    self.name,
                    exc,
                    ACCEPT_PAUSE_S,
                )
                self._pause_accepting()
                return
            self.accepted += 1
            if len(self.open) >= self.max_connections:
                self.refused += 1
                self._complaints.warning(
                    "%s: %d connections open, refusing %s",
                    self.name,
                    len(self.open),
                    _peer_name(address),
                )
                sock.close()
                continue
            self._open(sock, _peer_name(address))

    def _open(self, sock: socket.socket, peer: str) -> None:
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:  # reset before we got to it
            sock.close()
            return
        conn = Connection(self, sock, next(self._ids), peer)
        self.open[conn.id] = conn
        self.connections += 1
        self.poller.add(sock.fileno(), conn.on_ready)
        if self.on_open is not None:
            try:
                self.on_open(conn)
            except Exception:  # noqa: BLE001 - logged (throttled) with its traceback
                self._complaints.exception("%s: on_open failed for %r", self.name, conn)

    def _pause_accepting(self) -> None:
        if self._listening:
            self._listening = False
            self.poller.remove(self._listen_fd)
            self.service.later(ACCEPT_PAUSE_S, self._resume_accepting)

    def _resume_accepting(self) -> None:
        if not self.closed and not self._listening:
            self._listening = True
            self.poller.add(self._listen_fd, self._accept)

    # ---- what connections call ----

    def gathering(self) -> bool:
        """Inside a loop round whose end (after_poll) has not come yet: output waits for it."""
        return self._flushed_round != self.poller.rounds

    def queue_write(self, conn: Connection) -> None:
        self._dirty.append(conn)

    def _end_of_round(self) -> None:
        self._flushed_round = self.poller.rounds
        if not self._dirty:
            return
        dirty, self._dirty = self._dirty, []
        for conn in dirty:
            conn.write_queued()

    def deliver(self, conn: Connection, frame: bytes) -> None:
        self.frames_in += 1
        try:
            self.on_frame(conn, frame)
        except Exception:  # noqa: BLE001 - logged (throttled) with its traceback
            # a bug reached by some input: that frame is dropped, the connection goes on
            self.handler_errors += 1
            self._complaints.exception("%s: frame from %r dropped", self.name, conn)

    def close_for_bad_length(self, conn: Connection, size: int) -> None:
        self.closed_for_bad_length += 1
        self._complaints.warning(
            "%s: %r sent a frame of %d bytes (allowed %d to %d); closing it",
            self.name,
            conn,
            size,
            self.min_frame_bytes,
            self.max_frame_bytes,
        )
        if size >> 24 == ZMTP_SIGNATURE_FIRST_BYTE:
            self._complaints.warning(
                "%s: %r opened with a ZeroMQ greeting: a Ferry SDK or CLI dialled this "
                "RocketMQ-protocol port; give it Ferry's own port (listenPort)",
                self.name,
                conn,
            )
        self.drop(conn, None)

    def close_for_backlog(self, conn: Connection) -> None:
        self.closed_for_backlog += 1
        self._complaints.warning(
            "%s: %r does not read its replies (%d bytes waiting, cap %d); closing it",
            self.name,
            conn,
            conn.pending_bytes,
            self.max_output_bytes,
        )
        self.drop(conn, None)

    def drop(self, conn: Connection, error: OSError | None) -> None:
        """Closes conn now, whatever it still had to send; tells the owner."""
        if conn.closed:
            return
        if error is not None:
            self.closed_for_error += 1
            log.debug("%s: %r: %s", self.name, conn, error)
        conn.shut()
        self.open.pop(conn.id, None)
        self.connections -= 1
        if self.on_close is not None:
            try:
                self.on_close(conn)
            except Exception:  # noqa: BLE001 - logged (throttled) with its traceback
                self._complaints.exception("%s: on_close failed for %r", self.name, conn)

    # ---- closing ----

    def close(self) -> None:
        """Stops listening and closes every connection (on_close for each). Runs on the
        service's stop by itself; call it from the loop's thread otherwise."""
        if self.closed:
            return
        self.closed = True
        if self._listening:
            self._listening = False
            self.poller.remove(self._listen_fd)
        self._listener.close()
        for conn in list(self.open.values()):
            conn.close()
