"""Transaction checks: the check-back service finds half messages still without an end after
the transaction timeout; remoting passes each question to one live producer of the half
message's group (RocketMQ's CHECK_TRANSACTION_STATE), over the connection that producer
heartbeats on, as member_notices does for consumers.

Remoting keeps one TransactionChecksRequest to the check-back service in flight (a long poll, held
there until checks are due), so checks need no connection from the check-back to remoting and
flow at once. Producers of a group are asked in turn, so a producer that stopped answering (gone
without unregistering) does not hold every check until it expires: the next check goes to
another. The producer answers with END_TRANSACTION (from_transaction_check), served by
end_transaction.
"""

from __future__ import annotations

import logging
from typing import Any

from ferry.protocol.messages import (
    AnyReply,
    CheckTransactionStateNotice,
    ErrorReply,
    TransactionCheck,
    TransactionChecksReply,
    TransactionChecksRequest,
)
from ferry.protocol.span_attributes import messaging
from ferry.remoting.client_table import ClientTable
from ferry.remoting.member_notices import MemberNotifier
from ferry.runtime import telemetry
from ferry.runtime.service import Peer, Service

log = logging.getLogger("ferry.remoting.check_relay")

TRACER = "ferry.remoting"
# short enough that a poll lost with a killed check-back is replaced soon (a clean stop answers
# it at once); an idle poll costs one small request per period
POLL_SUSPEND_MS = 2000
POLL_GRACE_S = 3.0
POLL_MAX_CHECKS = 64
RETRY_S = 1.0  # after a failed poll (the check-back restarting)


class TransactionCheckRelay:
    def __init__(
        self,
        service: Service,
        checkback: Peer,
        clients: ClientTable,
        notifier: MemberNotifier,
        *,
        suspend_ms: int = POLL_SUSPEND_MS,
    ) -> None:
        self._service = service
        self._checkback = checkback
        self._clients = clients
        self._notifier = notifier
        self._suspend_ms = suspend_ms
        self._turn: dict[str, int] = {}
        self._started = False
        self.relayed = 0
        self.unanswerable = 0  # checks for groups with no live producer

    def start(self) -> None:
        if not self._started:
            self._started = True
            self._poll()

    def _poll(self) -> None:
        self._checkback.request(
            TransactionChecksRequest(max_checks=POLL_MAX_CHECKS, suspend_ms=self._suspend_ms),
            self._on_checks,
            timeout_s=self._suspend_ms / 1000 + POLL_GRACE_S,
        )

    def _on_checks(self, body: AnyReply, frames: list[Any]) -> None:
        if not isinstance(body, TransactionChecksReply):
            if isinstance(body, ErrorReply):
                log.debug("transaction checks not fetched: %s", body.message)
            self._service.later(RETRY_S, self._poll)
            return
        try:
            raw = bytes(frames[0]) if frames else b""
            at = 0
            for check in body.checks:
                self.relay(check, raw[at : at + check.record_size])
                at += check.record_size
        finally:
            self._poll()

    def relay(self, check: TransactionCheck, half: bytes) -> bool:
        """Asks one live producer of the group; False when the group has none."""
        attributes = messaging(
            "check_transaction_state",
            message_id=check.msg_id,
            rocketmq={
                "client_group": check.producer_group,
                "transaction.check_times": check.check_times,
            },
        )
        with telemetry.server_span(
            TRACER, "check_transaction_state", check.traceparent, **attributes
        ):
            client_id = self._pick(check.producer_group)
            if client_id is None:
                self.unanswerable += 1
                log.info(
                    "half message %s: no live producer of %s to check with",
                    check.msg_id,
                    check.producer_group,
                )
                return False
            notice = CheckTransactionStateNotice(
                producer_group=check.producer_group,
                commit_log_offset=check.commit_log_offset,
                record=half,
                tran_state_table_offset=check.tran_state_table_offset,
                msg_id=check.msg_id,
                transaction_id=check.transaction_id,
            )
            self._notifier.tell(client_id, notice)
            self.relayed += 1
            log.debug(
                "half message %s of %s: asked %s", check.msg_id, check.producer_group, client_id
            )
        return True

    def _pick(self, group: str) -> str | None:
        """The next live producer of the group with a known connection, in turn."""
        live = [c for c in self._clients.producer_ids(group) if self._notifier.has_channel(c)]
        if not live:
            return None
        turn = self._turn.get(group, 0)
        self._turn[group] = turn + 1
        return live[turn % len(live)]
