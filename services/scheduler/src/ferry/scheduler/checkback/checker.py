"""TransactionChecker: finds half messages whose transaction has not ended and has them checked.

It follows the three transaction queues through their ConsumeQueues with long polling
(queue_reader): half messages, op records and check-max copies, keeping the table of pending
half messages (half_table, log_scan); ordinary traffic costs it nothing. Every
transactionCheckInterval, if every queue was read to its end, half messages older than
transactionTimeOut are due: each is read back from the store and queued for remoting, which
fetches the queue with a long poll (TransactionChecksRequest) and asks a live producer of the
group; a check counts when remoting takes it (check_queue). A half message checked
transactionCheckMax times is copied to TRANS_CHECK_MAX_TIME_TOPIC (never delivered) instead,
which ends it. A commit mark left without an end (remoting stopped between a commit's copy and
its op record) is resolved by a bounded search of the log after it (mark_search, copy_search).
Progress (queue offsets + table) is
saved every SAVE_INTERVAL_S when it changed, and on stop (progress.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ferry.protocol import record
from ferry.protocol.codes import ResponseCode
from ferry.protocol.messages import (
    AnyReply,
    ErrorReply,
    StorePutReply,
    StorePutRequest,
    TransactionChecksRequest,
    TransactionStateReply,
    TransactionStateRequest,
    ViewMessageReply,
    ViewMessageRequest,
)
from ferry.protocol.names import (
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
)
from ferry.runtime.config import BrokerConfig
from ferry.runtime.service import Call, HandlerResult, Peer, Service
from ferry.scheduler.checkback import progress
from ferry.scheduler.checkback.check_queue import CheckQueue
from ferry.scheduler.checkback.clock import now_ms
from ferry.scheduler.checkback.half_table import CheckPolicy, HalfMessage, HalfTable
from ferry.scheduler.checkback.log_scan import Ended, Marked, event_of
from ferry.scheduler.checkback.mark_search import MarkSearch
from ferry.scheduler.checkback.queue_reader import QueueReader

log = logging.getLogger("ferry.scheduler.checkback")

SAVE_INTERVAL_S = 1.0
STORE_TIMEOUT_S = 10.0
MAX_QUEUED_CHECKS = 10_000
MAX_LEAD_BYTES = 64 * 1024 * 1024  # of CommitLog, between the half and the op queue readers


@dataclass(frozen=True)
class CheckerSettings:
    timeout_ms: int = 6000  # transactionTimeOut
    check_interval_ms: int = 60_000  # transactionCheckInterval
    check_max: int = 15  # transactionCheckMax

    @classmethod
    def from_config(cls, config: BrokerConfig) -> CheckerSettings:
        return cls(
            config.transaction_time_out,
            config.transaction_check_interval,
            config.transaction_check_max,
        )


class TransactionChecker:
    def __init__(
        self, service: Service, store: Peer, settings: CheckerSettings, directory: Path
    ) -> None:
        self._service = service
        self._store = store
        self.settings = settings
        self._policy = CheckPolicy(settings.timeout_ms, settings.check_max)
        self._directory = directory
        saved = progress.load(directory)
        self.table = HalfTable()
        self.table.load(saved.table)
        at = saved.offsets
        # neither the half nor the op queue is read far ahead of the other (a first start on a
        # long history): what one reads early waits in the table for the other
        self.half_reader = QueueReader(
            service,
            store,
            TRANS_HALF_TOPIC,
            at.get(TRANS_HALF_TOPIC, 0),
            self._apply,
            hold=lambda: self._ahead(self.half_reader, self.op_reader),
        )
        self.op_reader = QueueReader(
            service,
            store,
            TRANS_OP_HALF_TOPIC,
            at.get(TRANS_OP_HALF_TOPIC, 0),
            self._apply,
            hold=lambda: self._ahead(self.op_reader, self.half_reader),
        )
        max_reader = QueueReader(
            service,
            store,
            TRANS_CHECK_MAX_TIME_TOPIC,
            at.get(TRANS_CHECK_MAX_TIME_TOPIC, 0),
            self._apply,
        )
        self.readers = [self.half_reader, self.op_reader, max_reader]
        self._dirty = False  # the table or an offset changed since the last save
        self._busy: set[int] = set()  # half messages being read back, queued or discarded
        self.checks = CheckQueue(service, self.table, self._busy, self._changed)
        self.mark_search = MarkSearch(store, self.table, self._changed)
        self._closed = False
        self.discarded = 0
        if saved.offsets:
            log.info(
                "transaction checker resumes at queue offsets %s with %d pending half messages",
                saved.offsets,
                len(self.table),
            )

    name = "transactions"

    def start(self) -> None:
        """Starts following the queues and the check rounds (a Component of the app)."""
        for reader in self.readers:
            reader.start()
        self._service.every(self.settings.check_interval_ms / 1000, self._round)
        self._service.every(SAVE_INTERVAL_S, self.save_if_dirty)

    def stop(self) -> None:
        if self._closed:
            return
        self._closed = True
        for reader in self.readers:
            reader.stop()
        self.checks.let_go()
        self.save_if_dirty(force=True)

    @property
    def checks_sent(self) -> int:
        return self.checks.checks_sent

    def _changed(self) -> None:
        self._dirty = True

    # ---- what the queues say ----

    @staticmethod
    def _ahead(reader: QueueReader, other: QueueReader) -> bool:
        return not other.caught_up and reader.last_phys - other.last_phys > MAX_LEAD_BYTES

    def _apply(self, records: list[record.Record]) -> None:
        table = self.table
        for rec in records:
            event = event_of(rec)
            if isinstance(event, Ended):
                if table.end(event.half_offset):
                    log.debug("half message at %d ended", event.half_offset)
            elif isinstance(event, Marked):
                table.mark(event.half_offset, event.mark)
            elif event is not None:
                table.add(event)
        table.forget_passed()
        self._dirty = True  # an offset moved at least

    # ---- check rounds ----

    def _round(self) -> None:
        if self._closed or not all(r.caught_up for r in self.readers):
            return  # ends may lie in what is not read yet
        self.mark_search.search_stale()
        checks, discards = self.table.due(now_ms(), self._policy, self._busy)
        room = MAX_QUEUED_CHECKS - len(self.checks)
        for half in checks[: max(room, 0)]:
            self._busy.add(half.phys_offset)
            self._view(half, self.checks.put)
        for half in discards:
            self._busy.add(half.phys_offset)
            self._view(half, self._discard)

    def _view(self, half: HalfMessage, then: Any) -> None:
        def on_view(body: AnyReply, frames: list[Any]) -> None:
            if isinstance(body, ViewMessageReply) and frames:
                then(half, bytes(frames[0]))
                return
            self._busy.discard(half.phys_offset)
            if isinstance(body, ErrorReply) and body.code == ResponseCode.QUERY_NOT_FOUND:
                log.warning("half message at %d is gone from the store", half.phys_offset)
                self.table.end(half.phys_offset)
                self._dirty = True

        self._store.request(
            ViewMessageRequest(phys_offset=half.phys_offset), on_view, timeout_s=STORE_TIMEOUT_S
        )

    def _discard(self, half: HalfMessage, raw: bytes) -> None:
        try:
            rec = next(record.iter_records(raw))
            copy = record.retopic(
                rec, TRANS_CHECK_MAX_TIME_TOPIC, prepared_tx_offset=half.phys_offset
            )
        except (record.RecordError, StopIteration) as exc:
            log.error("half message at %d unreadable, dropped: %s", half.phys_offset, exc)
            self._busy.discard(half.phys_offset)
            self.table.end(half.phys_offset)
            self._dirty = True
            return

        def on_put(body: AnyReply, _frames: list[Any]) -> None:
            self._busy.discard(half.phys_offset)
            if isinstance(body, StorePutReply):
                self.discarded += 1
                self.table.end(half.phys_offset)
                self._dirty = True
                log.info(
                    "half message %s of %s checked %d times without an answer: moved to %s",
                    half.msg_id,
                    half.group,
                    half.checks,
                    TRANS_CHECK_MAX_TIME_TOPIC,
                )

        self._store.request(
            StorePutRequest(topic=TRANS_CHECK_MAX_TIME_TOPIC, queue_id=0, count=1),
            on_put,
            [copy],
            timeout_s=STORE_TIMEOUT_S,
        )

    # ---- remoting's long poll ----

    def handle_checks(self, req: TransactionChecksRequest, call: Call) -> HandlerResult:
        """Remoting's long poll for checks (check_queue)."""
        return self.checks.handle_checks(req, call)

    def handle_state(self, req: TransactionStateRequest, call: Call) -> HandlerResult:
        """Has this half message ended? Known only for what the checker has read: a half
        message not read yet is neither ended nor pending as far as it can tell. A pending
        one with a commit mark (an earlier commit stopped halfway) is answered once the log
        after the mark says whether its copy is stored."""
        offset = req.commit_log_offset
        mark = self.table.marks.get(offset)
        if mark is None or offset not in self.table:
            return self._state(offset)
        self.mark_search.search_one(offset, mark, lambda: call.reply(self._state(offset)))
        return None

    def _state(self, offset: int) -> TransactionStateReply:
        return TransactionStateReply(
            ended=self.table.has_ended(offset), pending=offset in self.table
        )

    # ---- status and progress ----

    def status(self) -> dict[str, str]:
        """TransactionCheckStatusReply's figures (remoting adds them to schedulerStatus and
        brokerStatus)."""
        oldest = self.table.oldest_store_ms()
        half, op, check_max = (r.offset for r in self.readers)
        numbers = {
            "transactionHalfPending": len(self.table),
            "transactionOldestHalfAgeMs": now_ms() - oldest if oldest else 0,
            "transactionPendingHalfChecks": self.table.total_checks(),
            "transactionChecksSent": self.checks_sent,
            "transactionCheckMaxDiscarded": self.discarded,
            "transactionHalfEnded": self.table.ended,
            "transactionHalfQueueOffset": half,
            "transactionOpQueueOffset": op,
            "transactionCheckMaxQueueOffset": check_max,
            "transactionCommitMarks": len(self.table.marks),
            "transactionCopySearches": self.mark_search.searches,
            "transactionCopiesFound": self.mark_search.copies_found,
        }
        return {key: str(value) for key, value in numbers.items()}

    def save_if_dirty(self, *, force: bool = False) -> None:
        """Saves what changed, within SAVE_INTERVAL_S (on stop: at once)."""
        if not self._dirty and not force:
            return
        offsets = {r.topic: r.offset for r in self.readers}
        try:
            progress.save(self._directory, progress.Progress(offsets, self.table.dump()))
        except OSError:
            log.exception("transaction check progress not saved")
            return
        self._dirty = False
