"""Start-up recovery on real files: what a clean start skips and what a crash start checks."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ferry.protocol import record
from ferry.protocol.codes import PullStatus
from ferry.runtime.offset_names import file_name
from ferry.store.store import MessageStore

Crash = Callable[[MessageStore], None]
MakeBatch = Callable[..., bytes]
MakeConfig = Callable[..., Any]
SEGMENT = 65536


def bodies(store: MessageStore, topic: str, queue_id: int) -> list[bytes]:
    got = store.get(topic, queue_id, 0, max_msgs=100_000, max_bytes=1 << 30)
    if got.status != PullStatus.FOUND:
        return []
    return [r.body for r in record.iter_records(bytes(got.payload))]


def segment_path(config: Any, start: int) -> Path:
    return Path(config.store_path_root_dir) / "commitlog" / file_name(start)


def test_a_clean_start_verifies_nothing_and_rebuilds_nothing(
    make_config: MakeConfig, batch: MakeBatch
) -> None:
    config = make_config()
    with MessageStore.open(config) as store:
        for i in range(6):
            store.put("Clean", i % 3, 20, batch("Clean", [b"c" * 900] * 20))
        end = store.status().max_offset
    with MessageStore.open(config) as store:
        report = store.recovery
        assert report is not None
        assert (report.log_end, report.scanned_from) == (end, end)
        assert (report.dropped_entries, report.redispatched) == (0, 0)
        assert store.recovered_offset == end
        assert [len(bodies(store, "Clean", q)) for q in range(3)] == [40, 40, 40]


def test_after_a_crash_records_past_the_checkpoint_are_verified_and_reindexed(
    make_config: MakeConfig, batch: MakeBatch, crash: Crash
) -> None:
    config = make_config()
    store = MessageStore.open(config)
    store.put("Crash", 0, 10, batch("Crash", [b"a" * 500] * 10))
    store.flush()
    checkpointed = store.status().max_offset
    store.put("Crash", 0, 10, batch("Crash", [b"b" * 500] * 10))
    end = store.status().max_offset
    crash(store)
    with MessageStore.open(config) as store:
        report = store.recovery
        assert report is not None
        assert (report.scanned_from, report.log_end) == (checkpointed, end)
        assert bodies(store, "Crash", 0) == [b"a" * 500] * 10 + [b"b" * 500] * 10


def test_without_a_checkpoint_every_segment_is_verified(
    make_config: MakeConfig, batch: MakeBatch, crash: Crash
) -> None:
    config = make_config()
    store = MessageStore.open(config)
    sent = [store.put("NoCp", 0, 10, batch("NoCp", [b"n" * 1000] * 10)) for _ in range(15)]
    assert len(store.log.segments) == 3
    crash(store)  # before any flush: no checkpoint on disk
    bad = sent[2].phys_offsets[4]  # in the first segment
    with segment_path(config, 0).open("r+b") as f:
        f.seek(bad + 300)
        f.write(b"\xff" * 8)
    with MessageStore.open(config) as store:
        assert store.status().max_offset == bad
        assert store.recovery is not None and store.recovery.scanned_from == 0
        assert sorted(int(p.name) for p in (store.root / "commitlog").iterdir()) == [0]
        assert bodies(store, "NoCp", 0) == [b"n" * 1000] * 24


def test_truncating_the_last_segment_mid_record_keeps_every_record_before_it(
    make_config: MakeConfig, batch: MakeBatch, crash: Crash
) -> None:
    config = make_config()
    store = MessageStore.open(config)
    store.put("Cut", 1, 70, batch("Cut", [f"{i:04d}".encode() * 250 for i in range(70)]))
    store.flush()
    last = store.put("Cut", 1, 10, batch("Cut", [b"late" * 250] * 10))
    crash(store)
    cut_record = last.phys_offsets[6]
    seg = store.log.segment_size
    os.truncate(segment_path(config, cut_record - cut_record % seg), cut_record % seg + 77)
    with MessageStore.open(config) as store:
        assert store.status().max_offset == cut_record
        got = bodies(store, "Cut", 1)
        assert got == [f"{i:04d}".encode() * 250 for i in range(70)] + [b"late" * 250] * 6
        assert store.queue_stats("Cut", [1])[0].max_offset == 76
        assert store.put("Cut", 1, 1, batch("Cut", [b"after"])).phys_offsets == [cut_record]


def test_a_valid_record_at_the_wrong_offset_is_not_taken_for_the_log_tail(
    make_config: MakeConfig, batch: MakeBatch, crash: Crash
) -> None:
    config = make_config()
    store = MessageStore.open(config)
    first = store.put("Stale", 0, 3, batch("Stale", [b"x", b"y", b"z"]))
    store.flush()
    end = store.status().max_offset
    crash(store)
    size = first.phys_offsets[1] - first.phys_offsets[0]
    with segment_path(config, 0).open("r+b") as f:  # a stale copy of record 0 past the end
        f.seek(0)
        copy = f.read(size)
        f.seek(end)
        f.write(copy)
    assert record.verify_crc(copy, 0, size)  # intact on its own: only its offset is wrong
    with MessageStore.open(config) as store:
        assert store.status().max_offset == end
        assert bodies(store, "Stale", 0) == [b"x", b"y", b"z"]


def test_a_blank_tail_too_short_for_a_record_header_is_crossed(
    make_config: MakeConfig, batch: MakeBatch, crash: Crash
) -> None:
    config = make_config()
    store = MessageStore.open(config)
    overhead = len(batch("Blank", [b""]))  # a record's size besides its body
    store.put("Blank", 0, 64, batch("Blank", [b"f" * (1000 - overhead)] * 64))
    store.put("Blank", 0, 1, batch("Blank", [b"g" * (SEGMENT - 64_000 - 50 - overhead)]))
    rolled = store.put("Blank", 0, 2, batch("Blank", [b"next", b"segment"]))
    assert rolled.phys_offsets[0] == SEGMENT  # the first segment ends in a 50-byte blank
    end = store.status().max_offset
    crash(store)  # no checkpoint: recovery walks the whole log
    with MessageStore.open(config) as store:
        assert store.status().max_offset == end
        assert bodies(store, "Blank", 0)[-2:] == [b"next", b"segment"]
