"""Raw log ranges for HA: a slave that appends what a master reads ends byte-identical, with
the same ConsumeQueues; bad ranges are refused before anything is written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ferry.protocol import record
from ferry.protocol.codes import PullStatus
from ferry.protocol.errors import IllegalStateError, InvalidParameterError
from ferry.store import replica
from ferry.store.store import MessageStore

MakeBatch = Callable[..., bytes]
MakeConfig = Callable[..., Any]
SEGMENT = 64 * 1024  # conftest's segment size


def replicate(master: MessageStore, slave: MessageStore, max_bytes: int = 8192) -> int:
    rounds = 0
    while slave.log.end < master.log.end:
        got = replica.read_raw(master.log, slave.log.end, max_bytes)
        assert len(got.data) == got.next_offset - got.from_offset
        replica.append_raw(slave, got.from_offset, bytes(got.data))
        assert slave.log.end == got.next_offset
        rounds += 1
    return rounds


def open_pair(make_config: MakeConfig, tmp_path: Path) -> tuple[MessageStore, MessageStore]:
    master = MessageStore.open(make_config())
    slave = MessageStore.open(
        make_config(store_path_root_dir=str(tmp_path / "slave"), broker_role="SLAVE")
    )
    return master, slave


def test_slave_log_is_byte_identical_across_segments_with_the_same_queues(
    make_config: MakeConfig, batch: MakeBatch, tmp_path: Path
) -> None:
    master, slave = open_pair(make_config, tmp_path)
    with master, slave:
        for i in range(60):  # ~3 segments of 64 KiB, blank tails included
            master.put("Orders", i % 3, 4, batch("Orders", [bytes([i]) * 900] * 4, tags="TagA"))
        assert len(master.log.segments) >= 3
        assert replicate(master, slave) > 3
        assert slave.log.end == master.log.end
        assert bytes(slave.log.slice(0, slave.log.end)) == bytes(
            master.log.slice(0, master.log.end)
        )
        for qid in range(3):
            want = master.get("Orders", qid, 0, max_msgs=1000, max_bytes=1 << 30)
            got = slave.get("Orders", qid, 0, max_msgs=1000, max_bytes=1 << 30)
            assert got.status == PullStatus.FOUND
            assert (got.count, got.max_offset) == (want.count, want.max_offset)
            assert bytes(got.payload) == bytes(want.payload)
        assert replica.digest(slave.log, 100, 5000) == replica.digest(master.log, 100, 5000)


def test_a_reopened_slave_resumes_at_its_own_end(
    make_config: MakeConfig, batch: MakeBatch, tmp_path: Path
) -> None:
    master, slave = open_pair(make_config, tmp_path)
    master.put("T", 0, 3, batch("T", [b"a" * 500] * 3))
    replicate(master, slave)
    slave.close()
    master.put("T", 0, 3, batch("T", [b"b" * 500] * 3))
    slave_cfg: dict[str, Any] = {"store_path_root_dir": str(tmp_path / "slave")}
    with master, MessageStore.open(make_config(**slave_cfg)) as again:
        assert again.log.end < master.log.end
        replicate(master, again)
        assert again.queues.get("T", 0) is not None
        assert again.get("T", 0, 0, max_msgs=10).count == 6


def test_a_range_that_does_not_start_at_the_slave_end_is_refused(
    make_config: MakeConfig, batch: MakeBatch, tmp_path: Path
) -> None:
    master, slave = open_pair(make_config, tmp_path)
    with master, slave:
        master.put("T", 0, 4, batch("T", [b"x" * 300] * 4))
        replicate(master, slave)
        master.put("T", 0, 1, batch("T", [b"y" * 300]))
        got = replica.read_raw(master.log, slave.log.end, 1 << 20)
        with pytest.raises(IllegalStateError):
            replica.append_raw(slave, got.from_offset + 1, bytes(got.data))


def test_a_corrupt_range_is_refused_and_nothing_is_written(
    make_config: MakeConfig, batch: MakeBatch, tmp_path: Path
) -> None:
    master, slave = open_pair(make_config, tmp_path)
    with master, slave:
        master.put("T", 0, 4, batch("T", [b"x" * 300] * 4))
        data = bytearray(replica.read_raw(master.log, 0, 1 << 20).data)
        data[len(data) - 10] ^= 0xFF  # inside the last record's properties
        with pytest.raises(InvalidParameterError, match="CRC"):
            replica.append_raw(slave, 0, bytes(data))
        assert slave.log.end == 0
        assert slave.queues.get("T", 0) is None


def test_an_empty_slave_starts_at_a_master_segment_start(
    make_config: MakeConfig, batch: MakeBatch, tmp_path: Path
) -> None:
    master, slave = open_pair(make_config, tmp_path)
    with master, slave:
        while len(master.log.segments) < 2:
            master.put("T", 0, 4, batch("T", [b"z" * 1000] * 4))
        start = master.log.segments[1].start
        assert start == SEGMENT
        replicate_from = replica.read_raw(master.log, start, 1 << 20)
        replica.append_raw(slave, start, bytes(replicate_from.data))
        assert slave.log.min_offset == start
        assert slave.log.end == replicate_from.next_offset
        first = next(record.iter_records(bytes(slave.log.view(start, slave.log.end))))
        assert first.phys_offset == start
