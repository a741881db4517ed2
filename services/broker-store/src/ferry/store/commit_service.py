"""Flushing driven from the service loop: ASYNC_FLUSH on a timer, SYNC_FLUSH by group commit.

SYNC_FLUSH pipelines: a put is appended and answered later, once a flush covers its end. After
every loop round, if puts wait and the flush worker is idle, one fdatasync of everything
written so far starts on the worker; appends go on meanwhile, and the puts that arrive during
that fsync share the next one. The worker signals the loop when it is done; the loop then
answers every put the flush covered: SEND_OK when it finished within syncFlushTimeout,
FLUSH_DISK_TIMEOUT otherwise (or when a sweep finds the put's time up before any flush). The
ConsumeQueues and the checkpoint are flushed every flushIntervalConsumeQueue by a full plan
that takes the next turn on the worker.

ASYNC_FLUSH flushes every flushIntervalCommitLog, when at least flushCommitLogLeastPages of the
CommitLog are dirty or flushCommitLogThoroughInterval has passed since the last full flush.
"""

from __future__ import annotations

import logging
import mmap
import time
from typing import Any

import msgspec
from opentelemetry.trace import Span

from ferry.protocol.codes import SendStatus
from ferry.protocol.messages import StorePutReply
from ferry.runtime import telemetry
from ferry.runtime.config import BrokerConfig
from ferry.runtime.service import Call, Service
from ferry.store.flush import Flusher
from ferry.store.group_commit import GroupCommitQueue
from ferry.store.store import MessageStore

log = logging.getLogger("ferry.store.commit")

TIMEOUT_SWEEP_S = 0.02  # how often waiting puts are checked against syncFlushTimeout


class CommitService:
    def __init__(self, config: BrokerConfig, store: MessageStore, service: Service) -> None:
        self.store = store
        self.flusher = Flusher(store)
        self.sync_flush = config.is_sync_flush
        self._timeout_s = config.sync_flush_timeout / 1000
        self._waiting: GroupCommitQueue[tuple[Call, StorePutReply]] = GroupCommitQueue()
        self._full_due = False
        self._least_bytes = max(config.flush_commit_log_least_pages, 0) * mmap.PAGESIZE
        self._thorough_s = max(config.flush_commit_log_thorough_interval, 0) / 1000
        self._last_full = time.monotonic()
        self._flush_spans: dict[int, Span] = {}  # id(call) -> its put's flush span
        service.add_reader(self.flusher.wake_fd, self._on_flushed)
        if self.sync_flush:
            service.after_poll(self._kick)
            service.every(max(config.flush_interval_consume_queue, 10) / 1000, self._due)
            service.every(TIMEOUT_SWEEP_S, self._expire)
        else:
            service.every(max(config.flush_interval_commit_log, 10) / 1000, self._async_tick)

    # ---- SYNC_FLUSH ----

    def wait_for_flush(
        self, call: Call, reply: StorePutReply, end_offset: int, span: Span | None = None
    ) -> None:
        """Answers `reply` to `call` once the CommitLog is durable up to end_offset; `span`
        (a sampled put's "store flush") ends with the answer."""
        if span is not None:
            self._flush_spans[id(call)] = span
        self._waiting.add(end_offset, time.monotonic() + self._timeout_s, (call, reply))

    def _answer(self, call: Call, reply: StorePutReply) -> None:
        if self._flush_spans:
            span = self._flush_spans.pop(id(call), None)
            if span is not None:
                late = reply.status == SendStatus.FLUSH_DISK_TIMEOUT
                telemetry.end_span(span, "FLUSH_DISK_TIMEOUT" if late else "")
        call.reply(reply)

    def _due(self) -> None:
        self._full_due = True

    def _kick(self) -> None:
        """After each loop round: start the next flush if anyone waits and the worker is free."""
        if self.flusher.busy or not (self._waiting or self._full_due):
            return
        plan = self.store.begin_flush() if self._full_due else self.store.begin_log_sync()
        self._full_due = False
        if plan is None:
            if self._waiting:  # already durable: a full flush has just covered them
                self._release(self.store.log.flushed, time.monotonic())
            return
        self.flusher.start(plan)

    def _expire(self) -> None:
        if self._waiting:
            for call, reply in self._waiting.expired(time.monotonic()):
                self._answer(call, _late(reply))

    def _release(self, flushed: int, flushed_at: float) -> None:
        done = self._waiting.release(flushed, flushed_at)
        for call, reply in done.on_time:
            self._answer(call, reply)
        for call, reply in done.late:
            self._answer(call, _late(reply))

    # ---- ASYNC_FLUSH ----

    def _async_tick(self) -> None:
        if self.flusher.busy:
            return  # the disk is slower than the interval: skip a round
        now = time.monotonic()
        thorough = now - self._last_full >= self._thorough_s
        if not thorough and self.store.unflushed_bytes() < self._least_bytes:
            return
        plan = self.store.begin_flush()
        if plan is not None:
            self.flusher.start(plan)
        if thorough:
            self._last_full = now

    # ---- both ----

    def _on_flushed(self, _fd: Any) -> None:
        plan = self.flusher.collect()
        if plan is None:  # still running: its CommitLog part may be done already
            plan = self.flusher.log_synced()
            if plan is not None:
                self.store.log_synced(plan.log_target)
        if plan is not None and self._waiting:
            self._release(plan.log_target, plan.log_done_at)

    def quiesce(self) -> None:
        """Waits for the flush in flight, if any, and answers the puts it covered: then no
        file is in use by the worker (retention may delete some)."""
        plan = self.flusher.wait()
        if plan is not None and self._waiting:
            self._release(plan.log_target, plan.log_done_at)

    def flush_now(self) -> None:
        """A full flush on the loop, now (before retention asked for by an operator: what is
        written becomes deletable)."""
        self.quiesce()
        self.store.flush()
        if self._waiting:
            self._release(self.store.log.flushed, time.monotonic())

    def close(self) -> None:
        """Clean stop: the last flush, then every waiting put is answered."""
        self.quiesce()
        self.flusher.close()
        try:
            self.store.flush()
        except OSError:
            log.exception("final flush failed")
        self._release(self.store.log.flushed, time.monotonic())
        for waiting in self._waiting.take_all():
            call, reply = waiting.item
            self._answer(call, _late(reply))


def _late(reply: StorePutReply) -> StorePutReply:
    return msgspec.structs.replace(reply, status=SendStatus.FLUSH_DISK_TIMEOUT)
