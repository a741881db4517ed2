"""The etcd thread: the loop hands it jobs (blocking etcd calls and the decisions on what they
read) and gets their results back through a pipe it polls, so a slow or dead etcd never stalls
the loop: pings and replies go on, and brokers get a typed error in bounded time.

One thread, so jobs run one at a time in the order they came: two heartbeats of one
controller never race each other (those of two controllers race in etcd, where every change
of a group's state is a compare-and-swap). A job that waited past its deadline (its broker
gave up on the reply) is not run; past MAX_QUEUED jobs, new ones are refused at once.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from ferry.protocol.errors import ControllerNotLeaderError, FerryError
from ferry.runtime.service import Service

log = logging.getLogger("ferry.controller")

MAX_QUEUED = 256
Outcome = Any | FerryError  # a job's result, or the typed error it raised
Job = Callable[[], Any]
Done = Callable[[Outcome], None]


class EtcdWorker:
    def __init__(self, service: Service) -> None:
        self._jobs: queue.Queue[tuple[Job, Done, float] | None] = queue.Queue()
        self._done: collections.deque[tuple[Done, Outcome]] = collections.deque()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        service.add_reader(self._wake_r, self._on_wake)
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="etcd", daemon=True)
        self._thread.start()

    @property
    def queued(self) -> int:
        return self._jobs.qsize()

    def submit(self, job: Job, done: Done, deadline_s: float) -> None:
        """Runs job on the etcd thread, then done(result or FerryError) on the loop."""
        if self._jobs.qsize() >= MAX_QUEUED:
            done(ControllerNotLeaderError(f"{MAX_QUEUED} etcd operations waiting; retry later"))
            return
        self._jobs.put((job, done, time.monotonic() + deadline_s))

    def stop(self, timeout_s: float = 5.0) -> None:
        """Drops the jobs not started (their callers get no answer: the service stops) and
        waits for the one running."""
        self._stopping = True
        self._jobs.put(None)
        self._thread.join(timeout_s)
        if not self._thread.is_alive():  # else it may still write: leave the pipe open
            for fd in (self._wake_r, self._wake_w):
                os.close(fd)

    # ---- the etcd thread ----

    def _run(self) -> None:
        while True:
            item = self._jobs.get()
            if item is None:
                return
            job, done, deadline = item
            if self._stopping:
                continue
            outcome: Outcome
            if time.monotonic() > deadline:
                outcome = ControllerNotLeaderError("etcd too slow: the request waited too long")
            else:
                try:
                    outcome = job()
                except FerryError as err:
                    outcome = err
                except Exception as exc:
                    log.exception("controller: an etcd job failed")
                    outcome = FerryError(f"internal error in controller: {exc!r}")
            self._done.append((done, outcome))
            # a full pipe holds wake-ups enough: the loop will drain it
            with contextlib.suppress(BlockingIOError):
                os.write(self._wake_w, b"!")

    # ---- the loop ----

    def _on_wake(self, _fd: Any) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass
        while self._done:
            done, outcome = self._done.popleft()
            try:
                done(outcome)
            except Exception:
                log.exception("controller: delivering an etcd result failed")
