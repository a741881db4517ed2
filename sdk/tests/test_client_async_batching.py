"""The accumulator behind send_async's automatic batching (plain state) and its futures."""

from __future__ import annotations

import concurrent.futures
import threading

import pytest

from ferry.client.batching import Batch, BatchConfig, TopicAccumulator
from ferry.client.message import Message, MessageQueue, SendResult, SendStatus
from ferry.client.message_encode import (
    encode_message,
    encode_plain_batch,
    message_properties,
    plain_message,
)
from ferry.client.outgoing import Outgoing, join
from ferry.client.send_future import Outcome, SendFuture, settle
from ferry.protocol import record
from ferry.protocol.errors import FerryError


def message(i: int, size: int = 10) -> Outgoing:
    return Outgoing("t", [f"ID{i}"], bytes([i % 256]) * size, 1, "", "", None, True)


def ids(batch: Batch) -> list[str]:
    return [o.msg_ids[0] for o in batch.items if isinstance(o, Outgoing)]


def add(acc: TopicAccumulator, out: Outgoing, now: float) -> SendFuture:
    return acc.add(out, len(out.payload), now)


def test_an_idle_topic_sends_each_message_at_once() -> None:
    acc = TopicAccumulator(BatchConfig(max_batches_in_flight=2))
    add(acc, message(0), 0.0)
    assert [ids(b) for b in acc.ready(0.0, 2)] == [["ID0"]]
    add(acc, message(1), 0.0)
    assert acc.ready(0.0, 2) == []  # one in flight: a partial batch waits for it
    acc.in_flight -= 1  # the first request completed
    assert [ids(b) for b in acc.ready(0.0, 2)] == [["ID1"]]


def test_messages_wait_while_requests_are_in_flight_and_leave_together() -> None:
    acc = TopicAccumulator(BatchConfig(max_batches_in_flight=4, linger_s=1.0))
    add(acc, message(0), 0.0)
    assert len(acc.ready(0.0, 4)) == 1
    futures = []
    for i in range(1, 6):
        futures.append(add(acc, message(i), 0.1))
        assert acc.ready(0.1, 4) == []
    acc.in_flight -= 1
    (batch,) = acc.ready(0.2, 4)
    assert ids(batch) == [f"ID{i}" for i in range(1, 6)]
    assert {id(f._outcome) for f in futures} == {id(batch.outcome)}  # one lock a batch


def test_a_partial_batch_leaves_when_its_linger_is_over() -> None:
    acc = TopicAccumulator(BatchConfig(max_batches_in_flight=4, linger_s=0.005))
    add(acc, message(0), 0.0)
    acc.ready(0.0, 4)
    add(acc, message(1), 1.0)
    assert acc.ready(1.004, 4) == []
    assert [ids(b) for b in acc.ready(1.006, 4)] == [["ID1"]]
    assert acc.in_flight == 2


def test_full_batches_leave_while_the_window_allows() -> None:
    acc = TopicAccumulator(BatchConfig(max_count=2, max_batches_in_flight=2, linger_s=1.0))
    acc.in_flight = 1
    for i in range(6):
        add(acc, message(i), 0.0)
    assert [ids(b) for b in acc.ready(0.0, 2)] == [["ID0", "ID1"]]  # window of 2
    acc.in_flight = 0
    assert [ids(b) for b in acc.ready(0.0, 2)] == [["ID2", "ID3"], ["ID4", "ID5"]]


def test_batches_are_cut_by_count_and_never_grow_past_the_byte_limit() -> None:
    acc = TopicAccumulator(BatchConfig(max_count=3, max_bytes=25, max_batches_in_flight=1))
    acc.in_flight = 1  # window full: everything accumulates
    for i in range(3):
        add(acc, message(i, size=5), 0.0)  # 15 bytes: cut by count
    for i in range(3, 6):
        add(acc, message(i, size=10), 0.0)  # a third would make 30 > 25: cut before it
    add(acc, message(6, size=40), 0.0)  # bigger than the limit on its own: alone
    add(acc, message(7, size=5), 0.0)
    batches: list[list[str]] = []
    while True:
        acc.in_flight = 0
        ready = acc.ready(0.0, 1)
        if not ready:
            break
        batches.extend(ids(b) for b in ready)
    assert batches == [["ID0", "ID1", "ID2"], ["ID3", "ID4"], ["ID5"], ["ID6"], ["ID7"]]


def test_flush_sends_the_partial_batch_whatever_is_in_flight() -> None:
    acc = TopicAccumulator(BatchConfig(linger_s=10.0))
    acc.in_flight = 1
    add(acc, message(0), 0.0)
    assert [ids(b) for b in acc.ready(0.0, 1 << 30, flush=True)] == [["ID0"]]


def test_join_concatenates_records_into_one_frame() -> None:
    parts = [message(i) for i in range(3)]
    out = join("t", parts)
    assert out.payload == b"".join(p.payload for p in parts)
    assert out.n_msgs == 3
    assert out.msg_ids == ["ID0", "ID1", "ID2"]


def result(i: int) -> SendResult:
    return SendResult(SendStatus.SEND_OK, f"ID{i}", f"OFF{i}", MessageQueue("t", "b", 0), i)


def test_futures_of_a_batch_settle_together_and_behave_as_futures() -> None:
    outcome = Outcome()
    futures = [SendFuture(outcome, i) for i in range(50)]
    assert not futures[0].cancel()  # a send may have left: not cancellable
    assert futures[0].running()
    seen: list[str] = []
    futures[3].add_done_callback(lambda f: seen.append(f.result().msg_id))
    got: list[SendResult] = []
    waiters = [
        threading.Thread(target=lambda f=f: got.append(f.result(timeout=10))) for f in futures[:10]
    ]
    for t in waiters:
        t.start()
    with pytest.raises(AttributeError, match="settled by its batch"):
        futures[1].set_result(result(1))  # a future finishes with its batch, never alone
    made: list[int] = []

    def results() -> list[SendResult]:
        made.append(1)
        return [result(i) for i in range(50)]

    settle(outcome, results, None)
    for t in waiters:
        t.join(10)
    assert sorted(r.queue_offset for r in got) == list(range(10))
    assert seen == ["ID3"]
    done = list(concurrent.futures.as_completed(futures, timeout=1))
    assert len(done) == 50
    assert [f.result().queue_offset for f in futures] == list(range(50))
    assert made == [1]  # made once, when first asked for
    late: list[bool] = []
    futures[0].add_done_callback(lambda f: late.append(f.done()))  # runs at once
    assert late == [True]


def test_a_settled_future_answers_without_its_batch_lock() -> None:
    # reading a settled result takes no lock: a thread holding the batch's condition (a
    # settle in progress elsewhere, a waiter being told) does not hold up result()
    outcome = Outcome()
    futures = [SendFuture(outcome, i) for i in range(4)]
    settle(outcome, lambda: [result(i) for i in range(4)], None)
    got: list[int] = []
    with outcome.cond:
        reader = threading.Thread(
            target=lambda: got.extend(f.result().queue_offset for f in futures)
        )
        reader.start()
        reader.join(5)
    assert got == [0, 1, 2, 3]


def test_a_failed_batch_fails_every_future() -> None:
    shared = Outcome()
    futures = [SendFuture(shared, i) for i in range(3)]
    waiting = concurrent.futures.wait(futures, timeout=0)
    assert len(waiting.not_done) == 3
    settle(shared, None, FerryError("broker gone"))
    for future in futures:
        assert isinstance(future.exception(), FerryError)
        with pytest.raises(FerryError, match="broker gone"):
            future.result()


def test_plain_messages_wait_unencoded_and_leave_as_the_records_send_would_make() -> None:
    msgs = [
        Message("TopicA", b"x" * 100),
        Message("TopicA", b"y" * 5000, tags="TagA", keys=["k1", "k2"]),  # compressed
        Message("TopicA", "h\u00e9llo", tags="\u00e9", keys="\u00fc"),
    ]
    tail = len(record.topic_tail("TopicA"))
    plains = [plain_message(m, tail) for m in msgs]
    assert all(p is not None for p in plains)
    ids_ = [f"{i:032X}" for i in range(3)]
    batch = encode_plain_batch(
        "TopicA",
        [p for p in plains if p is not None],
        ids_,
        born_timestamp=5,
        born_host=b"12345678",
        compress_over=4096,
    )
    one_by_one = b"".join(
        encode_message(
            m, message_properties(m, i), born_timestamp=5, born_host=b"12345678", compress_over=4096
        )
        for m, i in zip(msgs, ids_, strict=True)
    )
    assert batch == one_by_one
    for m, p, i in zip(msgs, plains, ids_, strict=True):  # the size is exact before compression
        encoded = encode_message(m, message_properties(m, i), born_timestamp=5, born_host=bytes(8))
        assert p is not None and p.size == len(encoded)
    msg = Message("TopicA", b"before")
    snapshot = plain_message(msg, tail)
    msg.body = b"after"  # a message changed after send_async: what was sent does not change
    assert snapshot is not None and snapshot.body == b"before"
    assert plain_message(Message("TopicA", b"x", properties={"a": "b"}), tail) is None
    assert plain_message(Message("TopicA", b"x", delay_level=2), tail) is None
