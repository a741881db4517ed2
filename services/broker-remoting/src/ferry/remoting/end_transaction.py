"""Transaction messages on the broker side: half messages and END_TRANSACTION.

A transactional send (SendMessageRequest.transactional, one record) is stored aside in
RMQ_SYS_TRANS_HALF_TOPIC queue 0, with the topic and queue it was sent to in its REAL_TOPIC and
REAL_QID properties, so that no consumer of the real topic sees it (transaction_records.py
builds it, and the records below).

END_TRANSACTION reads the half message back from the store by its CommitLog offset. COMMIT
stores a commit mark (an op record with TRAN_END COMMITTING), then a copy in the real topic and
queue (the message id, keys, tags and trace context kept; sysflag TX_COMMIT; PREPAREDTXOFFSET
pointing at the half message), then the op record (the mark and the copy are sent at once; the
producer is answered once both are stored, before the op record); ROLLBACK stores only the op
record; UNKNOWN changes nothing. Op records (RMQ_SYS_TRANS_OP_HALF_TOPIC, tag `d`, body: the
half message's CommitLog offset) are what the check-back service reads, through that queue
alone, to know a half message is done. A mark without an end after it (this process stopped
between the copy and the op record) has the checker look for the copy in the log just after
the mark.

A second end of the same half message is answered OK and changes nothing: the decisions of the
last DECIDED_MEMORY half messages are remembered (a commit is remembered from the moment it
starts, so two racing ends store one copy). For a half message stored before this process
started (an earlier remoting may have ended it) or older than transactionTimeOut (the checker
may have moved it to TRANS_CHECK_MAX_TIME_TOPIC), the check-back service is asked first
(TransactionStateRequest): it knows every end it has read in the transaction queues. If it
cannot answer, the end goes ahead (a possible duplicate rather than a lost commit).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from opentelemetry.trace import Span

from ferry.protocol import record
from ferry.protocol.codes import TransactionResolution
from ferry.protocol.errors import (
    BrokerSystemError,
    FerryError,
    InvalidParameterError,
)
from ferry.protocol.messages import (
    AnyReply,
    EndTransactionRequest,
    ErrorReply,
    OkReply,
    StorePutReply,
    StorePutRequest,
    TransactionStateReply,
    TransactionStateRequest,
    ViewMessageReply,
    ViewMessageRequest,
)
from ferry.protocol.names import (
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    check_group,
)
from ferry.protocol.span_attributes import messaging
from ferry.remoting.calls import Caller
from ferry.remoting.stats import BrokerStats, now_ms
from ferry.remoting.transaction_records import committed_record, op_record
from ferry.runtime import telemetry
from ferry.runtime.service import Peer, error_reply

log = logging.getLogger("ferry.remoting.transaction")

TRACER = "ferry.remoting"
DECIDED_MEMORY = 65_536
STORE_TIMEOUT_S = 10.0
CHECKBACK_TIMEOUT_S = 3.0
CLOCK_SLACK_MS = 5000  # store and remoting clocks may differ a little


class DecidedHalves:
    """The last `limit` half messages ended here (CommitLog offset -> resolution)."""

    def __init__(self, limit: int = DECIDED_MEMORY) -> None:
        self._limit = limit
        self._decided: OrderedDict[int, TransactionResolution] = OrderedDict()

    def get(self, offset: int) -> TransactionResolution | None:
        return self._decided.get(offset)

    def add(self, offset: int, resolution: TransactionResolution) -> None:
        self._decided[offset] = resolution
        self._decided.move_to_end(offset)
        while len(self._decided) > self._limit:
            self._decided.popitem(last=False)

    def discard(self, offset: int) -> None:
        self._decided.pop(offset, None)

    def __len__(self) -> int:
        return len(self._decided)


class EndTransactionProcessor:
    """checkback: asked whether a half message has ended already when an earlier remoting may
    have ended it (stored before this process started, give or take the clocks) or the checker
    may have (older than transactionTimeOut: checked, perhaps moved to the check-max topic);
    None trusts memory alone. Ends that come quickly pay no extra hop."""

    def __init__(
        self,
        store: Peer,
        store_host: str,
        stats: BrokerStats,
        checkback: Peer | None = None,
        *,
        transaction_timeout_ms: int = 6000,
    ) -> None:
        self._store = store
        self._store_host = store_host
        self._stats = stats
        self._checkback = checkback
        self._timeout_ms = transaction_timeout_ms
        self._started_ms = now_ms()
        self.decided = DecidedHalves()

    def handle(self, req: EndTransactionRequest, call: Caller) -> None:
        check_group(req.producer_group)
        if req.commit_log_offset < 0:
            raise InvalidParameterError(f"CommitLog offset {req.commit_log_offset} is negative")
        try:
            resolution = TransactionResolution(req.resolution)
        except ValueError:
            raise InvalidParameterError(f"unknown resolution {req.resolution}") from None
        if resolution is TransactionResolution.UNKNOWN:
            log.debug("transaction %s of %s: unknown yet", req.msg_id, req.producer_group)
            call.reply(OkReply())
            return
        earlier = self.decided.get(req.commit_log_offset)
        if earlier is not None:
            if earlier is not resolution:
                log.warning(
                    "half message at %d already ended with %s; %s from %s ignored",
                    req.commit_log_offset,
                    earlier.name,
                    resolution.name,
                    req.producer_group,
                )
            call.reply(OkReply())
            return
        span = self._open_span(req, resolution, call)
        self.decided.add(req.commit_log_offset, resolution)

        def finish(body: AnyReply) -> None:
            if not isinstance(body, OkReply):
                self.decided.discard(req.commit_log_offset)  # a later end may try again
            else:
                self._stats.count_transaction(resolution.name)
            error = telemetry.code_name(body.code) if isinstance(body, ErrorReply) else ""
            telemetry.end_span(span, error)
            call.reply(body)

        def on_view(body: AnyReply, frames: list[Any]) -> None:
            try:
                self._end(req, resolution, body, frames, finish)
            except FerryError as err:
                finish(error_reply(err))

        self._store.request(
            ViewMessageRequest(phys_offset=req.commit_log_offset),
            on_view,
            timeout_s=STORE_TIMEOUT_S,
        )

    def _open_span(
        self, req: EndTransactionRequest, resolution: TransactionResolution, call: Caller
    ) -> Span | None:
        if not telemetry.enabled():
            return None
        attributes = messaging(
            "end_transaction",
            message_id=req.msg_id,
            rocketmq={
                "client_group": req.producer_group,
                "transaction.resolution": resolution.name,
                "transaction.from_check": req.from_transaction_check,
            },
        )
        return telemetry.open_span(
            TRACER, "end_transaction", call.traceparent, call.tracestate, **attributes
        )

    def _end(
        self,
        req: EndTransactionRequest,
        resolution: TransactionResolution,
        body: AnyReply,
        frames: list[Any],
        finish: Callable[[AnyReply], None],
    ) -> None:
        if isinstance(body, ErrorReply):
            finish(body)  # QUERY_NOT_FOUND: no such record (or gone with retention)
            return
        if not isinstance(body, ViewMessageReply) or not frames:
            raise BrokerSystemError(f"store answered a view with {type(body).__name__}")
        try:
            half = next(record.iter_records(bytes(frames[0])))
        except (record.RecordError, StopIteration) as exc:
            raise BrokerSystemError(
                f"record at {req.commit_log_offset} unreadable: {exc}"
            ) from None
        if half.topic != TRANS_HALF_TOPIC:
            raise InvalidParameterError(
                f"the record at {req.commit_log_offset} is not a half message"
            )
        group = half.properties.get(record.PROPERTY_PGROUP, "")
        if group != req.producer_group:
            raise InvalidParameterError(
                f"the half message at {req.commit_log_offset} belongs to group {group!r}, "
                f"not {req.producer_group!r}"
            )
        real_topic = half.properties.get(record.PROPERTY_REAL_TOPIC, "")
        if req.topic and req.topic != real_topic:
            # the topic is what authorization allowed: it must be the message's own
            raise InvalidParameterError(
                f"the half message at {req.commit_log_offset} is for topic {real_topic!r}, "
                f"not {req.topic!r}"
            )
        checkback = self._checkback
        stored = half.store_timestamp
        if checkback is not None and (
            stored <= self._started_ms + CLOCK_SLACK_MS or now_ms() - stored >= self._timeout_ms
        ):
            self._ask_checkback(checkback, req, resolution, half, finish)
        else:
            self._decide(req, resolution, half, finish)

    def _ask_checkback(
        self,
        checkback: Peer,
        req: EndTransactionRequest,
        resolution: TransactionResolution,
        half: record.Record,
        finish: Callable[[AnyReply], None],
    ) -> None:
        def on_state(body: AnyReply, _frames: list[Any]) -> None:
            if isinstance(body, TransactionStateReply) and body.ended:
                log.info(
                    "half message at %d ended before; %s from %s ignored",
                    req.commit_log_offset,
                    resolution.name,
                    req.producer_group,
                )
                finish(OkReply())
                return
            if not isinstance(body, TransactionStateReply):
                # no check-back to ask (it restarts): better a possible duplicate than a lost
                # commit; the memory still covers ends seen by this process
                log.warning("check-back not asked about half %d: %s", half.phys_offset, body)
            try:
                self._decide(req, resolution, half, finish)
            except FerryError as err:
                finish(error_reply(err))

        checkback.request(
            TransactionStateRequest(commit_log_offset=half.phys_offset),
            on_state,
            timeout_s=CHECKBACK_TIMEOUT_S,
        )

    def _decide(
        self,
        req: EndTransactionRequest,
        resolution: TransactionResolution,
        half: record.Record,
        finish: Callable[[AnyReply], None],
    ) -> None:

        def write_op(then: Callable[[AnyReply], None]) -> None:
            op = op_record(half.phys_offset, resolution, now_ms())
            self._put(TRANS_OP_HALF_TOPIC, 0, op, then)

        if resolution is TransactionResolution.ROLLBACK:
            write_op(finish)
            return
        topic, queue_id, raw = committed_record(half)
        got: dict[str, AnyReply] = {}

        def arrived(which: str) -> Callable[[AnyReply], None]:
            def on_reply(reply: AnyReply) -> None:
                got[which] = reply
                if len(got) == 2:
                    on_commit(got["copy"], got["mark"])

            return on_reply

        def on_commit(reply: AnyReply, mark: AnyReply) -> None:
            if not isinstance(reply, OkReply):
                finish(reply)  # a mark without a copy: the checker finds none and checks
                return
            marked = isinstance(mark, OkReply)
            if not marked:
                log.warning("commit mark of half %d not stored: %s", half.phys_offset, mark)
            self._stats.put_messages += 1

            def after_op(op: AnyReply) -> None:
                # the checker finds the copy after the mark (copy_search there), so a failed op
                # record is only logged
                if isinstance(op, ErrorReply):
                    log.warning("op of committed half %d not stored: %s", half.phys_offset, op)
                if not marked:
                    finish(OkReply())

            write_op(after_op)
            if marked:
                # the message is in its topic, and whatever becomes of the op record the mark
                # lets the checker find the copy: the producer does not wait for the op record
                finish(OkReply())

        # the commit mark before the copy: if this process stops between the copy and the op
        # record, the checker finds the copy by reading the log from the mark on (never all of
        # the log). Both go at once on the one connection to the store, which appends puts in
        # the order it reads them: the mark lies before the copy without a round trip between.
        mark = op_record(half.phys_offset, resolution, now_ms(), committing=True)
        self._put(TRANS_OP_HALF_TOPIC, 0, mark, arrived("mark"))
        self._put(topic, queue_id, raw, arrived("copy"))

    def _put(self, topic: str, queue_id: int, raw: bytes, then: Callable[[AnyReply], None]) -> None:
        def on_put(reply: AnyReply, _frames: list[Any]) -> None:
            if isinstance(reply, StorePutReply):
                then(OkReply())
            elif isinstance(reply, ErrorReply):
                then(reply)
            else:
                err = BrokerSystemError(f"store answered a put with {type(reply).__name__}")
                then(error_reply(err))

        self._store.request(
            StorePutRequest(topic=topic, queue_id=queue_id, count=1, store_host=self._store_host),
            on_put,
            [raw],
            timeout_s=STORE_TIMEOUT_S,
        )
