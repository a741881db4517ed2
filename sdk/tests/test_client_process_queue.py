"""A push consumer's per-queue state: what may be committed, flow control figures, orderly
batches."""

from __future__ import annotations

from ferry.client.message import MessageExt, MessageQueue
from ferry.client.process_queue import ProcessQueue

QUEUE = MessageQueue("T", "broker-a", 0)


def msgs(*offsets: int, size: int = 10) -> list[MessageExt]:
    return [MessageExt("T", bytes(size), queue=QUEUE, queue_offset=o) for o in offsets]


def test_commit_offset_is_the_lowest_message_not_yet_consumed() -> None:
    pq = ProcessQueue()
    batch = msgs(10, 11, 12, 13)
    pq.add(batch, next_offset=14)
    assert pq.commit_offset() == 10
    # later messages finish first: the queue's offset must not pass the one still running
    assert pq.remove(batch[1:]) == 10
    assert pq.remove(batch[:1]) == 14
    assert pq.count == 0 and pq.size_bytes == 0


def test_filtered_and_skipped_offsets_count_as_consumed_when_nothing_waits() -> None:
    pq = ProcessQueue()
    pq.skip_to(5)
    assert pq.commit_offset() == 5
    pq.add(msgs(7), next_offset=20)  # offsets 5, 6, 8..19 filtered out by tag
    assert pq.commit_offset() == 7
    pq.remove(msgs(7))
    assert pq.commit_offset() == 20


def test_span_and_size_feed_flow_control() -> None:
    pq = ProcessQueue()
    pq.add(msgs(100, 101, size=1000), next_offset=102)
    pq.add(msgs(2100, size=1000), next_offset=2101)
    assert pq.span() == 2000
    assert pq.size_bytes == 3000
    pq.remove(msgs(100))
    assert pq.span() == 2000 - 1


def test_expired_lists_messages_in_the_listener_too_long() -> None:
    pq = ProcessQueue()
    batch = msgs(1, 2, 3)
    pq.add(batch, 4)
    pq.start(batch[:1], now=10.0)
    pq.start(batch[1:2], now=50.0)
    assert [m.queue_offset for m in pq.expired(now=70.0, timeout_s=30.0)] == [1]
    pq.remove(batch[:1])
    assert pq.expired(now=70.0, timeout_s=30.0) == []


def test_orderly_batches_are_taken_in_order_and_put_back_in_front() -> None:
    pq = ProcessQueue()
    pq.add(msgs(0, 1, 2, 3, 4), next_offset=5)
    taken = pq.take(2)
    assert [m.queue_offset for m in taken] == [0, 1]
    assert pq.commit_offset() == 0
    # SUSPEND: the batch goes back in front, except a message sent to the DLQ
    assert pq.rollback_taken(keep=taken[1:]) == 1
    assert [m.queue_offset for m in pq.take(3)] == [1, 2, 3]
    assert pq.commit_taken() == 4
    assert pq.count == 1
