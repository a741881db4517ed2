"""ReviveTable: checkpoints in flight, receipt handle checks, what is due, where to restart."""

from __future__ import annotations

import pytest

from ferry.protocol.errors import InvalidReceiptHandleError
from ferry.protocol.messages import PopCheckpoint, ReviveAck, ReviveAcks, ReviveRecord
from ferry.scheduler.revive_table import ReviveTable, receipt_handle


def ck(
    revive_at: int = 1000, n: int = 3, topic: str = "T", queue_topic: str = "T"
) -> PopCheckpoint:
    return PopCheckpoint(
        group="g",
        topic=topic,
        queue_topic=queue_topic,
        queue_id=0,
        pop_ms=0,
        revive_at_ms=revive_at,
        max_reconsume_times=16,
        queue_offsets=list(range(n)),
        phys_offsets=[100 * i for i in range(n)],
    )


def test_acked_messages_are_not_due_and_a_settled_checkpoint_leaves() -> None:
    table = ReviveTable()
    table.apply(5, ck(n=2))
    table.apply(6, ReviveAck(ck=5, index=0))
    assert table.due(999) == []
    assert table.due(1000) == [(5, 1)]
    assert table.oldest() == 5
    table.apply(7, ReviveAck(ck=5, index=1, revived=True))
    assert table.in_flight == {} and table.oldest() == 8  # the log's end: nothing to re-read
    f = table.figures["g"]
    assert (f.popped, f.acked, f.revived) == (2, 1, 1)


def test_a_handle_is_checked_against_group_topic_index_and_time() -> None:
    table = ReviveTable()
    table.apply(0, ck())
    good = receipt_handle(0, 1, 1000)
    assert table.check(good, "g", "T", 10)[2] == 1
    bad = [
        ("garbage", "g", "T", 10),
        (receipt_handle(9, 0, 1000), "g", "T", 10),  # no such checkpoint
        (receipt_handle(0, 7, 1000), "g", "T", 10),  # no such message
        (good, "other", "T", 10),  # another group's
        (good, "g", "U", 10),  # another topic's
        (receipt_handle(0, 1, 999), "g", "T", 10),  # an older handle of it
        (good, "g", "T", 1000),  # past its invisible time
    ]
    for handle, group, topic, now in bad:
        with pytest.raises(InvalidReceiptHandleError):
            table.check(handle, group, topic, now)
    table.apply(1, ReviveAck(ck=0, index=1))
    with pytest.raises(InvalidReceiptHandleError, match="acked"):
        table.check(good, "g", "T", 10)


def test_a_retry_queue_checkpoint_acks_under_the_original_topic() -> None:
    table = ReviveTable()
    table.apply(0, ck(topic="A", queue_topic="%RETRY%g"))
    # a retry copy shows its original topic, which may be another subscribed topic
    assert table.check(receipt_handle(0, 0, 1000), "g", "B", 10)[0] == 0


def test_replaying_the_same_records_twice_changes_nothing() -> None:
    table = ReviveTable()
    records: list[tuple[int, ReviveRecord]] = [(0, ck(n=1)), (1, ReviveAck(ck=0, index=0))]
    for offset, rec in records + records:
        table.apply(offset, rec)
    assert table.in_flight == {} and table.figures["g"].popped == 1


def test_merged_acks_settle_each_message() -> None:
    table = ReviveTable()
    table.apply(0, ck(n=3))
    table.apply(1, ReviveAcks(acked=[(0, 0), (0, 2)], revived=[(0, 1)]))
    assert table.in_flight == {}
    f = table.figures["g"]
    assert (f.acked, f.revived) == (2, 1)
