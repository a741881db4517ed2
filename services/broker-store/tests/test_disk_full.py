"""A store on a really full disk: a small tmpfs, filled by a file the test owns.

Every write the store makes through a mapping must have its blocks allocated first: on a full
tmpfs a store into an unallocated page of a mapping is a SIGBUS, which would kill this test
process, not fail an assertion. So these tests pass only when the store refuses cleanly.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ferry.protocol import record
from ferry.protocol.codes import PullStatus
from ferry.protocol.errors import DiskFullError
from ferry.runtime.testing.pytest_support import disk_fixture
from ferry.store.store import MessageStore

MakeBatch = Callable[..., bytes]
MakeConfig = Callable[..., Any]
DISK = 4 * 1024 * 1024
BODY = b"d" * 900


disk = disk_fixture(DISK)  # a tmpfs of DISK bytes at tmp_path/disk, or the test skipped


def fill(disk: Path, leave: int) -> Path:
    """A file taking all the free space of `disk` but `leave` bytes."""
    st = os.statvfs(disk)
    free = st.f_bavail * st.f_frsize
    filler = disk / "filler"
    fd = os.open(filler, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if free > leave:
            os.posix_fallocate(fd, 0, free - leave)
    finally:
        os.close(fd)
    return filler


def put_until_refused(
    store: MessageStore, batch: MakeBatch, topic: str
) -> tuple[list[bytes], DiskFullError]:
    """Puts one message at a time until the store refuses: (what it took, the refusal)."""
    stored: list[bytes] = []
    for i in range(10_000):
        body = b"%d-" % i + BODY
        try:
            store.put(topic, 0, 1, batch(topic, [body]))
        except DiskFullError as refused:
            return stored, refused
        stored.append(body)
    pytest.fail(f"10000 puts on a {DISK} byte disk and none refused")


def bodies(store: MessageStore, topic: str) -> list[bytes]:
    out: list[bytes] = []
    offset = 0
    while True:
        got = store.get(topic, 0, offset, max_msgs=1000)
        if got.status != PullStatus.FOUND:
            return out
        out.extend(r.body for r in record.iter_records(bytes(got.payload)))
        offset = got.next_begin_offset


def test_no_room_for_a_segment_refuses_puts_keeps_reads_and_resumes(
    disk: Path, make_config: MakeConfig, batch: MakeBatch
) -> None:
    # the ratio guard is set out of the way: the disk itself runs out here
    config = make_config(store_path_root_dir=str(disk / "store"), disk_space_warning_level_ratio=99)
    acked: list[bytes] = []
    with MessageStore.open(config) as store:
        store.put("Full", 0, 1, batch("Full", [b"first"]))  # the queue's first blocks
        acked.append(b"first")
        filler = fill(disk, 16 * 1024)  # less than a 64 KiB segment
        stored, refused = put_until_refused(store, batch, "Full")
        acked += stored
        assert "no space left" in refused.message
        assert "CommitLog segment" in refused.message
        assert refused.retriable
        end = store.log.end
        with pytest.raises(DiskFullError):  # and again: nothing of a refused put stays
            store.put("Full", 0, 1, batch("Full", [b"refused" + BODY]))
        assert store.log.end == end
        assert bodies(store, "Full") == acked  # reads go on

        filler.unlink()
        store.put("Full", 0, 1, batch("Full", [b"after"]))
        acked.append(b"after")
        store.flush()
    with MessageStore.open(config) as store:
        assert bodies(store, "Full") == acked
        assert store.queue_stats("Full", [0])[0].max_offset == len(acked)


def test_no_room_for_a_queue_file_refuses_before_the_log_is_written(
    disk: Path, make_config: MakeConfig, batch: MakeBatch
) -> None:
    config = make_config(store_path_root_dir=str(disk / "store"), disk_space_warning_level_ratio=99)
    with MessageStore.open(config) as store:
        store.put("Old", 0, 1, batch("Old", [b"old"]))
        filler = fill(disk, 0)
        end = store.log.end
        with pytest.raises(DiskFullError) as refused:
            store.put("New", 0, 1, batch("New", [b"x"]))  # its ConsumeQueue needs a block
        assert "ConsumeQueue New/0" in refused.value.message
        assert store.log.end == end
        assert bodies(store, "Old") == [b"old"]
        filler.unlink()
        assert store.put("New", 0, 1, batch("New", [b"x"])).queue_offset == 0
        assert store.put("Old", 0, 1, batch("Old", [b"again"])).queue_offset == 1


def test_a_file_reserved_for_a_refused_put_is_dropped_at_the_next_start(
    disk: Path, make_config: MakeConfig, batch: MakeBatch
) -> None:
    # 50 entries per queue file: a batch of 10 after 45 entries needs the next file
    config = make_config(store_path_root_dir=str(disk / "store"), disk_space_warning_level_ratio=99)
    with MessageStore.open(config) as store:
        store.put("Span", 0, 45, batch("Span", [b"a"] * 45))
        store.put("Pad", 0, 1, batch("Pad", [BODY * 60]))  # close to a segment's end
        fill(disk, 8 * 1024)
        with pytest.raises(DiskFullError):
            store.put("Span", 0, 10, batch("Span", [BODY] * 10))  # no room for the segment
        assert store.queue_stats("Span", [0])[0].max_offset == 45
        store.flush()
    with MessageStore.open(config) as store:
        assert store.queue_stats("Span", [0])[0].max_offset == 45
        assert bodies(store, "Span") == [b"a"] * 45


def test_the_ratio_guard_refuses_the_stores_own_writes_before_the_disk_is_full(
    disk: Path, make_config: MakeConfig, batch: MakeBatch
) -> None:
    config = make_config(store_path_root_dir=str(disk / "store"), disk_space_warning_level_ratio=60)
    with MessageStore.open(config) as store:
        _, refused = put_until_refused(store, batch, "Guard")
        assert "diskSpaceWarningLevelRatio 60%" in refused.message
        ratio = store.status().disk_used_ratio
        assert 0.6 <= ratio < 0.8, ratio  # refused early: a quarter of the headroom late at most
        st = os.statvfs(disk)
        assert st.f_bavail * st.f_frsize > 512 * 1024


def test_a_store_killed_on_a_full_disk_restores_its_queue_entries_in_their_pages(
    disk: Path, make_config: MakeConfig, batch: MakeBatch, crash: Callable[[MessageStore], None]
) -> None:
    # queue files of 1000 entries: the last entries lie near a page's end, and the usual
    # reservation ahead would ask for the next page, which a full disk does not have
    config = make_config(
        store_path_root_dir=str(disk / "store"),
        mapped_file_size_consume_queue=20 * 1000,
        disk_space_warning_level_ratio=99,
    )
    store = MessageStore.open(config)
    store.put("Kill", 0, 200, batch("Kill", [b"k"] * 200))
    queue_file = store.queues.queues[("Kill", 0)].files[0].path
    crash(store)
    fd = os.open(queue_file, os.O_WRONLY)
    try:
        os.pwrite(fd, bytes(5 * 20), 195 * 20)  # the last 5 entries never reached the file
    finally:
        os.close(fd)
    fill(disk, 0)
    with MessageStore.open(config) as store:
        assert store.recovery is not None and store.recovery.redispatched == 5
        assert bodies(store, "Kill") == [b"k"] * 200
