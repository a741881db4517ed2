"""Transactions on asyncio: the half message, an async local transaction, its end, and the
broker's checks answered by an async listener (the sync module's requests and rules)."""

from __future__ import annotations

import inspect
import logging
from typing import Any, Protocol

from ferry.client.aio.instance import AsyncClientInstance
from ferry.client.aio.producer import Producer
from ferry.client.message import Message, MessageExt, SendResult
from ferry.client.transaction import (
    END_TIMEOUT_S,
    LocalTransactionState,
    TransactionSendResult,
    check_call,
    cluster_masters,
    end_call,
    half_message,
    local_state,
    readable_check,
    transaction_result,
)
from ferry.protocol.codes import SendStatus
from ferry.protocol.errors import FerryError
from ferry.protocol.messages import (
    AnyReply,
    CheckTransactionStateNotice,
    ClusterInfoReply,
    GetClusterInfoRequest,
)

log = logging.getLogger("ferry.client.aio.transaction")


class AsyncTransactionListener(Protocol):
    """Both methods may be coroutines (or plain functions)."""

    def execute_local_transaction(self, msg: Message, arg: Any) -> Any: ...

    def check_local_transaction(self, msg: MessageExt) -> Any: ...


async def _outcome(value: Any) -> LocalTransactionState:
    if inspect.isawaitable(value):
        value = await value
    return local_state(value)


class TransactionProducer(Producer):
    """A Producer that also sends in transactions; its group is the one the broker checks."""

    def __init__(
        self, group: str, namesrv: str, listener: AsyncTransactionListener, **options: Any
    ) -> None:
        super().__init__(group, namesrv, **options)
        self.listener = listener

    async def start(self) -> None:
        if self._instance is not None:
            return
        await super().start()
        self._started().on_notice(self._on_notice)
        await self.heartbeat()  # so that checks can reach it before it sends anything

    async def heartbeat(self) -> None:
        """To every master of the name servers' clusters: any may hold the group's halves."""
        inst = self._started()
        addrs = set(inst.routes.master_addrs().values())
        try:
            info = await inst.routes.namesrv_request(GetClusterInfoRequest(), ClusterInfoReply)
        except FerryError as err:
            log.debug("cluster info for heartbeats not fetched: %s", err)
        else:
            addrs.update(cluster_masters(info))
        for addr in addrs:
            await self._heartbeat_to(addr)

    async def send_in_transaction(self, msg: Message, arg: Any = None) -> TransactionSendResult:
        """Sends the half message, awaits the local transaction, ends it (as the sync one)."""
        out = self._encoder().prepare([half_message(msg, self.group)])
        out = out._replace(batchable=False, transactional=True)
        sent = await self._send_alone(out)
        if sent.status is SendStatus.SEND_OK:
            try:
                state = await _outcome(self.listener.execute_local_transaction(msg, arg))
            except Exception:
                log.exception("local transaction of %s failed; its state is UNKNOWN", sent.msg_id)
                state = LocalTransactionState.UNKNOWN
        else:
            state = LocalTransactionState.ROLLBACK  # stored, but not as safely as asked
        await self._end(sent, state, {"traceparent": out.traceparent, "tracestate": out.tracestate})
        return transaction_result(sent, state)

    async def _end(
        self, sent: SendResult, state: LocalTransactionState, carrier: dict[str, str]
    ) -> None:
        inst = self._started()
        call = end_call(self.group, sent, state, carrier, inst.routes, inst.tracing)
        if call is None:
            return
        with call.sending(inst.tracing):
            await inst.connection(call.addr).request(
                call.body,
                timeout_s=min(END_TIMEOUT_S, self.send_timeout_s),
                traceparent=call.traceparent,
                tracestate=call.tracestate,
            )

    def _on_notice(self, address: str, body: AnyReply) -> None:
        if isinstance(body, CheckTransactionStateNotice) and body.producer_group == self.group:
            inst = self._instance
            if inst is not None:
                inst.spawn(self._check(inst, address, body))

    async def _check(
        self, inst: AsyncClientInstance, address: str, notice: CheckTransactionStateNotice
    ) -> None:
        msg = readable_check(notice, inst.routes, address)
        if msg is None:
            return
        try:
            state = await _outcome(self.listener.check_local_transaction(msg))
        except Exception:
            log.exception("checking transaction %s failed; answering UNKNOWN", notice.msg_id)
            state = LocalTransactionState.UNKNOWN
        call = check_call(self.group, notice, msg, state, address, inst.tracing)
        try:
            await inst.connection(address).request(
                call.body,
                timeout_s=END_TIMEOUT_S,
                traceparent=call.traceparent,
                tracestate=call.tracestate,
            )
        except FerryError as err:
            log.debug("answer to the check of %s failed: %s", notice.msg_id, err)
        inst.tracing.end(call.span, address=address)
