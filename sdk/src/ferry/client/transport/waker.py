"""Wakes a thread blocked in a poller from other threads: an eventfd (a pipe elsewhere)."""

from __future__ import annotations

import os
import threading


class Waker:
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
