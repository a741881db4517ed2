"""Flushing: what a flush covers, and the worker that runs ASYNC_FLUSH flushes off the loop.

A FlushPlan is taken on the loop (the files written since the last flush and the offsets they
make durable) and run anywhere: fdatasync each file, then write the checkpoint. Under
ASYNC_FLUSH a timer hands plans to one worker thread (fdatasync releases the GIL), so the loop
keeps appending while the disk works. SYNC_FLUSH's group commit does not go through here: it
fdatasyncs the CommitLog on the loop once per round (MessageStore.sync_log), and the periodic
plan still flushes ConsumeQueues and the checkpoint.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from typing import NamedTuple, Protocol

from ferry.store.checkpoint import Checkpoint, CheckpointData
from ferry.store.mapped_file import MappedFile

log = logging.getLogger("ferry.store.flush")


class FlushPlan(NamedTuple):
    files: list[MappedFile]
    data: CheckpointData  # what is on disk once every file is synced

    def run(self, checkpoint: Checkpoint) -> FlushPlan:
        for f in self.files:
            f.sync()
        checkpoint.write(self.data)
        return self


class Flushable(Protocol):
    checkpoint: Checkpoint

    def begin_flush(self) -> FlushPlan | None: ...

    def end_flush(self, plan: FlushPlan) -> None: ...


class Flusher:
    """Runs one flush plan at a time on a worker thread; tick() is called by a loop timer."""

    def __init__(self, store: Flushable) -> None:
        self._store = store
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ferry-store-flush")
        self._job: Future[FlushPlan] | None = None

    def tick(self) -> None:
        if self._job is not None:
            if not self._job.done():
                return  # the disk is slower than the interval: skip a round
            self._collect()
        plan = self._store.begin_flush()
        if plan is not None:
            self._job = self._pool.submit(plan.run, self._store.checkpoint)

    def _collect(self) -> None:
        job = self._job
        self._job = None
        if job is None:
            return
        try:
            plan = job.result()
        except OSError:
            log.exception("flush failed; data since the last good flush is not on disk yet")
            return
        self._store.end_flush(plan)

    def close(self) -> None:
        """Waits for a flush in flight (the final flush of close() runs on the caller)."""
        if self._job is not None:
            self._job.exception()
            self._collect()
        self._pool.shutdown(wait=True)
