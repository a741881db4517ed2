"""The pull consumer's plain state: tags, buffered batches, offsets to commit."""

from __future__ import annotations

from ferry.client.consume_state import (
    PullBuffer,
    PulledBatch,
    QueueState,
    commit_entries,
    decode_batch,
    offset_entries,
    parse_tags,
)
from ferry.client.message import Message, MessageQueue
from ferry.client.message_encode import encode_message, message_properties
from ferry.protocol import record
from ferry.protocol.messages import OffsetEntry

QA = MessageQueue("t", "broker-a", 0)
QB = MessageQueue("t", "broker-b", 1)


def stored_records(tags: list[str | None], first_offset: int = 0) -> bytes:
    out = bytearray()
    for i, tag in enumerate(tags):
        msg = Message("t", f"body-{i}".encode(), tags=tag)
        raw = bytearray(
            encode_message(
                msg, message_properties(msg, f"{i:032X}"), born_timestamp=1, born_host=bytes(8)
            )
        )
        record.OFFSETS.pack_into(raw, record.OFF_OFFSETS, first_offset + i, 1000 + i)
        out += raw
    return bytes(out)


def batch(
    state: QueueState, count: int, next_offset: int, frames: list[bytes] | None = None
) -> PulledBatch:
    return PulledBatch(state, state.generation, frames or [], count, next_offset)


def test_tag_expressions() -> None:
    assert parse_tags("*") is None
    assert parse_tags("") is None
    assert parse_tags("TagA") == frozenset({"TagA"})
    assert parse_tags(" TagA || TagB ||") == frozenset({"TagA", "TagB"})


def test_take_returns_whole_batches_up_to_the_limit_but_at_least_one() -> None:
    state = QueueState.create(QA)
    buf = PullBuffer()
    buf.add(batch(state, 30, 30))
    buf.add(batch(state, 30, 60))
    buf.add(batch(state, 30, 90))
    assert state.buffered == 90 and state.batches == 3
    assert [b.next_begin_offset for b in buf.take(50)] == [30]
    assert [b.next_begin_offset for b in buf.take(10)] == [60]
    assert state.buffered == 30 and state.batches == 1
    assert [b.next_begin_offset for b in buf.take(1000)] == [90]
    assert not buf.ready()


def test_seek_makes_buffered_batches_stale() -> None:
    state = QueueState.create(QA)
    other = QueueState.create(QB)
    buf = PullBuffer()
    buf.add(batch(state, 10, 10))
    buf.add(batch(other, 5, 5))
    state.restart_at(100)
    assert state.consume_offset == 100 and state.pull_offset == 100 and state.buffered == 0
    taken = buf.take(1000)
    assert [b.state for b in taken] == [other]


def test_dropped_queue_batches_are_skipped() -> None:
    state = QueueState.create(QA)
    buf = PullBuffer()
    buf.add(batch(state, 10, 10))
    state.dropped = True
    assert not buf.ready()
    assert buf.take(100) == []


def test_skip_moves_the_consume_offset_only_when_nothing_is_buffered() -> None:
    state = QueueState.create(QA)
    state.restart_at(0)
    buf = PullBuffer()
    buf.add(batch(state, 10, 10))
    state.pull_offset = 10
    state.skip_to(25)
    assert (state.pull_offset, state.consume_offset) == (25, 0)
    buf.take(100)
    state.skip_to(30)
    assert (state.pull_offset, state.consume_offset) == (30, 30)


def test_decode_batch_keeps_exact_tag_matches_only() -> None:
    state = QueueState.create(QA, "TagA || TagC")
    frame = stored_records(["TagA", "TagB", None, "TagC"], first_offset=7)
    msgs = decode_batch(batch(state, 4, 11, [frame]))
    assert [(m.tags, m.queue_offset, m.body) for m in msgs] == [
        ("TagA", 7, b"body-0"),
        ("TagC", 10, b"body-3"),
    ]
    assert all(m.queue == QA for m in msgs)


def test_decode_batch_reads_every_payload_frame() -> None:
    state = QueueState.create(QA)
    frames = [stored_records(["x", "y"]), stored_records(["z"], first_offset=2)]
    msgs = decode_batch(batch(state, 3, 3, frames))
    assert [m.queue_offset for m in msgs] == [0, 1, 2]


def test_commit_entries_group_moved_offsets_by_broker() -> None:
    a0 = QueueState.create(QA)
    a1 = QueueState.create(MessageQueue("u", "broker-a", 3))
    b1 = QueueState.create(QB)
    unresolved = QueueState.create(MessageQueue("t", "broker-c", 0))
    a0.consume_offset, a0.committed_offset = 10, 5
    a1.consume_offset, a1.committed_offset = 7, -1
    b1.consume_offset, b1.committed_offset = 3, 3
    entries = commit_entries([a0, a1, b1, unresolved])
    assert list(entries) == ["broker-a"]
    assert offset_entries(entries["broker-a"]) == [OffsetEntry("t", 0, 10), OffsetEntry("u", 3, 7)]


def test_batches_of_a_paused_queue_wait_in_place_while_others_are_taken() -> None:
    paused, running = QueueState.create(QA), QueueState.create(QB)
    buf = PullBuffer()
    buf.add(batch(paused, 5, 5))
    buf.add(batch(running, 5, 5))
    buf.add(batch(paused, 5, 10))
    paused.paused = True
    assert [b.state for b in buf.take(100)] == [running]
    assert not buf.ready()
    assert paused.buffered == 10
    paused.paused = False
    assert buf.ready()
    assert [b.next_begin_offset for b in buf.take(100)] == [5, 10]  # still in order
