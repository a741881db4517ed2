"""The broker's scheduler seen from remoting: its status request passed through, and its
figures added to the broker runtime info under RocketMQ-style keys."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ferry.protocol.errors import ServiceNotAvailableError
from ferry.protocol.messages import (
    AnyReply,
    ErrorReply,
    SchedulerStatusReply,
    SchedulerStatusRequest,
)
from ferry.runtime.service import Call, Peer

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
    def __init__(self, peer: Peer | None) -> None:
        self._peer = peer

    def status(self, req: SchedulerStatusRequest, call: Call) -> None:
        if self._peer is None:
            raise ServiceNotAvailableError("this broker runs no scheduler (schedulerEndpoint)")

        def on_reply(body: AnyReply, _frames: list[Any]) -> None:
            call.reply(body)

        self._peer.request(req, on_reply, timeout_s=STATUS_TIMEOUT_S)

    def add_runtime_info(self, info: dict[str, str], done: Callable[[], None]) -> None:
        """Adds the scheduler's keys to info (or why there are none), then calls done."""
        if self._peer is None:
            done()
            return

        def on_reply(body: AnyReply, _frames: list[Any]) -> None:
            if isinstance(body, SchedulerStatusReply):
                info.update(runtime_keys(body))
            elif isinstance(body, ErrorReply):
                info["schedulerStatus"] = f"unavailable: {body.message}"
            done()

        self._peer.request(SchedulerStatusRequest(), on_reply, timeout_s=STATUS_TIMEOUT_S)
