"""Retention and the disk guard on a MessageStore with 64 KiB segments and 50-entry
ConsumeQueue files; the disk's used ratio comes from diskUsedRatioOverride."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ferry.protocol import record
from ferry.protocol.codes import PullStatus
from ferry.protocol.errors import ConfigError, DiskFullError
from ferry.store.retention import parse_delete_when
from ferry.store.store import MessageStore

MakeBatch = Callable[..., bytes]
MakeConfig = Callable[..., Any]
SEGMENT = 65536
BODY = b"r" * 1000


def fill(store: MessageStore, batch: MakeBatch, rounds: int) -> None:
    """Two queues of one topic, interleaved, 10 records per put: rounds * 10 records."""
    for i in range(rounds):
        store.put("Old", i % 2, 10, batch("Old", [BODY] * 10))


def other_hour() -> int:
    return (time.localtime().tm_hour + 12) % 24


def segment_names(store: MessageStore) -> list[int]:
    return sorted(int(p.name) for p in (store.root / "commitlog").iterdir())


def test_expired_segments_are_deleted_and_queues_start_after_them(
    make_config: MakeConfig, batch: MakeBatch
) -> None:
    config = make_config(file_reserved_time=0, delete_when=f"{other_hour():02d}")
    with MessageStore.open(config) as store:
        fill(store, batch, 26)  # 260 records of ~1.1 KB: five segments, both queues in the last
        store.flush()
        last_start = store.log.segments[-1].start
        assert len(store.log.segments) == 5

        report = store.run_retention(manual=True)

        assert report.deleted_segments == 4
        assert segment_names(store) == [last_start]
        assert store.status().min_offset == last_start == report.min_offset
        for qid in (0, 1):
            stat = store.queue_stats("Old", [qid])[0]
            assert stat.max_offset == 130
            assert 0 < stat.min_offset < 130
            first = store.get("Old", qid, stat.min_offset, max_msgs=1)
            assert first.status == PullStatus.FOUND
            rec = next(record.iter_records(bytes(first.payload)))
            assert rec.phys_offset >= last_start
            assert rec.queue_offset == stat.min_offset
            below = store.get("Old", qid, stat.min_offset - 1)
            assert (below.status, below.next_begin_offset) == (
                PullStatus.OFFSET_ILLEGAL,
                stat.min_offset,
            )
            files = sorted(
                int(p.name) for p in (store.root / "consumequeue/Old" / str(qid)).iterdir()
            )
            assert files[0] <= stat.min_offset * 20 < files[0] + 1000  # earlier files deleted
        mins = [s.min_offset for s in store.queue_stats("Old", [0, 1])]

    with MessageStore.open(config) as store:  # the moved min offsets survive a restart
        assert [s.min_offset for s in store.queue_stats("Old", [0, 1])] == mins
        assert store.put("Old", 0, 1, batch("Old", [b"new"])).queue_offset == 130


def test_nothing_is_deleted_outside_the_delete_when_hours_unless_asked(
    make_config: MakeConfig, batch: MakeBatch
) -> None:
    hour = time.localtime().tm_hour
    config = make_config(file_reserved_time=0, delete_when=f"{(hour + 1) % 24:02d}")
    with MessageStore.open(config) as store:
        fill(store, batch, 8)
        store.flush()
        segments = len(store.log.segments)
        now_ms = time.time_ns() // 1_000_000
        assert store.retention.run(now_ms=now_ms, hour=hour).deleted_segments == 0
        at_the_hour = store.retention.run(now_ms=now_ms, hour=(hour + 1) % 24)
        assert at_the_hour.deleted_segments == segments - 1


def test_segments_younger_than_file_reserved_time_are_kept(
    make_config: MakeConfig, batch: MakeBatch
) -> None:
    with MessageStore.open(make_config(file_reserved_time=72)) as store:
        fill(store, batch, 8)
        store.flush()
        segments = len(store.log.segments)
        assert store.run_retention(manual=True).deleted_segments == 0
        in_73_hours = time.time_ns() // 1_000_000 + 73 * 3_600_000
        later = store.retention.run(now_ms=in_73_hours, hour=4)  # deleteWhen "04"
        assert later.deleted_segments == segments - 1


def test_the_segment_being_written_and_unflushed_ones_are_never_deleted(
    make_config: MakeConfig, batch: MakeBatch
) -> None:
    with MessageStore.open(make_config(file_reserved_time=0)) as store:
        store.put("One", 0, 10, batch("One", [BODY] * 10))
        store.flush()
        assert store.run_retention(manual=True).deleted_segments == 0  # only one segment
        fill(store, batch, 8)
        segments = len(store.log.segments)
        assert store.run_retention(manual=True).deleted_segments == 0  # nothing flushed yet
        store.flush()
        assert store.run_retention(manual=True).deleted_segments == segments - 1
        assert len(store.log.segments) == 1


def test_above_max_used_ratio_the_oldest_segments_go_even_if_fresh(
    make_config: MakeConfig, batch: MakeBatch
) -> None:
    config = make_config(
        file_reserved_time=72, delete_when=f"{other_hour():02d}", disk_used_ratio_override=80
    )
    with MessageStore.open(config) as store:
        fill(store, batch, 8)
        store.flush()
        segments = len(store.log.segments)
        report = store.run_retention()
        assert report.deleted_segments == segments - 1
        assert report.used_ratio == pytest.approx(0.80)
        assert not store.retention.disk_full  # 80 % is below the 90 % warning level
        assert store.put("Old", 0, 1, batch("Old", [b"still writable"])).queue_offset > 0


def test_above_the_warning_ratio_puts_are_refused_and_reads_go_on(
    make_config: MakeConfig, batch: MakeBatch
) -> None:
    with MessageStore.open(make_config()) as store:
        store.put("Full", 0, 3, batch("Full", [b"a", b"b", b"c"]))
        store.retention.disk.override_percent = 95
        store.retention.check_disk()
        before = store.status()
        assert before.disk_full
        with pytest.raises(DiskFullError, match="diskSpaceWarningLevelRatio") as info:
            store.put("Full", 0, 1, batch("Full", [b"refused"]))
        assert info.value.retriable
        assert store.status().max_offset == before.max_offset
        got = store.get("Full", 0, 0)
        assert [r.body for r in record.iter_records(bytes(got.payload))] == [b"a", b"b", b"c"]

        store.retention.disk.override_percent = 50
        store.retention.check_disk()
        assert store.put("Full", 0, 1, batch("Full", [b"d"])).queue_offset == 3


def test_a_store_opened_on_a_full_disk_refuses_writes_at_once(
    make_config: MakeConfig, batch: MakeBatch
) -> None:
    with MessageStore.open(make_config(disk_used_ratio_override=91)) as store:
        assert store.status().disk_full
        with pytest.raises(DiskFullError):
            store.put("Full", 0, 1, batch("Full", [b"x"]))


def test_the_disk_is_measured_on_the_store_directory_by_default(
    make_config: MakeConfig, tmp_path: Path
) -> None:
    with MessageStore.open(make_config()) as store:
        ratio = store.retention.disk.used_ratio()
        assert 0.0 < ratio < 1.0
        assert store.retention.disk.path == Path(store.root)


def test_a_queue_whose_entries_all_went_keeps_its_max_offset(
    make_config: MakeConfig, batch: MakeBatch
) -> None:
    config = make_config(file_reserved_time=0)
    with MessageStore.open(config) as store:
        store.put("Gone", 0, 5, batch("Gone", [BODY] * 5))
        fill(store, batch, 8)  # pushes Gone's records into an old segment
        store.flush()
        store.run_retention(manual=True)
        stat = store.queue_stats("Gone", [0])[0]
        assert (stat.min_offset, stat.max_offset) == (5, 5)
        assert store.get("Gone", 0, 0).status == PullStatus.OFFSET_ILLEGAL
    with MessageStore.open(config) as store:
        stat = store.queue_stats("Gone", [0])[0]
        assert (stat.min_offset, stat.max_offset) == (5, 5)
        assert store.put("Gone", 0, 1, batch("Gone", [b"next"])).queue_offset == 5
        got = store.get("Gone", 0, 5)
        assert [r.body for r in record.iter_records(bytes(got.payload))] == [b"next"]


def test_delete_when_is_a_list_of_hours() -> None:
    assert parse_delete_when("04") == {4}
    assert parse_delete_when("04;05") == {4, 5}
    assert parse_delete_when(" 4 ; 23 ") == {4, 23}
    for bad in ("24", "4am", "-1"):
        with pytest.raises(ConfigError, match="deleteWhen"):
            parse_delete_when(bad)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("delete_when", "noon", "deleteWhen"),
        ("disk_space_warning_level_ratio", 100, "diskSpaceWarningLevelRatio"),
        ("disk_used_ratio_override", 101, "diskUsedRatioOverride"),
        ("file_reserved_time", -1, "fileReservedTime"),
        ("sync_flush_timeout", -5, "syncFlushTimeout"),
    ],
)
def test_bad_retention_settings_stop_the_store_before_it_touches_files(
    make_config: MakeConfig, key: str, value: Any, message: str
) -> None:
    config = make_config(**{key: value})
    with pytest.raises(ConfigError, match=message):
        MessageStore.open(config)
    assert not Path(config.store_path_root_dir).exists()
