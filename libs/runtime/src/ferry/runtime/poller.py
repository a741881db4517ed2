"""Which of a service's sockets to read now: one poll(2) over every socket's ZMQ_FD and every
plain fd.

zmq.Poller asked each socket's ZMQ_EVENTS twice per wait (two syscalls each: ~50 per sync send
in remoting); this asks only the sockets whose fd fired or that the loop used.
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


class Poller:
    def __init__(self) -> None:
        self._poll = select.poll()
        self.readers: dict[Any, Callable[[Any], None]] = {}
        self._by_fd: dict[int, Any] = {}
        # ZeroMQ sockets to ask before sleeping: add a socket sent on outside its reader
        self.used: set[Any] = set()
        self._next_sweep = 0.0

    def add(self, sock: Any, fn: Callable[[Any], None]) -> None:
        """sock (a ZeroMQ socket or a plain fd) is read by fn."""
        self.readers[sock] = fn
        fd = int(sock.get(zmq.FD)) if isinstance(sock, zmq.Socket) else int(sock)
        self._by_fd[fd] = sock
        self._poll.register(fd, select.POLLIN)
        if isinstance(sock, zmq.Socket):
            self.used.add(sock)

    def ready(self, next_timer: float | None) -> list[Any]:
        """The sockets and fds to read now: the used sockets that have input, then whatever
        poll(2) reports (at once if some are ready, else waiting up to next_timer, a
        time.monotonic() time)."""
        now = time.monotonic()
        if now >= self._next_sweep:
            self._next_sweep = now + SWEEP_S
            self.used.update(s for s in self.readers if isinstance(s, zmq.Socket))
        used, self.used = self.used, set()
        ready = [s for s in used if int(s.get(EVENTS)) & POLLIN]
        timeout = 0 if ready else MAX_POLL_MS
        if next_timer is not None and timeout:
            timeout = max(0, min(timeout, int((next_timer - now) * 1000) + 1))
        for fd, _ in self._poll.poll(timeout):
            sock = self._by_fd[fd]
            if sock not in ready:
                ready.append(sock)
        for sock in ready:
            if isinstance(sock, zmq.Socket):
                self.used.add(sock)  # its reader receives on it
        return ready
