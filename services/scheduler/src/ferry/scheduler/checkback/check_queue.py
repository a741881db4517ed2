"""CheckQueue: the checks waiting for remoting. Due half messages read back from the store
wait here; remoting fetches them with a long poll (TransactionChecksRequest), held until one
comes or the poll's time is up. A check counts when remoting takes it, and each has a span
in its half message's trace."""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

from opentelemetry.trace import SpanKind

from ferry.protocol.messages import (
    TransactionCheck,
    TransactionChecksReply,
    TransactionChecksRequest,
)
from ferry.protocol.span_attributes import messaging
from ferry.runtime import telemetry
from ferry.runtime.service import Call, HandlerResult, Service
from ferry.scheduler.checkback.clock import now_ms
from ferry.scheduler.checkback.half_table import HalfMessage, HalfTable

TRACER = "ferry.checkback"


class CheckQueue:
    def __init__(
        self, service: Service, table: HalfTable, busy: set[int], changed: Callable[[], None]
    ) -> None:
        """busy: the checker's half messages being read back, queued or discarded (a check
        taken or dropped leaves it); changed: called when the table changed."""
        self._service = service
        self.table = table
        self._busy = busy
        self._changed = changed
        self._queue: collections.deque[tuple[HalfMessage, bytes]] = collections.deque()
        self._held: tuple[Call, int] | None = None  # remoting's long poll, and its max
        self.checks_sent = 0

    def __len__(self) -> int:
        return len(self._queue)

    def put(self, half: HalfMessage, raw: bytes) -> None:
        """A due half message, read back: answers a held poll at once."""
        self._queue.append((half, raw))
        if self._held is not None:
            call, max_checks = self._held
            self._held = None
            call.reply(*self._take(max_checks))

    def let_go(self) -> None:
        """On stop: a held poll is answered empty (remoting polls again at once, and reaches
        our successor)."""
        if self._held is not None:
            call, _ = self._held
            self._held = None
            call.reply(TransactionChecksReply())

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
            self._changed()
        return TransactionChecksReply(checks=checks), [b"".join(raws)] if raws else []

    @staticmethod
    def _check_span(half: HalfMessage) -> str:
        """A span for the check in the half message's trace; its context for remoting."""
        attributes = messaging(
            "check_transaction_state",
            message_id=half.msg_id,
            rocketmq={
                "client_group": half.group,
                "transaction.check_times": half.checks - 1,
            },
        )
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
