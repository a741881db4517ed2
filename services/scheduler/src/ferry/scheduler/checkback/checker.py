"""TransactionChecker: finds half messages whose transaction has not ended and has them checked.

It follows the three transaction queues through their ConsumeQueues with long polling
(queue_reader): half messages, op records and check-max copies, keeping the table of pending
half messages (half_table, log_scan); ordinary traffic costs it nothing. Every
transactionCheckInterval, if every queue was read to its end, half messages older than
transactionTimeOut are due: each is read back from the store and queued for remoting, which
fetches the queue with a long poll (TransactionChecksRequest) and asks a live producer of the
group; a check counts when remoting takes it. A half message checked transactionCheckMax times
is copied to TRANS_CHECK_MAX_TIME_TOPIC (never delivered) instead, which ends it. A commit mark
left without an end (remoting stopped between a commit's copy and its op record) is resolved
by a bounded search of the log after it (copy_search). Progress (queue offsets + table) is
saved every SAVE_INTERVAL_S when it changed, and on stop (progress.py).
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry.trace import SpanKind

from ferry.protocol import record
from ferry.protocol.codes import ResponseCode
from ferry.protocol.messages import (
    AnyReply,
    ErrorReply,
    StorePutReply,
    StorePutRequest,
    TransactionCheck,
    TransactionChecksReply,
    TransactionChecksRequest,
    TransactionStateReply,
    TransactionStateRequest,
    ViewMessageReply,
    ViewMessageRequest,
)
from ferry.protocol.names import (
    TRAN_END_PROPERTY,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
)
from ferry.runtime import telemetry
from ferry.runtime.config import BrokerConfig
from ferry.runtime.service import Call, HandlerResult, Peer, Service
from ferry.scheduler.checkback import progress
from ferry.scheduler.checkback.copy_search import CopySearch
from ferry.scheduler.checkback.half_table import CheckPolicy, HalfMessage, HalfTable, Mark
from ferry.scheduler.checkback.log_scan import COPY_WINDOW_MS, Ended, Marked, event_of
from ferry.scheduler.checkback.queue_reader import QueueReader

log = logging.getLogger("ferry.scheduler.checkback")

TRACER = "ferry.checkback"
SAVE_INTERVAL_S = 1.0
STORE_TIMEOUT_S = 10.0
MAX_QUEUED_CHECKS = 10_000
CLOCK_SLACK_MS = 5000  # the store's clock (marks' store times) and ours may differ a little
OP_TAG = "d"  # as remoting's op records
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


def now_ms() -> int:
    return int(time.time() * 1000)


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
        self._queue: collections.deque[tuple[HalfMessage, bytes]] = collections.deque()
        self._held: tuple[Call, int] | None = None  # remoting's long poll, and its max
        self._search: CopySearch | None = None  # the round's search for copies after marks
        self._closed = False
        self.checks_sent = 0
        self.discarded = 0
        self.searches = 0
        self.copies_found = 0
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
        if self._held is not None:  # remoting polls again at once, and reaches our successor
            call, _ = self._held
            self._held = None
            call.reply(TransactionChecksReply())
        self.save_if_dirty(force=True)

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

    # ---- commit marks left without an end ----

    def _search_marks(self) -> None:
        """Once per round: marks old enough that no copy can still come after them are
        resolved by one bounded read of the log (copy_search)."""
        if self._search is not None:
            return
        now = now_ms()
        stale = {
            offset: mark
            for offset, mark in self.table.marks.items()
            if now - mark.store_ms >= COPY_WINDOW_MS + CLOCK_SLACK_MS
        }
        if not stale:
            return
        # the oldest mark and those within COPY_WINDOW_MS of it (one crash leaves marks that
        # close together): one read of at most twice the window; later ones at later rounds
        first = min(stale.values())
        stale = {o: m for o, m in stale.items() if m.store_ms <= first.store_ms + COPY_WINDOW_MS}
        start = min(m.op_offset for m in stale.values())
        until = max(m.store_ms for m in stale.values()) + COPY_WINDOW_MS

        def done(found: set[int], complete: bool) -> None:
            self._search = None
            for offset in found:
                self._found_copy(offset)
            if complete:
                for offset, mark in stale.items():
                    if offset not in found and self.table.marks.get(offset) == mark:
                        log.info("half message at %d: no copy after its commit mark", offset)
                        self.table.unmark(offset)  # checked as any pending one
                self._dirty = True

        self.searches += 1
        self._search = CopySearch(self._store, start, set(stale), until, done)
        self._search.run()

    def _search_one(self, offset: int, mark: Mark, then: Callable[[], None]) -> None:
        def done(found: set[int], _complete: bool) -> None:
            if offset in found:
                self._found_copy(offset)
            then()

        self.searches += 1
        CopySearch(
            self._store, mark.op_offset, {offset}, mark.store_ms + COPY_WINDOW_MS, done
        ).run()

    def _found_copy(self, offset: int) -> None:
        """The half message's copy is stored: it ended with a commit whose op record was
        lost; that op record is written now, so the end is in the op queue as usual."""
        self.copies_found += 1
        self._dirty = True
        if not self.table.end(offset):
            return
        log.warning("half message at %d: committed copy found without its op record", offset)
        props = {record.PROPERTY_TAGS: OP_TAG, TRAN_END_PROPERTY: "COMMIT"}
        op = record.encode_record(
            TRANS_OP_HALF_TOPIC.encode(),
            str(offset).encode(),
            record.encode_properties(props),
            born_timestamp=now_ms(),
        )

        def on_put(body: AnyReply, _frames: list[Any]) -> None:
            if not isinstance(body, StorePutReply):  # the table knows; the op is for others
                log.warning("op record of committed half %d not stored: %s", offset, body)

        self._store.request(
            StorePutRequest(topic=TRANS_OP_HALF_TOPIC, queue_id=0, count=1),
            on_put,
            [op],
            timeout_s=STORE_TIMEOUT_S,
        )

    # ---- check rounds ----

    def _round(self) -> None:
        if self._closed or not all(r.caught_up for r in self.readers):
            return  # ends may lie in what is not read yet
        self._search_marks()
        checks, discards = self.table.due(now_ms(), self._policy, self._busy)
        room = MAX_QUEUED_CHECKS - len(self._queue)
        for half in checks[: max(room, 0)]:
            self._busy.add(half.phys_offset)
            self._view(half, self._queue_check)
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

    def _queue_check(self, half: HalfMessage, raw: bytes) -> None:
        self._queue.append((half, raw))
        if self._held is not None:
            call, max_checks = self._held
            self._held = None
            call.reply(*self._take(max_checks))

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
        max_checks = max(1, req.max_checks)
        if self._held is not None:  # a newer poll replaces an older one
            old, _ = self._held
            self._held = None
            old.reply(TransactionChecksReply())
        if self._queue or req.suspend_ms <= 0:
            return self._take(max_checks)
        self._held = (call, max_checks)
        self._service.later(req.suspend_ms / 1000, lambda: self._release(call))
        return None

    def handle_state(self, req: TransactionStateRequest, call: Call) -> HandlerResult:
        """Has this half message ended? Known only for what the checker has read: a half
        message not read yet is neither ended nor pending as far as it can tell. A pending
        one with a commit mark (an earlier commit stopped halfway) is answered once the log
        after the mark says whether its copy is stored."""
        offset = req.commit_log_offset
        mark = self.table.marks.get(offset)
        if mark is None or offset not in self.table:
            return self._state(offset)
        self._search_one(offset, mark, lambda: call.reply(self._state(offset)))
        return None

    def _state(self, offset: int) -> TransactionStateReply:
        return TransactionStateReply(
            ended=self.table.has_ended(offset), pending=offset in self.table
        )

    def _release(self, call: Call) -> None:
        if self._held is not None and self._held[0] is call:
            self._held = None
            call.reply(TransactionChecksReply())

    def _take(self, max_checks: int) -> tuple[TransactionChecksReply, list[Any]]:
        checks: list[TransactionCheck] = []
        raws: list[bytes] = []
        at = now_ms()
        while self._queue and len(checks) < max_checks:
            half, raw = self._queue.popleft()
            self._busy.discard(half.phys_offset)
            if half.phys_offset not in self.table:
                continue  # ended while it waited
            self.table.checked(half.phys_offset, at)
            checks.append(
                TransactionCheck(
                    producer_group=half.group,
                    commit_log_offset=half.phys_offset,
                    record_size=len(raw),
                    tran_state_table_offset=half.queue_offset,
                    msg_id=half.msg_id,
                    transaction_id=half.msg_id,
                    check_times=half.checks - 1,
                    traceparent=self._check_span(half),
                )
            )
            raws.append(raw)
        if checks:
            self.checks_sent += len(checks)
            self._dirty = True
        return TransactionChecksReply(checks=checks), [b"".join(raws)] if raws else []

    def _check_span(self, half: HalfMessage) -> str:
        """A span for the check in the half message's trace; its context for remoting."""
        attributes: dict[str, Any] = {
            "messaging.system": "rocketmq",
            "messaging.operation.name": "check_transaction_state",
            "messaging.message.id": half.msg_id,
            "messaging.rocketmq.client_group": half.group,
            "messaging.rocketmq.transaction.check_times": half.checks - 1,
        }
        # the check-back asks (through remoting): a CLIENT span, like the SDK's own
        span = telemetry.open_span(
            TRACER,
            "check_transaction_state",
            half.traceparent,
            kind=SpanKind.CLIENT,
            **attributes,
        )
        if span is None:
            return half.traceparent
        traceparent, _ = telemetry.traceparent_of(span)
        telemetry.end_span(span)
        return traceparent

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
            "transactionCopySearches": self.searches,
            "transactionCopiesFound": self.copies_found,
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
