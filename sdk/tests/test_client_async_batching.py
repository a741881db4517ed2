"""The accumulator behind send_async's automatic batching (plain state)."""

from __future__ import annotations

from concurrent.futures import Future

from ferry.client.async_sender import BatchConfig, Item, TopicAccumulator
from ferry.client.message import SendResult
from ferry.client.outgoing import Outgoing, join


def item(i: int, size: int = 10) -> Item:
    out = Outgoing("t", [f"ID{i}"], bytes([i % 256]) * size, 1, "", "", None, True)
    return out, Future[SendResult]()


def test_an_idle_topic_sends_each_message_at_once() -> None:
    acc = TopicAccumulator()
    config = BatchConfig(max_batches_in_flight=2)
    acc.add(item(0), config)
    assert [len(b) for b in [acc.next_batch(2) or []]] == [1]
    acc.add(item(1), config)
    assert len(acc.next_batch(2) or []) == 1
    assert acc.in_flight == 2


def test_messages_wait_while_the_window_is_full_and_leave_together() -> None:
    acc = TopicAccumulator()
    config = BatchConfig(max_batches_in_flight=1)
    acc.add(item(0), config)
    assert acc.next_batch(1) is not None
    for i in range(1, 6):
        acc.add(item(i), config)
        assert acc.next_batch(1) is None
    acc.in_flight -= 1  # the first request completed
    batch = acc.next_batch(1)
    assert batch is not None
    assert [o.msg_ids[0] for o, _ in batch] == [f"ID{i}" for i in range(1, 6)]


def test_batches_are_cut_by_count_and_never_grow_past_the_byte_limit() -> None:
    acc = TopicAccumulator()
    config = BatchConfig(max_count=3, max_bytes=25, max_batches_in_flight=1)
    acc.in_flight = 1  # window full: everything accumulates
    for i in range(3):
        acc.add(item(i, size=5), config)  # 15 bytes: cut by count
    for i in range(3, 6):
        acc.add(item(i, size=10), config)  # a third would make 30 > 25: cut before it
    acc.add(item(6, size=40), config)  # bigger than the limit on its own: alone
    acc.add(item(7, size=5), config)
    batches = []
    while True:
        acc.in_flight = 0
        batch = acc.next_batch(1)
        if batch is None:
            break
        batches.append([o.msg_ids[0] for o, _ in batch])
    assert batches == [["ID0", "ID1", "ID2"], ["ID3", "ID4"], ["ID5"], ["ID6"], ["ID7"]]


def test_join_concatenates_records_into_one_frame() -> None:
    parts = [item(i)[0] for i in range(3)]
    out = join("t", parts)
    assert out.payload == b"".join(p.payload for p in parts)
    assert out.n_msgs == 3
    assert out.msg_ids == ["ID0", "ID1", "ID2"]
