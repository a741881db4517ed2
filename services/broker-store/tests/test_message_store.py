"""MessageStore on real files with small segments: puts, gets, the log, reopen, recovery."""

from __future__ import annotations

import os
import select
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ferry.protocol import record
from ferry.protocol.codes import PullStatus
from ferry.protocol.errors import InvalidParameterError, MessageIllegalError
from ferry.runtime.dir_lock import DirLockedError
from ferry.runtime.offset_names import file_name
from ferry.store.checkpoint import Checkpoint
from ferry.store.commit_log import CQ_ENTRY
from ferry.store.flush import Flusher
from ferry.store.mapped_file import MappedFile, PendingDir
from ferry.store.store import MessageStore

Crash = Callable[[MessageStore], None]
MakeBatch = Callable[..., bytes]
MakeConfig = Callable[..., Any]


def all_records(store: MessageStore, topic: str, queue_id: int) -> list[record.Record]:
    got = store.get(topic, queue_id, 0, max_msgs=100_000, max_bytes=1 << 30)
    assert got.status == PullStatus.FOUND
    return list(record.iter_records(bytes(got.payload)))


def segment_files(store: MessageStore) -> list[Path]:
    return sorted((store.root / "commitlog").iterdir())


def test_put_then_get_returns_records_with_store_fields_filled_in(
    store: MessageStore, batch: MakeBatch
) -> None:
    bodies = [f"body-{i}".encode() * (i + 1) for i in range(5)]
    before_ms = int(time.time() * 1000)
    first = store.put("Orders", 3, 3, batch("Orders", bodies[:3], tags="TagA"))
    second = store.put("Orders", 3, 2, batch("Orders", bodies[3:], tags="TagB"))

    assert first.queue_offset == 0
    assert second.queue_offset == 3
    got = store.get("Orders", 3, 0)
    assert got.status == PullStatus.FOUND
    assert (got.count, got.next_begin_offset, got.min_offset, got.max_offset) == (5, 5, 0, 5)
    payload = bytes(got.payload)
    recs = list(record.iter_records(payload))
    assert [r.body for r in recs] == bodies
    assert [r.queue_offset for r in recs] == [0, 1, 2, 3, 4]
    assert [r.phys_offset for r in recs] == first.phys_offsets + second.phys_offsets
    assert {r.queue_id for r in recs} == {3}
    assert {r.topic for r in recs} == {"Orders"}
    assert [r.properties["TAGS"] for r in recs] == ["TagA"] * 3 + ["TagB"] * 2
    assert recs[0].properties["UNIQ_KEY"] == "KEY000000"
    assert {r.store_host for r in recs} == {"127.0.0.1:10911"}
    assert {r.born_host for r in recs} == {"10.0.0.7:5555"}
    assert all(r.flag == 7 for r in recs)
    assert all(before_ms <= r.store_timestamp <= before_ms + 60_000 for r in recs)
    pos = 0
    for r in recs:
        assert record.verify_crc(payload, pos, r.total_size)
        pos += r.total_size


def test_consume_queue_entries_hold_offset_size_and_tags_code(
    store: MessageStore, batch: MakeBatch
) -> None:
    result = store.put(
        "Orders", 0, 3, batch("Orders", [b"a", b"bb", b"ccc"], tags=["X", None, "Y"])
    )
    cq = store.queues.get("Orders", 0)
    assert cq is not None
    entries = list(cq.entries(0, 10))
    sizes = [r.total_size for r in all_records(store, "Orders", 0)]
    assert entries == [
        (result.phys_offsets[0], sizes[0], record.tags_code(b"X")),
        (result.phys_offsets[1], sizes[1], 0),
        (result.phys_offsets[2], sizes[2], record.tags_code(b"Y")),
    ]
    raw = (cq.directory / file_name(0)).read_bytes()
    assert CQ_ENTRY.unpack_from(raw, 20) == entries[1]


def test_batch_tags_codes_agree_with_the_record_codec(
    store: MessageStore, batch: MakeBatch
) -> None:
    props_cases = [
        {"TAGS": "TagA"},
        {"UNIQ_KEY": "u", "TAGS": "Tág-ü"},
        {"XTAGS": "no", "KEYS": "TAGS\x01"[:4]},
        {"KEYS": "k1 k2", "TAGS": ""},
        {},
    ]
    raw = b"".join(
        record.encode_record(b"T", b"body", record.encode_properties(p)) for p in props_cases
    )
    store.put("T", 0, len(props_cases), raw)
    cq = store.queues.get("T", 0)
    assert cq is not None
    codes = [tags for _, _, tags in cq.entries(0, 10)]
    assert codes == [record.tags_code_of(record.encode_properties(p)) for p in props_cases]


def test_segments_roll_with_a_blank_tail_and_a_batch_may_span_two_segments(
    store: MessageStore, batch: MakeBatch
) -> None:
    body = b"x" * 1000
    first = store.put("Roll", 0, 40, batch("Roll", [body] * 40))
    second = store.put("Roll", 0, 40, batch("Roll", [body] * 40))

    files = segment_files(store)
    assert [f.name for f in files] == [file_name(0), file_name(65536)]
    assert all(f.stat().st_size == 65536 for f in files)
    in_first = [p for p in second.phys_offsets if p < 65536]
    in_second = [p for p in second.phys_offsets if p >= 65536]
    assert in_first and in_second
    assert in_second[0] == 65536
    size = all_records(store, "Roll", 0)[0].total_size
    tail = in_first[-1] + size
    raw = files[0].read_bytes()
    assert record.PREFIX.unpack_from(raw, tail) == (65536 - tail, record.BLANK_MAGIC)
    recs = all_records(store, "Roll", 0)
    assert [r.queue_offset for r in recs] == list(range(80))
    assert [r.phys_offset for r in recs] == first.phys_offsets + second.phys_offsets
    assert second.from_offset == first.next_offset
    assert second.next_offset == in_second[-1] + size
    # what the feed publishes: the bytes as written when one write held them, else nothing
    # (the feed then reads the log, blank tail included)
    assert first.written is not None
    assert bytes(first.written) == bytes(store.log_slice(first.from_offset, first.next_offset))
    assert second.written is None


def test_record_bigger_than_a_segment_is_refused(store: MessageStore, batch: MakeBatch) -> None:
    with pytest.raises(MessageIllegalError, match="segment"):
        store.put("Big", 0, 1, batch("Big", [b"z" * 70_000]))
    assert store.status().max_offset == 0
    assert store.queues.get("Big", 0) is None


def test_tag_filter_keeps_matching_records_and_moves_past_the_rest(
    store: MessageStore, batch: MakeBatch
) -> None:
    tags = ["A", "B", "A", "C", "B", "A"]
    store.put("Tags", 1, 6, batch("Tags", [f"m{i}".encode() for i in range(6)], tags=tags))
    code_a = record.tags_code(b"A")

    got = store.get("Tags", 1, 0, tag_codes=[code_a])
    assert got.status == PullStatus.FOUND
    assert [r.body for r in record.iter_records(bytes(got.payload))] == [b"m0", b"m2", b"m5"]
    assert got.count == 3
    assert got.next_begin_offset == 6

    everything = store.get("Tags", 1, 0, tag_codes=[])
    assert everything.count == 6

    none = store.get("Tags", 1, 0, tag_codes=[record.tags_code(b"Z")])
    assert none.status == PullStatus.NO_MATCHED_MSG
    assert none.next_begin_offset == 6
    assert none.count == 0


def test_get_outside_the_queue_is_offset_illegal_with_the_nearest_valid_offset(
    store: MessageStore, batch: MakeBatch
) -> None:
    store.put("Q", 0, 3, batch("Q", [b"1", b"2", b"3"]))
    below = store.get("Q", 0, -5)
    above = store.get("Q", 0, 9)
    assert (below.status, below.next_begin_offset) == (PullStatus.OFFSET_ILLEGAL, 0)
    assert (above.status, above.next_begin_offset) == (PullStatus.OFFSET_ILLEGAL, 3)
    assert (above.min_offset, above.max_offset) == (0, 3)


def test_get_at_the_end_or_of_an_unknown_queue_is_no_new_msg(
    store: MessageStore, batch: MakeBatch
) -> None:
    store.put("Q", 0, 2, batch("Q", [b"1", b"2"]))
    at_end = store.get("Q", 0, 2)
    unknown = store.get("Nobody", 4, 0)
    assert (at_end.status, at_end.next_begin_offset, at_end.max_offset) == (
        PullStatus.NO_NEW_MSG,
        2,
        2,
    )
    assert (unknown.status, unknown.next_begin_offset, unknown.max_offset) == (
        PullStatus.NO_NEW_MSG,
        0,
        0,
    )
    assert store.get("Nobody", 4, 1).status == PullStatus.OFFSET_ILLEGAL


def test_get_stops_at_max_msgs_and_max_bytes_but_returns_at_least_one(
    store: MessageStore, batch: MakeBatch
) -> None:
    store.put("Q", 0, 10, batch("Q", [b"b" * 100] * 10))
    size = all_records(store, "Q", 0)[0].total_size

    by_count = store.get("Q", 0, 2, max_msgs=3)
    assert (by_count.count, by_count.next_begin_offset) == (3, 5)
    by_bytes = store.get("Q", 0, 0, max_bytes=size * 4 + 10)
    assert by_bytes.count == 4
    assert len(by_bytes.payload) == size * 4
    tiny = store.get("Q", 0, 7, max_bytes=1)
    assert (tiny.count, tiny.next_begin_offset) == (1, 8)


def test_get_joins_records_that_are_not_contiguous_in_the_log(
    store: MessageStore, batch: MakeBatch
) -> None:
    for i in range(3):
        store.put("Left", 0, 1, batch("Left", [f"left{i}".encode()]))
        store.put("Right", 0, 1, batch("Right", [f"right{i}".encode()]))
    left = store.get("Left", 0, 0)
    assert [r.body for r in record.iter_records(bytes(left.payload))] == [
        b"left0",
        b"left1",
        b"left2",
    ]


def test_queue_stats_report_offsets_and_last_store_time(
    store: MessageStore, batch: MakeBatch
) -> None:
    store.put("S", 2, 4, batch("S", [b"1"] * 4))
    stats = store.queue_stats("S", [2, 5])
    assert [(s.queue_id, s.min_offset, s.max_offset) for s in stats] == [(2, 0, 4), (5, 0, 0)]
    assert stats[0].last_store_ms > 0
    assert stats[1].last_store_ms == 0
    status = store.status()
    assert (status.topics, status.queues) == (1, 1)


def test_read_log_returns_whole_records_and_skips_blank_tails(
    store: MessageStore, batch: MakeBatch
) -> None:
    body = b"y" * 1000
    store.put("Log", 0, 40, batch("Log", [body] * 40))
    store.put("Two", 0, 40, batch("Two", [body] * 40))
    size = all_records(store, "Log", 0)[0].total_size

    collected = b""
    offset = 0
    starts = []
    while True:
        part = store.read_log(offset, size * 7 + 3)
        starts.append(part.from_offset)
        if part.next_offset == part.from_offset:
            break
        assert len(part.payload) % size == 0  # whole records only
        assert len(part.payload) <= size * 7
        collected += bytes(part.payload)
        offset = part.next_offset
    assert part.next_offset == store.status().max_offset
    recs = list(record.iter_records(collected))
    assert len(recs) == 80
    assert [r.topic for r in recs] == ["Log"] * 40 + ["Two"] * 40
    assert 65536 in starts  # a read landed on the segment start, past the blank tail
    assert all(record.PREFIX.unpack_from(collected, i * size)[1] == record.MAGIC for i in range(80))


def test_read_log_from_a_blank_tail_moves_to_the_next_segment(
    store: MessageStore, batch: MakeBatch
) -> None:
    store.put("Log", 0, 40, batch("Log", [b"y" * 1000] * 40))
    store.put("Log", 0, 40, batch("Log", [b"y" * 1000] * 40))
    recs = all_records(store, "Log", 0)
    blank_at = max(r.phys_offset + r.total_size for r in recs if r.phys_offset < 65536)

    part = store.read_log(blank_at, 1)
    assert part.from_offset == 65536
    assert part.next_offset == 65536 + recs[0].total_size  # one record even over max_bytes
    assert next(record.iter_records(bytes(part.payload))).phys_offset == 65536


def test_read_log_past_the_end_is_invalid_and_at_the_end_is_empty(
    store: MessageStore, batch: MakeBatch
) -> None:
    store.put("Log", 0, 1, batch("Log", [b"one"]))
    end = store.status().max_offset
    at_end = store.read_log(end, 1000)
    assert (at_end.from_offset, at_end.next_offset, len(at_end.payload)) == (end, end, 0)
    with pytest.raises(InvalidParameterError):
        store.read_log(end + 1, 1000)
    with pytest.raises(InvalidParameterError, match="boundary"):
        store.read_log(3, 1000)


def test_reopen_after_clean_close_keeps_everything(
    make_config: MakeConfig, batch: MakeBatch
) -> None:
    config = make_config()
    with MessageStore.open(config) as store:
        first = store.put("Keep", 0, 50, batch("Keep", [b"k" * 900] * 50))
        store.put("Keep", 1, 50, batch("Keep", [b"j" * 900] * 50, tags="T"))
        before = bytes(store.get("Keep", 0, 0, max_msgs=1000).payload)
        end = store.status().max_offset
    root = Path(config.store_path_root_dir)
    assert not (root / "abort").exists()
    cp = Checkpoint(root / "checkpoint")
    saved = cp.read()
    cp.close()
    assert saved is not None
    assert saved.log_flushed == end

    with MessageStore.open(config) as store:
        assert store.status().max_offset == end
        assert store.status().flushed_offset == end
        assert bytes(store.get("Keep", 0, 0, max_msgs=1000).payload) == before
        assert [s.max_offset for s in store.queue_stats("Keep", [0, 1])] == [50, 50]
        assert store.queue_stats("Keep", [0])[0].last_store_ms > 0
        more = store.put("Keep", 0, 1, batch("Keep", [b"after"]))
        assert more.queue_offset == 50
        assert more.phys_offsets[0] >= end
        assert first.phys_offsets[0] == 0


def test_recovery_truncates_a_torn_tail_and_new_puts_continue(
    make_config: MakeConfig, batch: MakeBatch, crash: Crash
) -> None:
    config = make_config()
    store = MessageStore.open(config)
    store.put("Torn", 0, 40, batch("Torn", [b"a" * 1000] * 40))
    store.put("Torn", 0, 30, batch("Torn", [b"b" * 1000] * 30))
    store.flush()
    last = store.put("Torn", 0, 5, batch("Torn", [b"c" * 1000] * 5))
    crash(store)

    # Tear the third record of the last batch: garbage in its body breaks its CRC.
    torn_at = last.phys_offsets[2]
    seg = Path(config.store_path_root_dir) / "commitlog" / file_name(65536)
    with seg.open("r+b") as f:
        f.seek(torn_at - 65536 + 200)
        f.write(os.urandom(64))

    with MessageStore.open(config) as store:
        assert store.status().max_offset == torn_at
        recs = all_records(store, "Torn", 0)
        assert len(recs) == 72
        assert [r.body[:1] for r in recs[-3:]] == [b"b", b"c", b"c"]
        again = store.put("Torn", 0, 2, batch("Torn", [b"d", b"e"]))
        assert again.queue_offset == 72
        assert again.phys_offsets[0] == torn_at
        recs = all_records(store, "Torn", 0)
        assert [r.body for r in recs[-2:]] == [b"d", b"e"]
        assert [r.queue_offset for r in recs] == list(range(74))
    tail = seg.read_bytes()[again.next_offset - 65536 :]
    assert not any(tail)  # the torn bytes past the end were zeroed


def test_recovery_cuts_a_half_written_record_and_drops_segments_past_it(
    make_config: MakeConfig, batch: MakeBatch, crash: Crash
) -> None:
    config = make_config()
    store = MessageStore.open(config)
    store.put("Cut", 0, 50, batch("Cut", [b"a" * 1000] * 50))
    store.flush()
    cut = store.put("Cut", 0, 20, batch("Cut", [b"b" * 1000] * 20))
    crash(store)
    first_lost = cut.phys_offsets[3]
    root = Path(config.store_path_root_dir)
    seg0 = root / "commitlog" / file_name(0)
    with seg0.open("r+b") as f:  # the record's second half never reached the disk
        f.seek(first_lost + 500)
        f.write(bytes(65536 - first_lost - 500))

    with MessageStore.open(config) as store:
        assert store.status().max_offset == first_lost
        assert [f.name for f in segment_files(store)] == [file_name(0)]
        assert store.queue_stats("Cut", [0])[0].max_offset == 53
        assert len(all_records(store, "Cut", 0)) == 53


def test_recovery_rebuilds_consume_queue_entries_lost_in_a_crash(
    make_config: MakeConfig, batch: MakeBatch, crash: Crash
) -> None:
    config = make_config()
    store = MessageStore.open(config)
    store.put("Lost", 0, 10, batch("Lost", [b"x" * 100] * 10))
    store.flush()
    store.put("Lost", 0, 10, batch("Lost", [b"y" * 100] * 10, tags="Late"))
    store.put("Lost", 1, 5, batch("Lost", [b"z" * 100] * 5))
    crash(store)
    root = Path(config.store_path_root_dir)
    # The ConsumeQueue pages written after the flush never reached the disk.
    q0 = root / "consumequeue" / "Lost" / "0" / file_name(0)
    raw = bytearray(q0.read_bytes())
    raw[10 * 20 :] = bytes(len(raw) - 10 * 20)
    q0.write_bytes(bytes(raw))
    for f in (root / "consumequeue" / "Lost" / "1").iterdir():
        f.unlink()

    with MessageStore.open(config) as store:
        assert [s.max_offset for s in store.queue_stats("Lost", [0, 1])] == [20, 5]
        recs = all_records(store, "Lost", 0)
        assert [r.body[:1] for r in recs] == [b"x"] * 10 + [b"y"] * 10
        late = store.get("Lost", 0, 0, tag_codes=[record.tags_code(b"Late")])
        assert late.count == 10
        assert len(all_records(store, "Lost", 1)) == 5


@pytest.mark.parametrize(
    ("case", "error"),
    [
        ("bad_magic", MessageIllegalError),
        ("wrong_topic", MessageIllegalError),
        ("oversize_body", MessageIllegalError),
        ("count_too_big", MessageIllegalError),
        ("count_too_small", MessageIllegalError),
        ("sizes_disagree", MessageIllegalError),
        ("count_zero", InvalidParameterError),
        ("bad_topic_name", InvalidParameterError),
        ("negative_queue", InvalidParameterError),
    ],
)
def test_invalid_puts_are_refused_and_leave_the_log_unchanged(
    make_config: MakeConfig, batch: MakeBatch, case: str, error: type[Exception]
) -> None:
    store = MessageStore.open(make_config(max_message_size=2000))
    try:
        store.put("Good", 0, 2, batch("Good", [b"1", b"2"]))
        good = batch("Good", [b"a", b"b", b"c"])
        topic, queue_id, count, payload = "Good", 0, 3, good
        if case == "bad_magic":
            second = len(batch("Good", [b"a"]))
            payload = good[: second + 4] + b"\x00\x00\x00\x00" + good[second + 8 :]
        elif case == "wrong_topic":
            payload = good + batch("Evil", [b"d"])
            count = 4
        elif case == "oversize_body":
            payload = good + batch("Good", [b"o" * 2001])
            count = 4
        elif case == "count_too_big":
            count = 4
        elif case == "count_too_small":
            count = 2
        elif case == "sizes_disagree":
            payload = good[:84] + (999).to_bytes(4, "big") + good[88:]
        elif case == "count_zero":
            count = 0
        elif case == "bad_topic_name":
            topic = "bad topic!"
        elif case == "negative_queue":
            queue_id = -1
        before = store.status()
        log_before = (store.root / "commitlog" / file_name(0)).read_bytes()
        with pytest.raises(error):
            store.put(topic, queue_id, count, payload)
        assert store.status() == before
        assert (store.root / "commitlog" / file_name(0)).read_bytes() == log_before
        assert store.queue_stats("Good", [0])[0].max_offset == 2
        after = store.put("Good", 0, 1, batch("Good", [b"next"]))
        assert after.queue_offset == 2
        assert after.phys_offsets[0] == before.max_offset
    finally:
        store.close()


def test_a_second_store_on_the_same_directory_is_refused(make_config: MakeConfig) -> None:
    config = make_config()
    with MessageStore.open(config), pytest.raises(DirLockedError, match="in use"):
        MessageStore.open(config)
    MessageStore.open(config).close()  # free again once the first one closed


def test_abort_marker_exists_while_the_store_is_open(make_config: MakeConfig) -> None:
    config = make_config()
    root = Path(config.store_path_root_dir)
    with MessageStore.open(config):
        assert (root / "abort").exists()
        assert (root / "lock").exists()
    assert not (root / "abort").exists()


def test_flusher_syncs_on_a_worker_signals_the_loop_and_writes_the_checkpoint(
    store: MessageStore, batch: MakeBatch
) -> None:
    flusher = Flusher(store)
    try:
        store.put("Flush", 0, 20, batch("Flush", [b"f" * 500] * 20))
        end = store.status().max_offset
        assert store.status().flushed_offset == 0
        plan = store.begin_flush()
        assert plan is not None
        flusher.start(plan)
        assert flusher.busy
        deadline = time.monotonic() + 10
        done = None
        while done is None:  # signalled once the log is synced, again once all files are
            left = max(deadline - time.monotonic(), 0)
            ready = select.select([flusher.wake_fd], [], [], left)[0]
            assert ready == [flusher.wake_fd], "the worker never signalled the end of the flush"
            done = flusher.collect()
        assert done is plan
        assert flusher.collect() is None  # collected once
        assert plan.log_files == 1  # the segment first, then the ConsumeQueue file
        assert 0 < plan.log_done_at <= plan.done_at
        assert store.status().flushed_offset == end
        saved = store.checkpoint.read()
        assert saved is not None
        assert (saved.log_flushed, saved.cq_flushed) == (end, end)
        assert saved.log_store_ms == store.last_store_ms
        assert store.begin_flush() is None  # nothing new to flush
        assert store.begin_log_sync() is None
    finally:
        flusher.close()


def test_a_log_sync_covers_the_log_but_leaves_the_checkpoint(
    store: MessageStore, batch: MakeBatch
) -> None:
    flusher = Flusher(store)
    try:
        store.put("Sync", 0, 5, batch("Sync", [b"s" * 100] * 5))
        end = store.status().max_offset
        plan = store.begin_log_sync()
        assert plan is not None
        flusher.start(plan)
        assert flusher.wait() is plan
        assert store.status().flushed_offset == end
        assert store.checkpoint.read() is None  # the periodic full flush writes it
        assert flusher.log_syncs == 1
    finally:
        flusher.close()


def test_a_failed_flush_is_reported_and_the_flusher_goes_on(
    make_config: MakeConfig, batch: MakeBatch, tmp_path: Path
) -> None:
    with MessageStore.open(make_config()) as store:
        flusher = Flusher(store)
        try:
            store.put("Fail", 0, 3, batch("Fail", [b"x"] * 3))
            plan = store.begin_flush()
            assert plan is not None
            broken = MappedFile(tmp_path / "broken", 0, 4096, create=True)
            broken.close()  # its descriptor is gone: fdatasync fails with EBADF
            plan.files.append(broken)
            flusher.start(plan)
            assert flusher.wait() is None
            assert flusher.failures == 1
            assert store.status().flushed_offset == 0  # nothing claimed durable
            cq = store.queues.get("Fail", 0)
            assert cq is not None
            assert cq.files[0] in store.queues.dirty  # flushed again next time
            store.queues.dirty.discard(broken)  # this test's stand-in for a failing disk

            again = store.begin_flush()
            assert again is not None
            flusher.start(again)
            assert flusher.wait() is again
            assert store.status().flushed_offset == store.status().max_offset
        finally:
            flusher.close()


def test_a_new_queue_directory_is_synced_by_the_next_flush_not_on_the_put(
    store: MessageStore, batch: MakeBatch
) -> None:
    store.flush()
    store.put("Fresh", 2, 1, batch("Fresh", [b"x"]))
    plan = store.begin_flush()
    assert plan is not None
    cq_root = store.queues.root
    pending = {f.path for f in plan.files if isinstance(f, PendingDir)}
    # the parents that got entries: consumequeue/ (topics), the topic (queue), the queue (file)
    assert {cq_root, cq_root / "Fresh", cq_root / "Fresh" / "2"} <= pending
    store.end_flush(plan.run(store.checkpoint))
    assert store.begin_flush() is None  # nothing left to sync
    PendingDir(cq_root / "deleted-topic").sync()  # a directory removed before its flush: no-op


def test_gated_reads_stop_at_the_confirmed_offset_and_follow_it(
    store: MessageStore, batch: MakeBatch
) -> None:
    """allAckInSyncStateSet: a queue read sees only records the in-sync set holds, wherever
    the other queues' records lie between them."""
    store.put("Orders", 0, 2, batch("Orders", [b"a0", b"a1"]))
    store.gate_reads()  # what the store held when it opened counts as kept
    held = store.put("Orders", 0, 1, batch("Orders", [b"a2"]))
    other = store.put("Orders", 1, 1, batch("Orders", [b"b0"]))
    last = store.put("Orders", 0, 1, batch("Orders", [b"a3"]))

    got = store.get("Orders", 0, 0)
    assert (got.status, got.count, got.max_offset) == (PullStatus.FOUND, 2, 2)
    assert store.get("Orders", 0, 2).status == PullStatus.NO_NEW_MSG
    assert store.get("Orders", 1, 0).status == PullStatus.NO_NEW_MSG

    assert store.confirm(held.next_offset) and not store.confirm(held.next_offset - 1)
    assert [r.body for r in record.iter_records(bytes(store.get("Orders", 0, 2).payload))] == [
        b"a2"
    ]
    assert store.get("Orders", 1, 0).status == PullStatus.NO_NEW_MSG
    store.confirm(other.next_offset)
    assert store.get("Orders", 1, 0).count == 1
    assert store.get("Orders", 0, 3).status == PullStatus.NO_NEW_MSG
    store.confirm(last.next_offset + 10_000)  # never past the log's end
    assert store.confirmed == last.next_offset
    assert store.get("Orders", 0, 3).count == 1


def test_a_confirm_heard_before_its_bytes_is_applied_once_they_are_appended(
    store: MessageStore, batch: MakeBatch
) -> None:
    """A slave hears its master's confirm with the bytes it is about to append; the relay
    sends each offset once, so a confirm past the log's end must hold until the log gets
    there (an idle group's slave reads otherwise stopped one transfer short for good)."""
    store.gate_reads()
    first = store.put("Orders", 0, 1, batch("Orders", [b"a0"]))
    coming = batch("Orders", [b"a1"])
    assert store.confirm(first.next_offset + len(coming))
    assert store.confirmed == first.next_offset  # never past the log's end
    assert not store.confirm_grown()  # nothing appended since
    second = store.put("Orders", 0, 1, coming)
    assert second.next_offset == first.next_offset + len(coming)
    assert store.confirm_grown() and store.confirmed == second.next_offset
    assert store.get("Orders", 0, 0).count == 2
