"""MessageStore: the CommitLog, the ConsumeQueues, flush bookkeeping and recovery, composed.

A plain object (no sockets, no timers): app.py drives it from the service loop and the tests
drive it directly. Everything runs on one thread except FlushPlan.run (see flush.py).
Opening it (lock, load, recovery) is in store_open.py, a queue's read for a pull in
queue_get.py, and what its calls return in store_results.py; the result types and the read
limits stay importable from here.
"""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Callable, Collection
from pathlib import Path
from types import TracebackType

from ferry.protocol import record
from ferry.protocol.errors import (
    DiskFullError,
    FerryError,
    InvalidParameterError,
    ServiceNotAvailableError,
)
from ferry.protocol.messages import ConsumeQueueReply, QueueStat, StoreStatusReply
from ferry.protocol.names import check_topic
from ferry.runtime.config import BrokerConfig
from ferry.runtime.dir_lock import DirLock
from ferry.store.batch import scan_batch
from ferry.store.checkpoint import Checkpoint, CheckpointData
from ferry.store.commit_log import CommitLog
from ferry.store.consume_queue import ConsumeQueueTable
from ferry.store.flush import FlushPlan
from ferry.store.mapped_file import MappedFile, PendingDir
from ferry.store.queries import cq_entries, offset_by_time, view_record
from ferry.store.queue_get import FILTER_SCAN, MAX_GET_MSGS, SQL_FILTER_SCAN, get_records
from ferry.store.recovery import RecoveryReport
from ferry.store.retention import Retention, RetentionReport
from ferry.store.store_open import open_store
from ferry.store.store_results import GetResult, PutResult, ReadLogResult

__all__ = [
    "FILTER_SCAN",
    "MAX_GET_MSGS",
    "MAX_QUEUE_ID",
    "SQL_FILTER_SCAN",
    "GetResult",
    "MessageStore",
    "PutResult",
    "ReadLogResult",
]

log = logging.getLogger("ferry.store")

MAX_QUEUE_ID = (1 << 31) - 1


class MessageStore:
    def __init__(
        self,
        root: Path,
        lock: DirLock,
        checkpoint: Checkpoint,
        commit_log: CommitLog,
        queues: ConsumeQueueTable,
        retention: Retention,
        *,
        max_message_size: int,
        store_host: str,
    ) -> None:
        self.root = root
        self.lock = lock
        self.checkpoint = checkpoint
        self.log = commit_log
        self.queues = queues
        self.retention = retention
        self.recovered_offset = commit_log.end  # where this run's recovery found the log end
        self.recovery: RecoveryReport | None = None  # what start-up recovery did
        self._max_body = max_message_size
        self._max_record = commit_log.segment_size - record.BLANK_MIN
        self.store_host = store_host
        self._host = record.pack_host(store_host)
        self._hosts: dict[str, bytes] = {}
        self.last_store_ms = 0
        self._written = CheckpointData()
        self._closed = False
        self._refusing = ""  # why puts are refused for want of space, while they are
        # controller mode with allAckInSyncStateSet: how far the group's in-sync set acked
        # the log; reads stop there (None: reads see the whole log)
        self.confirmed: int | None = None
        self._confirm_wanted = 0  # the highest confirm heard, applied as far as the log goes

    @classmethod
    def open(cls, config: BrokerConfig) -> MessageStore:
        """Takes the directory's lock, maps the files and recovers; raises DirLockedError
        when another store holds the directory (see store_open.py)."""
        return open_store(cls, config)

    # ---- writes ----

    def put(
        self, topic: str, queue_id: int, count: int, payload: bytes, store_host: str = ""
    ) -> PutResult:
        """Appends `count` records for (topic, queue_id); validates all of them first.

        store_host ("ip:port", default the configured address) is stamped on every record.
        """
        if count < 1:
            raise InvalidParameterError(f"count must be at least 1, not {count}")
        self.retention.guard(self.log.end)
        if self.retention.disk_full:
            raise DiskFullError(self.retention.refusal())
        check_topic(topic)
        if not 0 <= queue_id <= MAX_QUEUE_ID:
            raise InvalidParameterError(f"queue id {queue_id} is out of range")
        batch = scan_batch(payload, count, topic.encode(), self._max_body, self._max_record)
        cq = self.queues.get_or_create(topic, queue_id)
        first = cq.max_offset
        store_ms = time.time_ns() // 1_000_000
        host = self._host if not store_host else self._host_bytes(store_host)
        try:
            # the queue's blocks first: once the records are in the log, its entries must go in
            cq.reserve(count)
        except OSError as exc:
            raise self.write_failed(f"ConsumeQueue {cq.name}", exc) from None
        try:
            appended = self.log.append(
                payload, batch.sizes, batch.flags, batch.tags, queue_id, first, store_ms, host
            )
        except OSError as exc:
            raise self.write_failed("the CommitLog", exc) from None
        except DiskFullError as exc:
            self._refused(exc.message)
            raise
        cq.append(appended.cq_entries, store_ms)
        self.last_store_ms = store_ms
        if self._refusing:
            self._refusing = ""
            log.warning("the store writes again: a put succeeded after a full disk")
        return PutResult(
            first,
            appended.phys_offsets,
            appended.from_offset,
            appended.next_offset,
            appended.written,
        )

    def write_failed(self, what: str, exc: OSError) -> FerryError:
        """A put that could not write (nothing of it stays): DiskFullError when the disk is
        full, ServiceNotAvailableError for other disk errors."""
        if exc.errno != errno.ENOSPC:
            log.error("cannot write %s: %s", what, exc)
            return ServiceNotAvailableError(f"cannot write {what}: {exc.strerror}")
        self.retention.check_disk()
        message = (
            f"disk full: no space left on the file system of {self.root} for {what} "
            f"({self.retention.used_ratio:.1%} used): the store refuses writes until space "
            "is freed; reads go on"
        )
        self._refused(message)
        return DiskFullError(message)

    def _refused(self, message: str) -> None:
        if not self._refusing:  # once per episode: a producer may retry thousands of times
            log.error("%s", message)
        self._refusing = message

    def _host_bytes(self, host: str) -> bytes:
        packed = self._hosts.get(host)
        if packed is None:
            if len(self._hosts) > 64:  # a handful of remoting endpoints at most
                self._hosts.clear()
            packed = self._hosts[host] = record.pack_host(host)
        return packed

    # ---- reads ----

    def get(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        max_msgs: int = 32,
        max_bytes: int = 4 * 1024 * 1024,
        tag_codes: Collection[int] = (),
        payload: bool = True,
        sql: str = "",
    ) -> GetResult:
        """Records of a queue from queue_offset, as they lie in the log; with payload=False,
        only where they lie (runs). tag_codes or an SQL92 filter (sql) skip records; skipped
        ones move the next offset on (NO_MATCHED_MSG when none is left)."""
        return get_records(
            self.log,
            self.queues.get(topic, queue_id),
            self.confirmed,
            queue_offset,
            max_msgs,
            max_bytes,
            tag_codes,
            payload,
            sql,
        )

    def gate_reads(self) -> None:
        """From now on queue reads stop at `confirmed`, which only confirm() moves. It starts
        at the log's end: what a restarted store holds counts as kept."""
        self.confirmed = self._confirm_wanted = self.log.end

    def confirm(self, offset: int) -> bool:
        """The in-sync set acked the log up to offset; True if readers may see more. A slave
        hears its master's confirm with the bytes it is about to append: an offset past the
        log's end is kept and applied as the log grows (confirm_grown), or a confirm that no
        later write repeats would never be applied (the relay sends each offset once)."""
        if self.confirmed is None:
            return False
        self._confirm_wanted = max(self._confirm_wanted, offset)
        return self.confirm_grown()

    def confirm_grown(self) -> bool:
        """After an append: True if a confirm heard earlier now reaches further."""
        if self.confirmed is None:
            return False
        reach = min(self._confirm_wanted, self.log.end)
        if reach <= self.confirmed:
            return False
        self.confirmed = reach
        return True

    def queue_stats(self, topic: str, queue_ids: Collection[int]) -> list[QueueStat]:
        out: list[QueueStat] = []
        for qid in queue_ids:
            cq = self.queues.get(topic, qid)
            if cq is None:
                out.append(QueueStat(qid, 0, 0, 0))
            else:
                out.append(QueueStat(qid, cq.min_offset, cq.max_offset, cq.last_store_ms))
        return out

    def read_log(self, from_offset: int, max_bytes: int) -> ReadLogResult:
        """Whole records from from_offset (moved up to the log's start, and past a blank
        segment tail); at least one record when there is one."""
        lo, hi = self.log.min_offset, self.log.end
        if from_offset > hi:
            raise InvalidParameterError(f"offset {from_offset} is past the log end {hi}")
        start, nxt, data = self.log.read_records(max(from_offset, lo), max(max_bytes, 1))
        return ReadLogResult(start, nxt, lo, hi, data)

    def log_slice(self, start: int, stop: int) -> memoryview | bytes:
        return self.log.slice(start, stop)

    def search_offset(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset stored at or after timestamp_ms (max offset if none)."""
        return offset_by_time(self.log, self.queues.get(topic, queue_id), timestamp_ms)

    def query_cq(self, topic: str, queue_id: int, index: int, count: int) -> ConsumeQueueReply:
        return cq_entries(self.log, self.queues.get(topic, queue_id), index, count)

    def view(self, phys_offset: int) -> memoryview:
        """The record at a CommitLog offset; QueryNotFoundError when there is none."""
        return view_record(self.log, phys_offset)

    def status(self) -> StoreStatusReply:
        return StoreStatusReply(
            min_offset=self.log.min_offset,
            max_offset=self.log.end,
            flushed_offset=self.log.flushed,
            topics=self.queues.topic_count(),
            queues=len(self.queues.queues),
            recovered_offset=self.recovered_offset,
            disk_full=self.retention.disk_full,
            disk_used_ratio=self.retention.used_ratio,
        )

    def held_queues(self) -> dict[str, int]:
        """By topic, 1 + the highest queue id still holding entries: how many queues a topic
        config must offer for reading so that nothing stored is out of reach."""
        held: dict[str, int] = {}
        for (topic, queue_id), cq in self.queues.queues.items():
            if cq.max_offset > cq.min_offset:
                held[topic] = max(held.get(topic, 0), queue_id + 1)
        return held

    # ---- retention ----

    def run_retention(
        self, *, manual: bool = False, before_delete: Callable[[], None] = lambda: None
    ) -> RetentionReport:
        """One retention pass now; before_delete runs before the first file is deleted (no
        flush may be running then)."""
        return self.retention.run(
            now_ms=time.time_ns() // 1_000_000,
            hour=time.localtime().tm_hour,
            manual=manual,
            before_delete=before_delete,
        )

    # ---- durability ----

    def begin_flush(self) -> FlushPlan | None:
        """What a full flush now would cover (CommitLog, ConsumeQueues, then the checkpoint);
        None when nothing changed since the last one."""
        end = self.log.end
        data = CheckpointData(end, end, self.last_store_ms, self.last_store_ms)
        segments = self.log.unflushed_segments()
        files = segments + self.queues.take_dirty()
        if not files and data == self._written:
            return None
        return FlushPlan(files, data, log_files=len(segments))

    def begin_log_sync(self) -> FlushPlan | None:
        """A group commit: the CommitLog alone, up to its end; None when it is all flushed."""
        end = self.log.end
        if self.log.flushed >= end:
            return None
        segments: list[MappedFile | PendingDir] = [*self.log.unflushed_segments()]
        return FlushPlan(segments, CheckpointData(end), write_checkpoint=False)

    def log_synced(self, offset: int) -> None:
        """The CommitLog is on disk up to offset (a flush still running said so)."""
        self.log.flushed = max(self.log.flushed, offset)

    def unflushed_bytes(self) -> int:
        return self.log.end - self.log.flushed

    def end_flush(self, plan: FlushPlan) -> None:
        self.log.flushed = max(self.log.flushed, plan.log_target)
        if plan.write_checkpoint:
            self._written = plan.data

    def flush_failed(self, plan: FlushPlan) -> None:
        """The ConsumeQueue files of a failed flush are flushed again next time."""
        segments = set(self.log.segments)
        self.queues.dirty.update(f for f in plan.files if f not in segments)

    def flush(self) -> None:
        """Flushes everything now, on this thread."""
        plan = self.begin_flush()
        if plan is not None:
            self.end_flush(plan.run(self.checkpoint))

    def close(self) -> None:
        """Clean stop: flush everything, unmap, drop the abort marker, release the lock."""
        if self._closed:
            return
        self._closed = True
        flushed = False
        try:
            self.flush()
            flushed = True
        finally:
            self.log.close()
            self.queues.close()
            self.checkpoint.close()
            if flushed:
                self.lock.mark_clean_stop()
            self.lock.release()

    def __enter__(self) -> MessageStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
