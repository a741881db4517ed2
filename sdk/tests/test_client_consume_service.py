"""The push consumer's consume services without a broker: results, local retries, order."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from ferry.client.consume_concurrently import ConcurrentConsumeService
from ferry.client.consume_orderly import OrderlyConsumeService
from ferry.client.consume_service import ConsumeConfig
from ferry.client.consume_state import PulledBatch, QueueState
from ferry.client.instance import ClientInstance
from ferry.client.message import ConsumeResult, Message, MessageExt, MessageModel, MessageQueue
from ferry.client.message_encode import encode_message, message_properties
from ferry.protocol import record

QUEUE = MessageQueue("T", "broker-a", 0)


def frame(bodies: list[bytes], first_offset: int = 0) -> bytes:
    out = bytearray()
    for i, body in enumerate(bodies):
        msg = Message("T", body)
        raw = bytearray(
            encode_message(
                msg, message_properties(msg, f"{i:032X}"), born_timestamp=1, born_host=bytes(8)
            )
        )
        record.OFFSETS.pack_into(raw, record.OFF_OFFSETS, first_offset + i, 100 * i)
        out += raw
    return bytes(out)


@pytest.fixture
def inst() -> Iterator[ClientInstance]:
    instance = ClientInstance("127.0.0.1:1", role="test")  # never asked: send-back is stubbed
    yield instance
    instance.close()


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)  # wait-ok: polling interval of a deadline-bounded wait
    return True


class SendBackFails(ConcurrentConsumeService):
    def send_back(self, msg: MessageExt, delay_level: int) -> bool:
        return False


class SendBackWorks(OrderlyConsumeService):
    sent: list[tuple[bytes, int]]

    def send_back(self, msg: MessageExt, delay_level: int) -> bool:
        self.sent.append((msg.body, delay_level))
        return True


def feed(
    service: ConcurrentConsumeService | OrderlyConsumeService, bodies: list[bytes]
) -> QueueState:
    state = QueueState.create(QUEUE)
    with service.cond:
        service.skip(state, 0)
        service.add(PulledBatch(state, 0, [frame(bodies)], len(bodies), len(bodies)))
    return state


def test_a_failed_send_back_is_consumed_again_here_and_holds_the_offset(
    inst: ClientInstance,
) -> None:
    attempts: list[tuple[bytes, int]] = []

    def listener(msgs: list[MessageExt]) -> ConsumeResult:
        attempts.extend((m.body, m.reconsume_times) for m in msgs)
        if msgs[0].body == b"bad" and msgs[0].reconsume_times == 0:
            return ConsumeResult.RECONSUME_LATER
        return ConsumeResult.SUCCESS

    config = ConsumeConfig("g", MessageModel.CLUSTERING, 16, thread_nums=2, retry_later_s=0.05)
    service = SendBackFails(inst, config, listener, threading.Condition(threading.RLock()))
    try:
        state = feed(service, [b"bad", b"good"])
        assert wait_until(lambda: (b"good", 0) in attempts)
        # the failed message is still pending: the queue's offset stays on it
        assert state.consume_offset == 0
        assert wait_until(lambda: (b"bad", 1) in attempts)
        assert wait_until(lambda: state.consume_offset == 2)
    finally:
        service.shutdown(1.0)


def test_orderly_suspend_offers_the_same_messages_again_in_order_then_the_dlq(
    inst: ClientInstance,
) -> None:
    attempts: list[tuple[bytes, int]] = []

    def listener(msgs: list[MessageExt]) -> ConsumeResult:
        attempts.append((msgs[0].body, msgs[0].reconsume_times))
        return ConsumeResult.SUSPEND if msgs[0].body == b"b" else ConsumeResult.SUCCESS

    config = ConsumeConfig("g", MessageModel.CLUSTERING, 1, suspend_s=0.02)
    service = SendBackWorks(inst, config, listener, threading.Condition(threading.RLock()))
    service.sent = []
    service.locked([QUEUE])
    try:
        state = feed(service, [b"a", b"b", b"c"])
        assert wait_until(lambda: state.consume_offset == 3)
    finally:
        service.shutdown(1.0)
    assert attempts == [(b"a", 0), (b"b", 0), (b"b", 1), (b"c", 0)]
    assert service.sent == [(b"b", -1)]


def test_an_orderly_queue_without_its_lock_is_not_consumed(inst: ClientInstance) -> None:
    seen: list[bytes] = []

    def listener(msgs: list[MessageExt]) -> ConsumeResult:
        seen.extend(m.body for m in msgs)
        return ConsumeResult.SUCCESS

    config = ConsumeConfig("g", MessageModel.CLUSTERING, 16)
    service = OrderlyConsumeService(inst, config, listener, threading.Condition(threading.RLock()))
    try:
        state = feed(service, [b"a"])
        pq = service.process(state)
        assert wait_until(lambda: not pq.running)  # its task ran, and stopped: no lock
        assert pq.count == 1 and not seen
        service.locked([QUEUE])
        service.schedule(state)
        assert wait_until(lambda: seen == [b"a"])
    finally:
        service.shutdown(1.0)


def test_a_broadcasting_orderly_queue_needs_no_lock(inst: ClientInstance) -> None:
    seen: list[bytes] = []

    def listener(msgs: list[MessageExt]) -> ConsumeResult:
        seen.extend(m.body for m in msgs)
        return ConsumeResult.SUCCESS

    config = ConsumeConfig("g", MessageModel.BROADCASTING, 16)
    service = OrderlyConsumeService(inst, config, listener, threading.Condition(threading.RLock()))
    try:
        feed(service, [b"a", b"b"])
        assert wait_until(lambda: seen == [b"a", b"b"])
    finally:
        service.shutdown(1.0)
