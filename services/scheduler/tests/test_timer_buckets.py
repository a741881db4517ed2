"""TimerBuckets: timers on disk by delivery time, read back once each."""

from __future__ import annotations

from pathlib import Path

from ferry.scheduler.timer_buckets import TimerBuckets, TimerEntry


def test_entries_come_back_from_their_bucket_once_each(tmp_path: Path) -> None:
    buckets = TimerBuckets(tmp_path, 1000)
    b = buckets.bucket_of(5_432_100)
    assert b == 5_432_000
    buckets.append(b, TimerEntry(5_432_100, 10, b"rec-a"))
    buckets.append(b, TimerEntry(5_432_050, 20, b"rec-b"))
    buckets.append(b, TimerEntry(5_432_100, 10, b"rec-a"))  # taken in again after a crash
    buckets.append(b + 1000, TimerEntry(5_433_500, 30, b"rec-c"))
    buckets.close()
    reopened = TimerBuckets(tmp_path, 1000)
    assert reopened.ids_between(0, 10**13) == [b, b + 1000]
    assert reopened.read(b) == [
        TimerEntry(5_432_100, 10, b"rec-a"),
        TimerEntry(5_432_050, 20, b"rec-b"),
    ]
    assert reopened.first_at_or_after(b + 1) == b + 1000


def test_a_torn_tail_is_ignored(tmp_path: Path) -> None:
    buckets = TimerBuckets(tmp_path, 1000)
    buckets.append(0, TimerEntry(10, 1, b"whole"))
    buckets.append(0, TimerEntry(20, 2, b"torn-record"))
    buckets.close()
    path = next(p for p in tmp_path.rglob("*") if p.is_file())
    path.write_bytes(path.read_bytes()[:-4])
    assert TimerBuckets(tmp_path, 1000).read(0) == [TimerEntry(10, 1, b"whole")]


def test_delivered_buckets_are_deleted_with_their_hour_directory(tmp_path: Path) -> None:
    buckets = TimerBuckets(tmp_path, 1000)
    hour = 3_600_000
    for start in (1000, 2000, hour + 1000):
        buckets.append(start, TimerEntry(start, start, b"x"))
    assert buckets.delete_below(hour) == 2
    assert buckets.ids_between(0, 10 * hour) == [hour + 1000]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1"]
    assert buckets.read(1000) == []
