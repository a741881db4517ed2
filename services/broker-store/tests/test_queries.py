"""Offset by store time and message by CommitLog offset, on a MessageStore."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from ferry.protocol import record
from ferry.protocol.errors import QueryNotFoundError
from ferry.store.store import MessageStore

MakeBatch = Callable[..., bytes]
MakeConfig = Callable[..., Any]


def next_ms(after: int) -> None:
    """Spins until the wall clock shows a later millisecond than `after` (store times differ)."""
    deadline = time.monotonic() + 1
    while time.time_ns() // 1_000_000 <= after:
        assert time.monotonic() < deadline


def store_times(store: MessageStore, topic: str, queue_id: int) -> list[int]:
    got = store.get(topic, queue_id, 0, max_msgs=1000)
    return [r.store_timestamp for r in record.iter_records(bytes(got.payload))]


def test_search_by_time_finds_the_first_offset_stored_at_or_after_it(
    store: MessageStore, batch: MakeBatch
) -> None:
    for i in range(4):  # four puts of three records, each put in a later millisecond
        store.put("Timed", 1, 3, batch("Timed", [f"m{i}".encode()] * 3))
        next_ms(store.last_store_ms)
        store.put("Other", 0, 1, batch("Other", [b"noise"]))
    times = store_times(store, "Timed", 1)
    assert len(set(times)) == 4
    for put_no in range(4):
        assert store.search_offset("Timed", 1, times[put_no * 3]) == put_no * 3
        assert store.search_offset("Timed", 1, times[put_no * 3] + 1) == put_no * 3 + 3
    assert store.search_offset("Timed", 1, 0) == 0
    assert store.search_offset("Timed", 1, times[-1] + 60_000) == 12  # none: the max offset
    assert store.search_offset("Timed", 7, times[0]) == 0  # an unknown queue


def test_search_by_time_starts_at_the_min_offset_after_retention(
    make_config: MakeConfig, batch: MakeBatch
) -> None:
    with MessageStore.open(make_config(file_reserved_time=0)) as store:
        for _ in range(12):
            store.put("Timed", 0, 10, batch("Timed", [b"t" * 1000] * 10))
        store.flush()
        store.run_retention(manual=True)
        low = store.queue_stats("Timed", [0])[0].min_offset
        assert low > 0
        assert store.search_offset("Timed", 0, 0) == low


def test_view_returns_the_stored_record_at_a_commit_log_offset(
    store: MessageStore, batch: MakeBatch
) -> None:
    sent = store.put("View", 2, 3, batch("View", [b"one", b"two", b"three"], tags="T"))
    raw = bytes(store.view(sent.phys_offsets[1]))
    rec = next(record.iter_records(raw))
    assert (rec.body, rec.queue_id, rec.queue_offset, rec.phys_offset) == (
        b"two",
        2,
        1,
        sent.phys_offsets[1],
    )
    assert len(raw) == rec.total_size
    assert record.verify_crc(raw, 0, len(raw))


def test_view_of_an_offset_that_is_not_a_record_start_is_not_found(
    make_config: MakeConfig, batch: MakeBatch
) -> None:
    with MessageStore.open(make_config(file_reserved_time=0)) as store:
        first = store.put("View", 0, 1, batch("View", [b"gone soon"]))
        for _ in range(8):
            store.put("View", 0, 10, batch("View", [b"v" * 1000] * 10))
        end = store.status().max_offset
        for bad in (first.phys_offsets[0] + 1, end, end + 500, -1):
            with pytest.raises(QueryNotFoundError):
                store.view(bad)
        store.flush()
        store.run_retention(manual=True)
        with pytest.raises(QueryNotFoundError, match="the log holds"):
            store.view(first.phys_offsets[0])  # its segment was deleted


def test_held_queues_counts_up_to_the_highest_queue_holding_entries(
    make_config: MakeConfig, batch: MakeBatch
) -> None:
    """What a newly elected master's remoting widens its topic configs to: queue 3 holds a
    message, so Held needs 4 readable queues, gaps or not; a queue without entries counts for
    nothing; and the answer is the same after a restart (from the files)."""
    store = MessageStore.open(make_config())
    try:
        store.put("Held", 0, 1, batch("Held", [b"a"]))
        store.put("Held", 3, 2, batch("Held", [b"b", b"c"]))
        store.put("Other", 1, 1, batch("Other", [b"d"]))
        store.queues.get_or_create("Empty", 5)  # a queue with no entries
        assert store.held_queues() == {"Held": 4, "Other": 2}
    finally:
        store.close()
    again = MessageStore.open(make_config())
    try:
        assert again.held_queues() == {"Held": 4, "Other": 2}
    finally:
        again.close()
