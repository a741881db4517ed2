"""The broker's scheduler seen from remoting: its status request passed through (with the
transaction check-back's figures added), its figures added to the broker runtime info under
RocketMQ-style keys, and its progress carried from a master's scheduler to its slaves'
(slave_sync.py)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import msgspec

from ferry.protocol.errors import ServiceNotAvailableError
from ferry.protocol.messages import (
    AnyReply,
    ErrorReply,
    OkReply,
    SchedulerAdoptProgressRequest,
    SchedulerProgress,
    SchedulerProgressReply,
    SchedulerProgressRequest,
    SchedulerStatusReply,
    SchedulerStatusRequest,
    TransactionCheckStatusReply,
    TransactionCheckStatusRequest,
)
from ferry.remoting.calls import Caller
from ferry.runtime.service import Peer

log = logging.getLogger("ferry.remoting.scheduler_link")

STATUS_TIMEOUT_S = 2.0  # brokerStatus stays quick while the scheduler restarts


def runtime_keys(status: SchedulerStatusReply) -> dict[str, str]:
    """RocketMQ's `scheduleMessageOffset_<level>` ("delivered offset,max offset") and the
    timer's figures, for brokerStatus."""
    info = {
        f"scheduleMessageOffset_{level.level}": f"{level.offset},{level.max_offset}"
        for level in status.levels
    }
    info.update(
        scheduleMessageDelivered=str(sum(level.delivered for level in status.levels)),
        timerOffsetBehind=str(max(0, status.timer_queue_max - status.timer_queue_offset)),
        timerPendingCount=str(status.timer_pending),
        timerReadTimeMs=str(status.timer_read_ms),
        timerDelivered=str(status.timer_delivered),
        scheduleSkippedDuplicates=str(status.skipped_duplicates),
    )
    info.update(status.extra)
    return info


class SchedulerLink:
    def __init__(self, peer: Peer | None, checkback: Peer | None = None) -> None:
        self._peer = peer
        self._checkback = checkback

    def status(self, req: SchedulerStatusRequest, call: Caller) -> None:
        if self._peer is None:
            raise ServiceNotAvailableError("this broker runs no scheduler (schedulerEndpoint)")

        def on_reply(body: AnyReply, _frames: list[Any]) -> None:
            if not isinstance(body, SchedulerStatusReply):
                call.reply(body)
                return
            extra = dict(body.extra)
            self._add_checkback(
                extra, lambda: call.reply(msgspec.structs.replace(body, extra=extra))
            )

        self._peer.request(req, on_reply, timeout_s=STATUS_TIMEOUT_S)

    def add_runtime_info(self, info: dict[str, str], done: Callable[[], None]) -> None:
        """Adds the scheduler's and the check-back's keys to info (or why there are none),
        then calls done."""
        if self._peer is None:
            self._add_checkback(info, done)
            return

        def on_reply(body: AnyReply, _frames: list[Any]) -> None:
            if isinstance(body, SchedulerStatusReply):
                info.update(runtime_keys(body))
            elif isinstance(body, ErrorReply):
                info["schedulerStatus"] = f"unavailable: {body.message}"
            self._add_checkback(info, done)

        self._peer.request(SchedulerStatusRequest(), on_reply, timeout_s=STATUS_TIMEOUT_S)

    def _add_checkback(self, info: dict[str, str], done: Callable[[], None]) -> None:
        """The check-back's figures (transactionHalfPending, …) into info, then done; while it
        restarts: transactionCheckStatus says why they are missing."""
        if self._checkback is None:
            done()
            return

        def on_reply(body: AnyReply, _frames: list[Any]) -> None:
            if isinstance(body, TransactionCheckStatusReply):
                info.update(body.figures)
            elif isinstance(body, ErrorReply):
                info["transactionCheckStatus"] = f"unavailable: {body.message}"
            done()

        self._checkback.request(
            TransactionCheckStatusRequest(), on_reply, timeout_s=STATUS_TIMEOUT_S
        )

    def progress(self, done: Callable[[SchedulerProgress | None], None]) -> None:
        """Calls done with the scheduler's last saved progress, or None (no scheduler, nothing
        saved, no answer in time: a slave's sync then goes without it)."""
        if self._peer is None:
            done(None)
            return

        def on_reply(body: AnyReply, _frames: list[Any]) -> None:
            done(body.progress if isinstance(body, SchedulerProgressReply) else None)

        self._peer.request(SchedulerProgressRequest(), on_reply, timeout_s=STATUS_TIMEOUT_S)

    def adopt(self, progress: SchedulerProgress) -> None:
        """Hands a master's progress to this (slave's) scheduler."""
        if self._peer is None:
            return

        def on_reply(body: AnyReply, _frames: list[Any]) -> None:
            if not isinstance(body, OkReply):
                message = body.message if isinstance(body, ErrorReply) else type(body).__name__
                log.warning("the scheduler did not adopt the master's progress: %s", message)

        self._peer.request(
            SchedulerAdoptProgressRequest(progress=progress), on_reply, timeout_s=STATUS_TIMEOUT_S
        )
