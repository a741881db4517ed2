"""SYNC_MASTER: a stored send is answered once a slave acked the log up to the put's end.

Remoting asks the group's ha-replicator (HaWaitAckRequest) after the store's put. As in
RocketMQ, the message stays stored on the master whatever the answer: a slave that does not
ack within syncFlushTimeout makes the status FLUSH_SLAVE_TIMEOUT, no slave in sync (none
connected, or further behind than haMaxGapNotInSync) makes it SLAVE_NOT_AVAILABLE.
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec

from ferry.protocol.codes import ResponseCode, SendStatus
from ferry.protocol.messages import (
    AnyReply,
    ErrorReply,
    HaWaitAckReply,
    HaWaitAckRequest,
    SendMessageReply,
)
from ferry.runtime.service import Call, Peer

log = logging.getLogger("ferry.remoting.ha_wait")

GRACE_S = 2.0  # on top of syncFlushTimeout before the ha-replicator counts as silent


class SlaveAckWait:
    def __init__(self, ha: Peer, timeout_ms: int) -> None:
        self._ha = ha
        self._timeout_ms = timeout_ms

    def reply(self, call: Call, reply: SendMessageReply, end_offset: int) -> None:
        if reply.status != SendStatus.SEND_OK or end_offset <= 0:
            call.reply(reply)
            return

        def on_ack(body: AnyReply, _frames: list[Any]) -> None:
            if isinstance(body, HaWaitAckReply):
                status = body.status
            elif isinstance(body, ErrorReply) and body.code == ResponseCode.RPC_TIME_OUT:
                status = SendStatus.FLUSH_SLAVE_TIMEOUT
            else:
                log.warning("ha-replicator: %s", getattr(body, "message", type(body).__name__))
                status = SendStatus.SLAVE_NOT_AVAILABLE
            call.reply(
                reply if status == reply.status else msgspec.structs.replace(reply, status=status)
            )

        self._ha.request(
            HaWaitAckRequest(offset=end_offset, timeout_ms=self._timeout_ms),
            on_ack,
            timeout_s=self._timeout_ms / 1000 + GRACE_S,
        )
