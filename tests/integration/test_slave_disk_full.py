"""A slave whose disk fills while it replicates: the slave group's store on a 32 MiB tmpfs,
its master on the ordinary disk.

What must hold: at diskSpaceWarningLevelRatio the slave's store refuses the master's bytes
with a clear error (shown by haStatus, not taken for a diverged log), the slave does not fill
its disk further, it keeps serving reads of what it has, no process dies, and once space is
freed it catches up: every message the master acknowledged is on the slave, at the master's
offsets, in its ConsumeQueue.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from ha_support import HA_FAST, ha_status, store_status
from itest_support import RawClient, wait_for
from test_disk_full import Filler

from ferry.client import Message, Producer, SendResult, SendStatus
from ferry.protocol import record
from ferry.protocol.messages import (
    ConsumeQueueReply,
    QueryConsumeQueueRequest,
    ViewMessageReply,
    ViewMessageRequest,
)
from ferry.runtime.launcher import LocalCluster, add_slave_group, start_local_cluster
from ferry.runtime.testing.pytest_support import disk_fixture

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

DISK = 32 * 1024 * 1024
TOPIC = "SlaveDiskFull"
BODY = b"s" * 1000
SETTINGS = {
    **HA_FAST,
    "mappedFileSizeCommitLog": str(1024 * 1024),
    "mappedFileSizeConsumeQueue": str(20 * 10_000),
    "diskSpaceWarningLevelRatio": "90",
    "diskMaxUsedSpaceRatio": "95",  # retention deletes nothing below this
    "maxHashSlotNum": "1000",  # index files of 320 KiB rather than RocketMQ's 660 MB
    "maxIndexNum": "10000",
}

disk = disk_fixture(DISK)


@pytest.fixture
def groups(tmp_path: Path, disk: Path) -> Iterator[tuple[LocalCluster, LocalCluster]]:
    master = start_local_cluster(str(tmp_path / "master"), overrides=SETTINGS)
    try:
        slave = add_slave_group(master, str(disk / "broker-a-s"), overrides=SETTINGS)
    except BaseException:
        master.stop()
        raise
    try:
        yield master, slave
    finally:
        slave.stop()
        master.stop()


def send(producer: Producer, n: int, tag: str) -> list[SendResult]:
    acked = []
    for i in range(n):
        r = producer.send(Message(TOPIC, BODY, tags=tag, keys=[f"{tag}-{i}"]))
        assert r.status is SendStatus.SEND_OK
        acked.append(r)
    return acked


def on_the_slave(slave: LocalCluster, r: SendResult) -> bool:
    """The message is in the slave's ConsumeQueue at its queue offset and in its log at the
    master's physical offset."""
    _, phys = record.decode_offset_msg_id(r.offset_msg_id)
    client = RawClient(slave.broker_addr)
    try:
        req = QueryConsumeQueueRequest(TOPIC, r.queue.queue_id, r.queue_offset, 1)
        cq = client.call(req)[0]
        assert isinstance(cq, ConsumeQueueReply), cq
        if not cq.entries or cq.entries[0].commitlog_offset != phys:
            return False
        reply, payload = client.call(ViewMessageRequest(phys_offset=phys))
    finally:
        client.close()
    assert isinstance(reply, ViewMessageReply), reply
    rec = next(record.iter_records(bytes(payload[0])))
    return bool(rec.properties[record.PROPERTY_UNIQ_KEY] == r.msg_id)


def used_ratio(disk: Path) -> float:
    st = os.statvfs(disk)
    used = st.f_blocks - st.f_bfree
    return used / (used + st.f_bavail)


def test_a_slave_with_a_full_disk_refuses_replication_serves_reads_and_catches_up(
    groups: tuple[LocalCluster, LocalCluster], disk: Path
) -> None:
    master, slave = groups
    with Producer("slave-disk-p", master.namesrv_addr) as producer:
        before = send(producer, 100, "before")
        wait_for(
            lambda: store_status(slave).max_offset == store_status(master).max_offset,
            60,
            "the slave to catch up",
        )
        filler = Filler(disk)
        filler.used_ratio_at(0.93)  # above the slave's diskSpaceWarningLevelRatio of 90 %
        # the store measures its disk every second: sends before that would all get through
        wait_for(lambda: store_status(slave).disk_full, 10, "the slave's store to see its disk")
        during = send(producer, 300, "during")  # the master's disk has room: it acks them

        def refused() -> str:
            return ha_status(slave).store_refusal

        why = wait_for(refused, 30, "the slave to say its store refuses the master's bytes")
        assert "disk full" in why and "diskSpaceWarningLevelRatio" in why, why
        got = ha_status(slave)
        assert got.error == ""  # not a diverged log: the broker agent must not rebuild it
        assert store_status(slave).max_offset < store_status(master).max_offset
        assert used_ratio(disk) < 0.99  # it stopped at the guard, not at ENOSPC
        # reads go on: what the slave had is still served, by a slave that stays up
        assert all(on_the_slave(slave, r) for r in before)
        assert all(sp.alive for sp in slave.processes)

        filler.remove()
        wait_for(
            lambda: store_status(slave).max_offset == store_status(master).max_offset,
            60,
            "the slave to catch up once space is freed",
        )
        wait_for(lambda: not refused(), 10, "the refusal to clear")
    missing = [r.msg_id for r in before + during if not on_the_slave(slave, r)]
    assert not missing, f"{len(missing)} acknowledged messages not on the slave"
