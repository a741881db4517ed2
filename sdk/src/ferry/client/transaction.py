"""Transaction messages: send a half message, run the local transaction, end it.

`send_in_transaction(msg, arg)` sends `msg` as a half message (stored aside by the broker,
invisible to consumers), calls the listener's `execute_local_transaction(msg, arg)`, then tells
the broker the outcome: COMMIT (the message is delivered), ROLLBACK (it never is) or UNKNOWN
(the broker asks again later). When a half message has no outcome after the broker's
transaction timeout, the broker sends this producer (or another of its group) a check; the
listener's `check_local_transaction(msg)` answers it, on a thread of this producer.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from opentelemetry.trace import Span

from ferry.client.heartbeats import log_failure
from ferry.client.message import Message, MessageExt, MessageQueue, SendResult
from ferry.client.message_decode import decode_message
from ferry.client.producer import Producer
from ferry.client.tracing import Tracing
from ferry.protocol import record
from ferry.protocol.codes import SendStatus, TransactionResolution
from ferry.protocol.errors import FerryError, InvalidParameterError
from ferry.protocol.messages import (
    AnyReply,
    CheckTransactionStateNotice,
    ClusterInfoReply,
    EndTransactionRequest,
    GetClusterInfoRequest,
)

log = logging.getLogger("ferry.client.transaction")

END_TIMEOUT_S = 3.0
MASTER_ID = 0


class LocalTransactionState(enum.Enum):
    """What the local transaction came to (RocketMQ's COMMIT_MESSAGE, ROLLBACK_MESSAGE, UNKNOW)."""

    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"
    UNKNOWN = "UNKNOWN"

    @property
    def resolution(self) -> TransactionResolution:
        return _RESOLUTIONS[self]


_RESOLUTIONS = {
    LocalTransactionState.COMMIT: TransactionResolution.COMMIT,
    LocalTransactionState.ROLLBACK: TransactionResolution.ROLLBACK,
    LocalTransactionState.UNKNOWN: TransactionResolution.UNKNOWN,
}


class TransactionListener(Protocol):
    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState: ...

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState: ...


@dataclass(frozen=True, slots=True)
class TransactionSendResult(SendResult):
    """A SendResult plus what the local transaction returned (and was sent to the broker)."""

    local_transaction_state: LocalTransactionState = LocalTransactionState.UNKNOWN


class TransactionProducer(Producer):
    """A Producer that also sends in transactions; its group is the one the broker checks.

    Every producer of a group should be able to answer checks for any transaction of the group
    (the broker asks any live one), as in RocketMQ.
    """

    def __init__(
        self,
        group: str,
        namesrv: str,
        listener: TransactionListener,
        *,
        check_threads: int = 1,
        **options: Any,
    ) -> None:
        super().__init__(group, namesrv, **options)
        if check_threads < 1:
            raise InvalidParameterError("check_threads must be at least 1")
        self.listener = listener
        self._check_threads = check_threads
        self._checks: ThreadPoolExecutor | None = None
        self._checks_lock = threading.Lock()

    def start(self) -> None:
        if self._instance is not None:
            return
        self._checks = ThreadPoolExecutor(self._check_threads, thread_name_prefix="ferry-tx-check")
        super().start()
        self._started().on_notice(self._on_notice)
        self.heartbeat()  # so that checks can reach it before it sends anything

    def heartbeat(self) -> None:
        """Tells every master broker of the name servers' clusters, not only those it sent
        to, that it is in the group: any of them may hold half messages of the group (a
        producer started after another one's crash must be asked)."""
        inst = self._started()
        addrs = set(inst.routes.master_addrs().values())
        try:
            info = inst.routes.namesrv_request(GetClusterInfoRequest(), ClusterInfoReply)
        except FerryError as err:
            log.debug("cluster info for heartbeats not fetched: %s", err)
        else:
            addrs.update(cluster_masters(info))
        for addr in addrs:
            self._heartbeat_to(addr)

    def __enter__(self) -> TransactionProducer:
        self.start()
        return self

    def shutdown(self) -> None:
        with self._checks_lock:
            checks, self._checks = self._checks, None
        if checks is not None:
            checks.shutdown(wait=True, cancel_futures=True)
        super().shutdown()

    # ---- sending in a transaction ----

    def send_in_transaction(self, msg: Message, arg: Any = None) -> TransactionSendResult:
        """Sends the half message, runs the local transaction and ends it (see the module).

        A send that fails raises and runs nothing. A listener that raises counts as UNKNOWN
        (the broker checks later); the broker not taking the end is logged, not raised: the
        check settles it.
        """
        out = self._prepare([half_message(msg, self.group)])
        out = out._replace(batchable=False, transactional=True)
        sent = self._send_sync(out, self.send_timeout_s)
        if sent.status is SendStatus.SEND_OK:
            try:
                state = local_state(self.listener.execute_local_transaction(msg, arg))
            except Exception:
                log.exception("local transaction of %s failed; its state is UNKNOWN", sent.msg_id)
                state = LocalTransactionState.UNKNOWN
        else:
            # stored, but not as safely as asked: RocketMQ rolls such a half message back
            state = LocalTransactionState.ROLLBACK
        self._end(sent, state, {"traceparent": out.traceparent, "tracestate": out.tracestate})
        return transaction_result(sent, state)

    def _end(
        self, sent: SendResult, state: LocalTransactionState, trace_carrier: dict[str, str]
    ) -> None:
        inst = self._started()
        call = end_call(self.group, sent, state, trace_carrier, inst.routes, inst.tracing)
        if call is None:
            return
        with call.sending(inst.tracing):
            inst.connection(call.addr).request(
                call.body,
                timeout_s=min(END_TIMEOUT_S, self.send_timeout_s),
                traceparent=call.traceparent,
                tracestate=call.tracestate,
            )

    # ---- checks from the broker ----

    def _on_notice(self, address: str, body: AnyReply) -> None:
        """On an I/O thread: hand the check to a check thread, never block here."""
        if not isinstance(body, CheckTransactionStateNotice) or body.producer_group != self.group:
            return
        with self._checks_lock:
            checks = self._checks
            if checks is None:
                return
            try:
                checks.submit(self._check, address, body)
            except RuntimeError:  # shutting down
                return

    def _check(self, address: str, notice: CheckTransactionStateNotice) -> None:
        inst = self._instance
        if inst is None:
            return
        msg = readable_check(notice, inst.routes, address)
        if msg is None:
            return
        try:
            state = local_state(self.listener.check_local_transaction(msg))
        except Exception:
            log.exception("checking transaction %s failed; answering UNKNOWN", notice.msg_id)
            state = LocalTransactionState.UNKNOWN
        call = check_call(self.group, notice, msg, state, address, inst.tracing)
        future: Future[Any] = inst.connection(address).submit(
            call.body,
            timeout_s=END_TIMEOUT_S,
            traceparent=call.traceparent,
            tracestate=call.tracestate,
        )
        future.add_done_callback(log_failure(f"answer to the check of {notice.msg_id}"))
        inst.tracing.end(call.span, address=address)


def half_message(msg: Message, group: str) -> Message:
    """The half message that stands for `msg` until its transaction ends."""
    if msg.delay_level > 0 or msg.deliver_at_ms is not None:
        raise InvalidParameterError("transaction messages cannot be delayed")
    props = {**msg.properties, record.PROPERTY_TRAN_MSG: "true", record.PROPERTY_PGROUP: group}
    return Message(msg.topic, msg.body, msg.tags, msg.keys, props)


def local_state(state: object) -> LocalTransactionState:
    """What a listener returned, refused when it is not a LocalTransactionState."""
    if not isinstance(state, LocalTransactionState):
        raise TypeError(f"listener returned {state!r}, not a LocalTransactionState")
    return state


def transaction_result(sent: SendResult, state: LocalTransactionState) -> TransactionSendResult:
    return TransactionSendResult(
        sent.status, sent.msg_id, sent.offset_msg_id, sent.queue, sent.queue_offset, state
    )


def end_request(
    group: str, sent: SendResult, state: LocalTransactionState
) -> EndTransactionRequest:
    """The end of the transaction of the half message `sent`."""
    _, phys_offset = record.decode_offset_msg_id(sent.offset_msg_id)
    return EndTransactionRequest(
        producer_group=group,
        commit_log_offset=phys_offset,
        resolution=state.resolution,
        tran_state_table_offset=sent.queue_offset,
        msg_id=sent.msg_id,
        transaction_id=sent.msg_id,
        topic=sent.queue.topic,
    )


def check_answer(
    group: str, notice: CheckTransactionStateNotice, msg: MessageExt, state: LocalTransactionState
) -> EndTransactionRequest:
    """The answer to a broker's check of a half message."""
    return EndTransactionRequest(
        producer_group=group,
        commit_log_offset=notice.commit_log_offset,
        resolution=state.resolution,
        tran_state_table_offset=notice.tran_state_table_offset,
        msg_id=notice.msg_id,
        transaction_id=notice.transaction_id,
        from_transaction_check=True,
        topic=msg.topic,
    )


@dataclass(frozen=True)
class EndCall:
    """An END_TRANSACTION to send: where, what, and the span around it."""

    addr: str
    body: EndTransactionRequest
    span: Span | None
    traceparent: str
    tracestate: str

    @contextmanager
    def sending(self, tracing: Tracing) -> Iterator[None]:
        """Around the request: a failure is logged, not raised (the broker's check settles
        the transaction), and the span ends with it."""
        error: FerryError | None = None
        try:
            yield
        except FerryError as err:
            error = err
        self.finish(tracing, error)

    def finish(self, tracing: Tracing, error: FerryError | None) -> None:
        if error is not None:
            log.warning(
                "end of transaction %s not taken by %s: %s", self.body.msg_id, self.addr, error
            )
        tracing.end(self.span, error, address=self.addr)


def end_call(
    group: str,
    sent: SendResult,
    state: LocalTransactionState,
    carrier: dict[str, str],
    routes: _BrokerAddrs,
    tracing: Tracing,
) -> EndCall | None:
    """The end of the transaction of `sent`; None (logged) when its broker is unknown."""
    addr = routes.addr_of(sent.queue.broker_name)
    if addr is None:
        log.warning("no address for broker %s: the check will settle it", sent.queue)
        return None
    span = tracing.start_transaction("end_transaction", group, sent.msg_id, state.name, carrier)
    traceparent, tracestate = trace_context(tracing, span)
    return EndCall(addr, end_request(group, sent, state), span, traceparent, tracestate)


def check_call(
    group: str,
    notice: CheckTransactionStateNotice,
    msg: MessageExt,
    state: LocalTransactionState,
    address: str,
    tracing: Tracing,
) -> EndCall:
    """The answer to a broker's check, with its span."""
    span = tracing.start_transaction(
        "check_transaction_state", group, notice.msg_id, state.name, msg.properties
    )
    traceparent, tracestate = trace_context(tracing, span)
    return EndCall(address, check_answer(group, notice, msg, state), span, traceparent, tracestate)


def trace_context(tracing: Tracing, span: Span | None) -> tuple[str, str]:
    """(traceparent, tracestate) that make `span` the parent of a request."""
    carrier: dict[str, str] = {}
    tracing.inject(span, carrier)
    return carrier.get("traceparent", ""), carrier.get("tracestate", "")


class _BrokerNames(Protocol):
    def master_addrs(self) -> dict[str, str]: ...


class _BrokerAddrs(Protocol):
    def addr_of(self, broker_name: str, *, read: bool = False) -> str | None: ...


def cluster_masters(info: ClusterInfoReply) -> list[str]:
    """The master of every broker the name servers know."""
    return [
        data.broker_addrs[MASTER_ID]
        for data in info.brokers.values()
        if MASTER_ID in data.broker_addrs
    ]


def readable_check(
    notice: CheckTransactionStateNotice, routes: _BrokerNames, address: str
) -> MessageExt | None:
    """checked_message, or None (logged) when the check's record does not decode."""
    try:
        return checked_message(notice, routes, address)
    except (record.RecordError, StopIteration, ValueError) as exc:
        log.warning("check for %s has an unreadable message: %s", notice.msg_id, exc)
        return None


def checked_message(
    notice: CheckTransactionStateNotice, routes: _BrokerNames, address: str
) -> MessageExt:
    """The half message of a check as the application sent it: real topic and queue."""
    rec = next(record.iter_records(notice.record))
    broker = next((name for name, addr in routes.master_addrs().items() if addr == address), "")
    msg = decode_message(rec, broker)
    real_topic = rec.properties.get(record.PROPERTY_REAL_TOPIC)
    if real_topic:
        msg.topic = real_topic
        real_qid = rec.properties.get(record.PROPERTY_REAL_QID, "")
        queue_id = int(real_qid) if real_qid.isdigit() else rec.queue_id
        msg.queue = MessageQueue(real_topic, broker, queue_id)
    return msg
