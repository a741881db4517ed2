"""The checker's pure parts: which half messages are due, what the transaction queues say, the
search for committed copies after a commit mark, saved progress."""

from __future__ import annotations

from pathlib import Path

from ferry.protocol import record
from ferry.protocol.names import (
    TRAN_END_COMMITTING,
    TRAN_END_PROPERTY,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
)
from ferry.scheduler.checkback import progress
from ferry.scheduler.checkback.half_table import CheckPolicy, HalfMessage, HalfTable, Mark
from ferry.scheduler.checkback.log_scan import Ended, Marked, event_of, find_copies

POLICY = CheckPolicy(timeout_ms=6000, check_max=2)


def half(offset: int, store_ms: int = 1000, group: str = "pg") -> HalfMessage:
    return HalfMessage(offset, 100, 0, store_ms, group, f"id-{offset}")


def test_a_half_message_is_due_only_once_older_than_the_timeout() -> None:
    table = HalfTable()
    table.add(half(10, store_ms=1000))
    assert table.due(6999, POLICY) == ([], [])
    checks, discards = table.due(7000, POLICY)
    assert [h.phys_offset for h in checks] == [10] and discards == []


def test_a_check_restarts_the_wait_and_after_check_max_the_half_is_discarded() -> None:
    table = HalfTable()
    table.add(half(10, store_ms=0))
    table.checked(10, 6000)
    assert table.due(11_999, POLICY) == ([], [])
    assert [h.phys_offset for h in table.due(12_000, POLICY)[0]] == [10]
    table.checked(10, 12_000)
    checks, discards = table.due(18_000, POLICY)
    assert checks == [] and [h.checks for h in discards] == [2]


def test_busy_half_messages_are_left_alone_and_ended_ones_are_gone() -> None:
    table = HalfTable()
    for offset in (30, 10, 20):
        table.add(half(offset, store_ms=0))
    assert table.end(20) and not table.end(20)
    checks, _ = table.due(10_000, POLICY, busy={10})
    assert [h.phys_offset for h in checks] == [30]
    assert table.ended == 1


def test_reading_a_half_message_again_keeps_its_check_count() -> None:
    table = HalfTable()
    table.add(half(10))
    table.checked(10, 5)
    table.add(half(10))  # the queue is read again after a restart
    entry = table.get(10)
    assert entry is not None and entry.checks == 1


def test_an_end_read_before_its_half_message_ends_it_when_it_comes() -> None:
    table = HalfTable()
    table.add(half(10))  # seen_end 110
    assert not table.end(500)  # the op queue is ahead of the half queue
    assert table.has_ended(500) and 500 not in table
    assert not table.add(half(500))
    assert 500 not in table and table.ended == 1
    # an end of what is below seen_end but was never a pending half message is dropped
    assert not table.end(50)
    table.end(900)
    table.add(half(1000))
    table.forget_passed()
    assert table.dump()["early"] == []
    assert table.has_ended(10) is False and table.has_ended(50)


def test_a_marked_half_message_is_not_checked_until_its_mark_is_resolved() -> None:
    table = HalfTable()
    table.add(half(10, store_ms=0))
    table.mark(10, Mark(400, 50))
    table.mark(9999, Mark(500, 60))  # its half message not read yet: kept
    assert table.due(60_000, POLICY) == ([], [])
    table.unmark(10)  # no copy after the mark
    assert [h.phys_offset for h in table.due(60_000, POLICY)[0]] == [10]
    table.mark(10, Mark(600, 70))
    assert table.end(10) and 10 not in table.marks
    table.add(half(20_000))
    table.forget_passed()  # 9999 passed without being read: its mark goes
    assert table.marks == {}


def _stored(topic: str, body: bytes, props: dict[str, str], **fields: int) -> bytearray:
    """A record as the store leaves it: physical offset and store time filled in."""
    raw = bytearray(
        record.encode_record(
            topic.encode(),
            body,
            record.encode_properties(props),
            sysflag=fields.get("sysflag", 0),
            prepared_tx_offset=fields.get("prepared", 0),
        )
    )
    record.OFFSETS.pack_into(raw, record.OFF_OFFSETS, fields.get("queue_offset", 0), fields["phys"])
    record.STORE_STAMP.pack_into(raw, record.OFF_STORE_STAMP, fields.get("store_ms", 0), bytes(8))
    return raw


def test_the_queues_records_say_half_message_end_and_mark() -> None:
    props = {
        record.PROPERTY_PGROUP: "pg-x",
        record.PROPERTY_UNIQ_KEY: "ID1",
        record.PROPERTY_REAL_TOPIC: "Orders",
        "traceparent": "00-abc-def-01",
    }
    raw = b"".join(
        [
            _stored(TRANS_HALF_TOPIC, b"h", props, phys=100, queue_offset=7, store_ms=55),
            _stored(TRANS_OP_HALF_TOPIC, b"100", {TRAN_END_PROPERTY: "COMMIT"}, phys=300),
            _stored(
                TRANS_OP_HALF_TOPIC,
                b"100",
                {TRAN_END_PROPERTY: TRAN_END_COMMITTING},
                phys=350,
                store_ms=77,
            ),
            _stored(TRANS_CHECK_MAX_TIME_TOPIC, b"h", props, phys=500, prepared=200),
            _stored(TRANS_OP_HALF_TOPIC, b"not a number", {}, phys=600),
            _stored("Orders", b"plain", {}, phys=700),
        ]
    )
    events = [event_of(r) for r in record.iter_records(raw)]
    assert events[1:] == [Ended(100), Marked(100, Mark(350, 77)), Ended(200), None, None]
    first = events[0]
    assert isinstance(first, HalfMessage)
    assert (first.phys_offset, first.queue_offset, first.store_ms, first.group) == (
        100,
        7,
        55,
        "pg-x",
    )
    assert (first.msg_id, first.traceparent) == ("ID1", "00-abc-def-01")


def test_the_copy_search_finds_copies_and_stops_past_its_window() -> None:
    commit = record.SYSFLAG_TX_COMMIT
    log = b"".join(
        [
            _stored("Orders", b"a", {}, phys=0, store_ms=1000),
            _stored("Orders", b"c", {}, phys=100, store_ms=1001, sysflag=commit, prepared=10),
            _stored("Orders", b"c", {}, phys=200, store_ms=1002, sysflag=commit, prepared=99),
            _stored("Orders", b"late", {}, phys=300, store_ms=5000),
            _stored("Orders", b"c", {}, phys=400, store_ms=5001, sysflag=commit, prepared=20),
        ]
    )
    assert find_copies(log, {10, 20}, until_ms=2000) == ({10}, True)
    assert find_copies(log, {10, 20}, until_ms=9000) == ({10, 20}, False)


def test_progress_survives_a_save_and_a_damaged_file_starts_over(tmp_path: Path) -> None:
    table = HalfTable()
    table.add(half(10))
    table.checked(10, 99)
    table.end(5000)
    table.mark(10, Mark(300, 44))
    offsets = {TRANS_HALF_TOPIC: 3, TRANS_OP_HALF_TOPIC: 7}
    progress.save(tmp_path, progress.Progress(offsets, table.dump()))
    loaded = progress.load(tmp_path)
    again = HalfTable()
    again.load(loaded.table)
    assert loaded.offsets == offsets
    assert again.get(10) == table.get(10)
    assert again.dump() == table.dump()
    (tmp_path / progress.FILE_NAME).write_text("{torn", encoding="utf-8")
    assert progress.load(tmp_path).offsets == {}
