"""Flushing: what a flush covers, and the worker thread that runs flushes off the loop.

A FlushPlan is taken on the loop (the files written since the last flush, the CommitLog offset
they make durable, and whether the checkpoint is written afterwards) and run on one worker
thread: fdatasync releases the GIL, so the loop keeps appending while the disk works. One plan
runs at a time. When it finishes, the worker writes to an eventfd the loop polls; the loop then
collects the plan (Flusher.collect) and answers whoever waited for it (group commit).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ferry.store.checkpoint import Checkpoint, CheckpointData
from ferry.store.mapped_file import MappedFile, PendingDir

log = logging.getLogger("ferry.store.flush")


@dataclass(slots=True)
class FlushPlan:
    files: list[MappedFile | PendingDir]  # CommitLog segments, then ConsumeQueue files/dirs
    data: CheckpointData  # what is on disk once every file is synced
    write_checkpoint: bool = True  # False: a group commit of the CommitLog alone
    log_files: int = -1  # how many of `files` are CommitLog segments (-1: all)
    log_done_at: float = 0.0  # time.monotonic() when the CommitLog part was synced
    done_at: float = 0.0  # ... and when every file was
    on_log_synced: Callable[[], None] | None = None  # told when the log part is done early
    finished: bool = False  # set by the worker once run() returned or failed
    started_at: float = 0.0  # time.monotonic() when handed to the worker
    error: Exception | None = None  # what stopped it (OSError from the disk, normally)

    @property
    def log_target(self) -> int:
        return self.data.log_flushed

    def run(self, checkpoint: Checkpoint) -> FlushPlan:
        n = len(self.files) if self.log_files < 0 else self.log_files
        for f in self.files[:n]:
            f.sync()
        self.log_done_at = time.monotonic()
        if n < len(self.files) and self.on_log_synced is not None:
            self.on_log_synced()  # the puts waiting for the log need not wait for the rest
        for f in self.files[n:]:
            f.sync()
        self.done_at = time.monotonic()
        if self.write_checkpoint:
            checkpoint.write(self.data)
        return self


class Flushable(Protocol):
    checkpoint: Checkpoint

    def end_flush(self, plan: FlushPlan) -> None: ...

    def flush_failed(self, plan: FlushPlan) -> None: ...


class Flusher:
    """Runs one flush plan at a time on its own thread. The loop polls `wake_fd` and calls
    collect() when it becomes readable; log_syncs counts finished plans. (A bare thread and a
    SimpleQueue: an executor's futures cost tens of microseconds per flush, which group
    commit pays on every fsync.)"""

    def __init__(self, store: Flushable) -> None:
        self._store = store
        self._jobs: queue.SimpleQueue[FlushPlan | None] = queue.SimpleQueue()
        self._plan: FlushPlan | None = None  # handed to the worker and not collected yet
        self._finished = threading.Event()
        self.wake_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.log_syncs = 0
        self.failures = 0
        # told of every flush that succeeded (the flush latency metric), on the loop
        self.on_flushed: Callable[[FlushPlan], None] | None = None
        self._thread = threading.Thread(target=self._work, name="ferry-store-flush", daemon=True)
        self._thread.start()

    @property
    def busy(self) -> bool:
        return self._plan is not None

    def start(self, plan: FlushPlan) -> None:
        """Hands the plan to the worker; the caller checks `busy` first."""
        if self._plan is not None:
            raise RuntimeError("a flush is already running")
        self._plan = plan
        plan.started_at = time.monotonic()
        plan.on_log_synced = self._wake
        self._finished.clear()
        self._jobs.put(plan)

    def _work(self) -> None:
        checkpoint = self._store.checkpoint
        while (plan := self._jobs.get()) is not None:
            try:
                plan.run(checkpoint)
            except Exception as exc:  # the loop sees it in collect(); the worker goes on
                log.exception(
                    "flush failed: the data since the last good flush is not known durable"
                )
                plan.error = exc
            plan.finished = True
            self._finished.set()
            self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # closed at shutdown; close() collects by itself
            os.eventfd_write(self.wake_fd, 1)

    def log_synced(self) -> FlushPlan | None:
        """The running plan once its CommitLog part is on disk (its other files may still be
        syncing); None otherwise."""
        plan = self._plan
        return plan if plan is not None and plan.log_done_at else None

    def collect(self) -> FlushPlan | None:
        """The finished plan, applied to the store (None while it runs or when it failed)."""
        with contextlib.suppress(BlockingIOError):
            os.eventfd_read(self.wake_fd)
        plan = self._plan
        if plan is None or not plan.finished:
            return None
        self._plan = None
        if plan.error is not None:  # logged by the worker
            self.failures += 1
            self._store.flush_failed(plan)
            return None
        self.log_syncs += 1
        self._store.end_flush(plan)
        if self.on_flushed is not None:
            self.on_flushed(plan)
        return plan

    def wait(self) -> FlushPlan | None:
        """Blocks until the running plan (if any) is done, then collects it."""
        if self._plan is None:
            return None
        self._finished.wait()
        return self.collect()

    def close(self) -> None:
        """Waits for a flush in flight (the final flush of close() runs on the caller)."""
        self.wait()
        self._jobs.put(None)
        self._thread.join()
        os.close(self.wake_fd)
