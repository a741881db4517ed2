"""One connection of a TCP door (ferry.runtime.tcp_door): its input split into length-prefixed
frames, its output written at once or kept until the socket takes it.

A frame on the wire is a 4-byte big-endian length, then that many bytes; the handler gets the
bytes after the length. Everything runs on the service's loop thread: none of this is
thread-safe, and none of it blocks.
"""

from __future__ import annotations

import contextlib
import socket
import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ferry.runtime.tcp_door import TcpDoor

Buffer = bytes | bytearray | memoryview

LENGTH = struct.Struct(">I")
# read up to this much per recv, and stop reading one connection after READ_BUDGET in a wake:
# poll(2) is level-triggered, so the rest waits one round and other sockets get their turn
READ_CHUNK = 256 * 1024
READ_BUDGET = 1024 * 1024
IOV_MAX = 1024  # Linux: more buffers in one sendmsg is EMSGSIZE
JOIN_BYTES = 4 * 1024 * 1024
_NOSIGNAL = getattr(socket, "MSG_NOSIGNAL", 0)


class Connection:
    """A peer's connection. The protocol layer reads id, peer, closed and the counters, keeps
    what it needs in `state`, and calls send(), send_frame() and close()."""

    __slots__ = (
        "_door",
        "_fd",
        "_inbuf",
        "_out",
        "_queued",
        "_sock",
        "_writing",
        "bytes_in",
        "bytes_out",
        "closed",
        "frames_in",
        "id",
        "peer",
        "pending_bytes",
        "state",
    )

    def __init__(self, door: TcpDoor, sock: socket.socket, conn_id: int, peer: str) -> None:
        self.id = conn_id
        self.peer = peer  # "host:port" of the remote end
        self.closed = False
        # the protocol layer's own per-connection state (client id, version, ...)
        self.state: dict[str, Any] = {}
        self.frames_in = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.pending_bytes = 0  # given to send(), not yet taken by the kernel
        self._door = door
        self._sock = sock
        self._fd = sock.fileno()
        self._inbuf = bytearray()  # the start of a frame not yet whole
        self._out: list[Buffer] = []
        self._writing = False  # waiting for POLLOUT
        self._queued = False  # in the door's list to write at the end of this round

    def __repr__(self) -> str:
        return f"Connection({self.id}, {self.peer}{', closed' if self.closed else ''})"

    # ---- output ----

    def send(self, data: Buffer | Sequence[Buffer]) -> None:
        """Sends bytes as they are (a bytes-like object, or a list of them sent in order).
        Within a loop round the output is gathered and written at the round's end, in one
        syscall where the socket takes it; outside a round (a timer) it is written at once.
        What the socket does not take is kept (the buffers themselves: do not change them)
        and written when it can; past the door's max_output_bytes the connection is closed.
        On a closed connection this does nothing."""
        if self.closed:
            return
        if isinstance(data, bytes | bytearray | memoryview):
            size = len(data)
            if size:
                self._out.append(data)
        else:
            size = 0
            for buf in data:
                if len(buf):
                    size += len(buf)
                    self._out.append(buf)
        if not size:
            return
        self.pending_bytes += size
        door = self._door
        if self._writing:
            pass  # POLLOUT will write it, after what is already waiting
        elif door.gathering():
            if not self._queued:
                self._queued = True
                door.queue_write(self)
            if self.pending_bytes <= door.max_output_bytes:
                return
            self.flush()
        else:
            self.flush()
        if self.pending_bytes > door.max_output_bytes and not self.closed:
            door.close_for_backlog(self)

    def send_frame(self, *parts: Buffer) -> None:
        """Sends one frame: the 4-byte length of the parts together, then the parts."""
        size = sum(len(p) for p in parts)
        self.send([LENGTH.pack(size), *parts])

    def flush(self) -> None:
        """Writes what is waiting until the socket takes no more; asks the poller for POLLOUT
        while something is left."""
        out = self._out
        door = self._door
        if len(out) > IOV_MAX and self.pending_bytes <= JOIN_BYTES:
            out[:] = [b"".join(out)]  # many small replies: one copy beats many sendmsg calls
        while out and not self.closed:
            batch = out if len(out) <= IOV_MAX else out[:IOV_MAX]
            try:
                if len(batch) == 1:
                    sent = self._sock.send(batch[0], _NOSIGNAL)
                else:
                    sent = self._sock.sendmsg(batch, (), _NOSIGNAL)
            except BlockingIOError:
                break
            except OSError as exc:
                door.drop(self, exc)
                return
            door.writes += 1
            self.bytes_out += sent
            door.bytes_out += sent
            self.pending_bytes -= sent
            done = 0
            full = False
            for buf in batch:
                if sent >= len(buf):
                    sent -= len(buf)
                    done += 1
                else:
                    if sent:
                        out[done] = memoryview(buf)[sent:]
                    full = True  # the kernel took part: it takes no more for now
                    break
            del out[:done]
            if full:
                break
        if self.closed:
            return
        if out and not self._writing:
            self._writing = True
            door.write_waits += 1
            door.poller.want_write(self._fd, True)
        elif not out and self._writing:
            self._writing = False
            door.poller.want_write(self._fd, False)

    def close(self) -> None:
        """Closes the connection (the door calls its on_close). Output already given to
        send() is tried once more, without waiting for the socket; the rest is dropped."""
        if self.closed:
            return
        if self._out:
            self.flush()
        self._door.drop(self, None)

    def write_queued(self) -> None:
        """The end of the loop round: writes what send() gathered during it."""
        self._queued = False
        if not self.closed and not self._writing:
            self.flush()
            if self.pending_bytes > self._door.max_output_bytes and not self.closed:
                self._door.close_for_backlog(self)

    def shut(self) -> None:
        """The door's part of closing (TcpDoor.drop): out of the poller, socket closed,
        buffers let go."""
        self.closed = True
        self._door.poller.remove(self._fd)
        with contextlib.suppress(OSError):
            self._sock.close()
        self._out = []
        self.pending_bytes = 0
        self._inbuf = bytearray()  # rebound, not cleared: a view of the old may be live

    # ---- input ----

    def on_ready(self, _fd: int) -> None:
        """The poller's reader for this fd: it may take output (when asked) or have input."""
        if self._writing:
            self.flush()
        if not self.closed:
            self._read()

    def _read(self) -> None:
        door = self._door
        view = door.scratch
        budget = READ_BUDGET
        while budget > 0:
            try:
                n = self._sock.recv_into(view, min(READ_CHUNK, budget))
            except BlockingIOError:
                return
            except OSError as exc:  # ECONNRESET and the like: the peer is gone
                door.drop(self, exc)
                return
            if n == 0:
                door.drop(self, None)
                return
            self.bytes_in += n
            door.bytes_in += n
            self._take(view[:n])
            if self.closed or n < READ_CHUNK:
                return  # a short read: nothing left, most likely (poll says if there is)
            budget -= n

    def _take(self, chunk: memoryview) -> None:
        """Delivers every whole frame in what has arrived; keeps the start of the next."""
        if not self._inbuf:
            # the common case: the chunk starts at a frame boundary, read from it directly
            pos = self._frames(chunk)
            if pos < len(chunk) and not self.closed:
                self._inbuf += chunk[pos:]
            return
        inbuf = self._inbuf
        inbuf += chunk
        with memoryview(inbuf) as data:
            pos = self._frames(data)
        if not self.closed:
            del inbuf[:pos]

    def _frames(self, data: memoryview) -> int:
        door = self._door
        end = len(data)
        pos = 0
        while end - pos >= 4:
            (size,) = LENGTH.unpack_from(data, pos)
            if size > door.max_frame_bytes or size < door.min_frame_bytes:
                door.close_for_bad_length(self, size)
                return pos
            stop = pos + 4 + size
            if stop > end:
                break
            frame = bytes(data[pos + 4 : stop])
            pos = stop
            self.frames_in += 1
            door.deliver(self, frame)
            if self.closed:
                break
        return pos
