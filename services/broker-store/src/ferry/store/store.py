"""MessageStore: the CommitLog, the ConsumeQueues, flush bookkeeping and recovery, composed.

A plain object (no sockets, no timers): app.py drives it from the service loop and the tests
drive it directly. Everything runs on one thread except FlushPlan.run (see flush.py).
"""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import NamedTuple

from ferry import native
from ferry.protocol import record
from ferry.protocol.codes import PullStatus
from ferry.protocol.errors import (
    BrokerSystemError,
    DiskFullError,
    FerryError,
    InvalidParameterError,
    ServiceNotAvailableError,
)
from ferry.protocol.messages import ConsumeQueueReply, QueueStat, StoreStatusReply
from ferry.protocol.names import check_topic
from ferry.runtime.config import BrokerConfig
from ferry.runtime.dir_lock import DirLock, LastStop
from ferry.store import pull_runs, truncation
from ferry.store.batch import scan_batch
from ferry.store.checkpoint import Checkpoint, CheckpointData
from ferry.store.commit_log import CommitLog
from ferry.store.consume_queue import ConsumeQueueTable
from ferry.store.flush import FlushPlan
from ferry.store.mapped_file import MappedFile, PendingDir, make_dirs
from ferry.store.property_filter import record_matcher
from ferry.store.queries import cq_entries, offset_by_time, view_record
from ferry.store.recovery import RecoveryReport, recover
from ferry.store.retention import DiskUsage, Retention, RetentionPolicy, RetentionReport

log = logging.getLogger("ferry.store")

MAX_QUEUE_ID = (1 << 31) - 1
MAX_GET_MSGS = 65_536
# ConsumeQueue entries a filtered get looks at before answering NO_MATCHED_MSG (RocketMQ's
# maxFilterMessageCount)
FILTER_SCAN = 16_000
# the same for an SQL92 filter, which reads each record's properties (~2 us a record): fewer,
# so that one sparse filter holds the store's loop for milliseconds, not tens of them
SQL_FILTER_SCAN = 4_000


class PutResult(NamedTuple):
    queue_offset: int  # of the first record
    phys_offsets: list[int]
    from_offset: int  # log end before the put ...
    next_offset: int  # ... and after it: the bytes the dispatch feed announces
    written: bytearray | None = None  # those bytes, when one write stored them all


@dataclass(frozen=True, slots=True)
class GetResult:
    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    count: int = 0
    payload: memoryview | bytes = b""
    runs: list[tuple[int, int]] | None = None  # [start, stop) log ranges of the records


class ReadLogResult(NamedTuple):
    from_offset: int
    next_offset: int
    min_offset: int
    max_offset: int
    payload: memoryview | bytes


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
        when another store holds the directory."""
        policy = RetentionPolicy.from_config(config)  # ConfigError before anything is touched
        root = config.store_root.resolve()
        make_dirs(root)
        lock = DirLock(root, "broker-store")
        parts: list[CommitLog | ConsumeQueueTable | Checkpoint] = []
        started = time.monotonic()
        try:
            checkpoint = Checkpoint(root / "checkpoint")
            parts.append(checkpoint)
            commit_log = CommitLog(root / "commitlog", config.mapped_file_size_commit_log)
            parts.append(commit_log)
            commit_log.load()
            queues = ConsumeQueueTable(root / "consumequeue", config.mapped_file_size_consume_queue)
            parts.append(queues)
            queues.load()
            clean = lock.last_stop() is LastStop.CLEAN
            saved = checkpoint.read()
            cut_at = truncation.read(root)
            report = recover(commit_log, queues, saved, cut_at)
            (log.info if clean else log.warning)(
                "%s; log end %d (verified from %d), %d entries dropped, %d re-dispatched; "
                "files loaded and checked in %.0f ms",
                "clean start" if clean else "the last run did not stop cleanly: recovered",
                report.log_end,
                report.scanned_from,
                report.dropped_entries,
                report.redispatched,
                (time.monotonic() - started) * 1000,
            )
            store = cls(
                root,
                lock,
                checkpoint,
                commit_log,
                queues,
                Retention(
                    commit_log, queues, policy, DiskUsage(root, config.disk_used_ratio_override)
                ),
                max_message_size=config.max_message_size,
                store_host=f"{config.advertised_host}:{config.listen_port}",
            )
            store.last_store_ms = max(
                (cq.last_store_ms for cq in queues.queues.values()), default=0
            )
            store._written = saved or CheckpointData()
            store.recovery = report
            truncation.done(root, commit_log)
            store.retention.check_disk()
            lock.mark_running()
        except BaseException:
            for part in reversed(parts):
                part.close()
            lock.release()
            raise
        return store

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
        cq = self.queues.get(topic, queue_id)
        lo, hi = (cq.min_offset, cq.max_offset) if cq is not None else (0, 0)
        if cq is not None and self.confirmed is not None and self.confirmed < self.log.end:
            # readers see only what the in-sync set holds (gate_reads): the rest may be cut
            hi = cq.first_past(max(lo, min(queue_offset, hi)), hi, self.confirmed)
        if queue_offset < lo or queue_offset > hi:
            nearest = lo if queue_offset < lo else hi
            return GetResult(PullStatus.OFFSET_ILLEGAL, nearest, lo, hi)
        if queue_offset == hi or cq is None:
            return GetResult(PullStatus.NO_NEW_MSG, queue_offset, lo, hi)
        max_msgs = min(max(max_msgs, 1), MAX_GET_MSGS, hi - queue_offset)
        wanted = set(tag_codes) if tag_codes else None
        match = record_matcher(self.log, sql) if sql else None
        scan = max_msgs
        if wanted is not None or match is not None:
            most = FILTER_SCAN if match is None else SQL_FILTER_SCAN
            scan = min(max(max_msgs, most), hi - queue_offset)
        if wanted is None and match is None and native.ENABLED:
            runs, count, nxt = pull_runs.collect(
                cq, queue_offset, max_msgs, max_bytes, self.log.end
            )
        else:
            runs, count, nxt = pull_runs.collect_py(
                cq, queue_offset, scan, max_msgs, max_bytes, wanted, self.log.end, match
            )
        if count == 0:
            if nxt > queue_offset:
                return GetResult(PullStatus.NO_MATCHED_MSG, nxt, lo, hi)
            raise BrokerSystemError(f"{cq.name}: entry {queue_offset} is unreadable")
        if not payload:
            return GetResult(PullStatus.FOUND, nxt, lo, hi, count, b"", runs)
        if len(runs) == 1:
            data: memoryview | bytes = self.log.view(runs[0][0], runs[0][1])
        else:
            data = b"".join([self.log.view(a, b) for a, b in runs])
        return GetResult(PullStatus.FOUND, nxt, lo, hi, count, data, runs)

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
