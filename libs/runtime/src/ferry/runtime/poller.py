"""Which of a service's sockets to read now: one poll(2) over every socket's ZMQ_FD and every
plain fd.

zmq.Poller asked each socket's ZMQ_EVENTS twice per wait (two syscalls each: ~50 per sync send
in remoting); this asks only the sockets whose fd fired or that the loop used.

A plain fd may also ask for write readiness (want_write): its reader then runs when it can take
output too, and finds out which by trying (the TCP door's connections, ferry.runtime.tcp_door).
"""

from __future__ import annotations

import select
import time
from collections.abc import Callable
from typing import Any

import zmq

from ferry.protocol.frames import EVENTS, POLLIN

MAX_POLL_MS = 200
# A ZeroMQ socket is woken through its ZMQ_FD, which only says "look at ZMQ_EVENTS"; any send
# or receive on the socket may take that signal, so a socket the loop used is asked again
# before the loop sleeps, and every socket at least this often (belt and braces).
SWEEP_S = 0.2
_READ = select.POLLIN
_READ_WRITE = select.POLLIN | select.POLLOUT


def _gone(_sock: Any) -> None:
    """Stands in for the reader of an fd removed during a round (it may still be in that
    round's ready list); dropped at the next ready()."""


class Poller:
    def __init__(self) -> None:
        self._poll = select.poll()
        self.readers: dict[Any, Callable[[Any], None]] = {}
        self._by_fd: dict[int, Any] = {}
        self._zmq: list[zmq.Socket[Any]] = []
        self._removed: list[Any] = []
        # ZeroMQ sockets to ask before sleeping: add a socket sent on outside its reader
        self.used: set[Any] = set()
        self._next_sweep = 0.0
        # how many times ready() returned: a transport tells one loop round from the next
        self.rounds = 0

    def add(self, sock: Any, fn: Callable[[Any], None]) -> None:
        """sock (a ZeroMQ socket or a plain fd) is read by fn."""
        self.readers[sock] = fn
        fd = int(sock.get(zmq.FD)) if isinstance(sock, zmq.Socket) else int(sock)
        self._by_fd[fd] = sock
        self._poll.register(fd, _READ)
        if isinstance(sock, zmq.Socket):
            self._zmq.append(sock)
            self.used.add(sock)

    def remove(self, fd: int) -> None:
        """Stops watching a plain fd (before it is closed: the number may be reused)."""
        if self._by_fd.pop(fd, None) is None:
            return
        self._poll.unregister(fd)
        self.readers[fd] = _gone
        self._removed.append(fd)

    def want_write(self, fd: int, on: bool) -> None:
        """A plain fd already added: its reader also runs when it can take output (on), or
        only on input again (off)."""
        if fd in self._by_fd:
            self._poll.modify(fd, _READ_WRITE if on else _READ)

    def ready(self, next_timer: float | None) -> list[Any]:
        """The sockets and fds to read now: the used sockets that have input, then whatever
        poll(2) reports (at once if some are ready, else waiting up to next_timer, a
        time.monotonic() time)."""
        self.rounds += 1
        if self._removed:
            for fd in self._removed:
                if self.readers.get(fd) is _gone:
                    del self.readers[fd]
            self._removed.clear()
        now = time.monotonic()
        if now >= self._next_sweep:
            self._next_sweep = now + SWEEP_S
            self.used.update(self._zmq)
        used, self.used = self.used, set()
        ready = [s for s in used if int(s.get(EVENTS)) & POLLIN]
        asked = len(ready)
        timeout = 0 if asked else MAX_POLL_MS
        if next_timer is not None and timeout:
            timeout = max(0, min(timeout, int((next_timer - now) * 1000) + 1))
        for fd, _ in self._poll.poll(timeout):
            sock = self._by_fd[fd]
            # only a ZeroMQ socket can be in the list already (asked above)
            if asked and sock in ready[:asked]:
                continue
            ready.append(sock)
        for sock in ready:
            if isinstance(sock, zmq.Socket):
                self.used.add(sock)  # its reader receives on it
        return ready
