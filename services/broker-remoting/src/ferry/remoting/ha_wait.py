"""SYNC_MASTER: a stored send is answered once a slave acked the log up to the put's end.

Remoting asks the group's ha-replicator (HaWaitAckRequest) after the store's put. As in
RocketMQ, the message stays stored on the master whatever the answer: a slave that does not
ack within syncFlushTimeout makes the status FLUSH_SLAVE_TIMEOUT, no slave in sync (none
connected, or further behind than haMaxGapNotInSync) makes it SLAVE_NOT_AVAILABLE.

In controller mode with allAckInSyncStateSet (in_sync_replicas.py), the wait is for every
slave of the group's in-sync set, and the ha-replicator hears of a changed set at once. Each
answer carries how far the whole set holds the log (the confirm offset); remoting hands it to
its store, whose queue reads stop there (ConfirmRelay): a record the set does not hold yet may
be cut by a failover, so no consumer may see it first.
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
from ferry.remoting.calls import Caller
from ferry.remoting.in_sync_replicas import InSyncReplicas
from ferry.runtime.confirm_relay import ConfirmRelay
from ferry.runtime.service import Peer

log = logging.getLogger("ferry.remoting.ha_wait")

GRACE_S = 2.0  # on top of syncFlushTimeout before the ha-replicator counts as silent
CONFIRM_REFRESH_S = 0.5  # asks for the confirm offset this often, sends or none


class SlaveAckWait:
    def __init__(
        self,
        ha: Peer,
        timeout_ms: int,
        isr: InSyncReplicas | None = None,
        confirm: ConfirmRelay | None = None,
    ) -> None:
        self._ha = ha
        self._timeout_ms = timeout_ms
        self._isr = isr
        self._confirm = confirm

    def refresh_confirm(self) -> None:
        """Asks the ha-replicator how far the in-sync set holds the log: reads catch up
        even when no send comes after a slow ack."""
        if self._confirm is None or self._isr is None:
            return
        confirm = self._confirm

        def on_answer(body: AnyReply, _frames: list[Any]) -> None:
            if isinstance(body, HaWaitAckReply) and body.status == SendStatus.SEND_OK:
                confirm.advance(body.acked_offset)

        request = HaWaitAckRequest(offset=0, all_of=self._isr.slaves(), any_one=self._isr.any_one())
        self._ha.request(request, on_answer, timeout_s=GRACE_S)

    def set_changed(self, slaves: list[int]) -> None:
        """Hands the ha-replicator the in-sync set's slaves (a wait for offset 0)."""

        def on_answer(body: AnyReply, _frames: list[Any]) -> None:
            if not isinstance(body, HaWaitAckReply):
                log.warning("ha-replicator: in-sync set %s not taken: %s", slaves, body)

        any_one = self._isr.any_one() if self._isr is not None else False
        request = HaWaitAckRequest(offset=0, all_of=slaves, any_one=any_one)
        self._ha.request(request, on_answer, timeout_s=GRACE_S)

    def reply(self, call: Caller, reply: SendMessageReply, end_offset: int) -> None:
        if reply.status != SendStatus.SEND_OK or end_offset <= 0:
            call.reply(reply)
            return

        def on_ack(body: AnyReply, _frames: list[Any]) -> None:
            if isinstance(body, HaWaitAckReply):
                status = body.status
                if status == SendStatus.SEND_OK and self._confirm is not None:
                    self._confirm.advance(body.acked_offset)
            elif isinstance(body, ErrorReply) and body.code == ResponseCode.RPC_TIME_OUT:
                status = SendStatus.FLUSH_SLAVE_TIMEOUT
            else:
                log.warning("ha-replicator: %s", getattr(body, "message", type(body).__name__))
                status = SendStatus.SLAVE_NOT_AVAILABLE
            call.reply(
                reply if status == reply.status else msgspec.structs.replace(reply, status=status)
            )

        all_of = self._isr.wait_for() if self._isr is not None else None
        any_one = self._isr.any_one() if self._isr is not None else False
        self._ha.request(
            HaWaitAckRequest(
                offset=end_offset, timeout_ms=self._timeout_ms, all_of=all_of, any_one=any_one
            ),
            on_ack,
            timeout_s=self._timeout_ms / 1000 + GRACE_S,
        )
