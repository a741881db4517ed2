"""A broker whose disk really fills: the whole broker group on a 32 MiB tmpfs, SYNC_FLUSH and
1 MiB CommitLog segments, filled by a file the test owns.

What must hold: sends are refused with DiskFullError (first by the ratio guard above
diskSpaceWarningLevelRatio, then, with the guard set to 99%, by the disk itself when a new
segment finds no room), pulls and queries go on, no process dies (a write into an unallocated
page of a mapping would be a SIGBUS), the consumer offsets file keeps its last good content
while it cannot be rewritten, a delayed message due meanwhile waits, and once the test
deletes its file sends succeed again and every acknowledged message is read back at the
queue offset its send reported.
"""

from __future__ import annotations

import errno
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from itest_support import wait_for

from ferry.admin import Admin
from ferry.client import ConsumeFromWhere, Message, MessageExt, Producer, PullConsumer, SendStatus
from ferry.protocol.codes import ResponseCode
from ferry.protocol.errors import DiskFullError
from ferry.runtime.launcher import LocalCluster, start_broker_services, start_local_cluster
from ferry.runtime.testing.pytest_support import disk_fixture

pytestmark = pytest.mark.integration

DISK = 32 * 1024 * 1024
SEGMENT = 1024 * 1024
TOPIC = "DiskFull"
LATER = "DiskFullLater"  # a delayed message, due while nothing can be written
BODY = b"m" * 1000
SETTINGS = {
    "flushDiskType": "SYNC_FLUSH",
    "mappedFileSizeCommitLog": str(SEGMENT),
    "mappedFileSizeConsumeQueue": str(20 * 10_000),
    "diskSpaceWarningLevelRatio": "90",
    "diskMaxUsedSpaceRatio": "95",  # retention deletes nothing below this
    "flushConsumerOffsetInterval": "200",
    # index files of 320 KiB rather than RocketMQ's 660 MB
    "maxHashSlotNum": "1000",
    "maxIndexNum": "10000",
}


StartCluster = Callable[[Path, dict[str, str]], LocalCluster]


@pytest.fixture
def clusters() -> Iterator[StartCluster]:
    """Starts a name server and a broker group on a data dir; stops them after the test."""
    started: list[LocalCluster] = []

    def start(data_dir: Path, settings: dict[str, str]) -> LocalCluster:
        started.append(start_local_cluster(str(data_dir), overrides=settings))
        return started[-1]

    yield start
    for cluster in started:
        cluster.stop()


disk = disk_fixture(DISK)  # a tmpfs of DISK bytes at tmp_path/disk, or the test skipped


class Filler:
    """The test's own file on the disk, grown to leave a given number of bytes free."""

    def __init__(self, disk: Path) -> None:
        self.disk = disk
        self.path = disk / "filler"

    def leave(self, free: int) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            for _ in range(20):  # the broker's processes write too: measure again and retry
                st = os.statvfs(self.disk)
                grow = st.f_bavail * st.f_frsize - free
                if grow <= 0:
                    return
                try:
                    os.posix_fallocate(fd, os.fstat(fd).st_size, grow)
                    return
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
            pytest.fail(f"could not leave {free} bytes free on {self.disk}")
        finally:
            os.close(fd)

    def used_ratio_at(self, ratio: float) -> None:
        st = os.statvfs(self.disk)
        total = (st.f_blocks - st.f_bfree + st.f_bavail) * st.f_frsize
        self.leave(int(total * (1 - ratio)))

    def remove(self) -> None:
        self.path.unlink()


def alive(cluster: LocalCluster) -> list[str]:
    return sorted(sp.name for sp in cluster.processes if sp.alive)


def offsets_file(disk: Path) -> dict[str, dict[str, int]]:
    raw = json.loads((disk / "broker-a" / "config" / "consumerOffset.json").read_bytes())
    table: dict[str, dict[str, int]] = raw["offsetTable"]
    return table


def send_later(producer: Producer, msg: Message) -> bool:
    try:
        return producer.send(msg).status == SendStatus.SEND_OK
    except DiskFullError:
        return False


def test_a_full_disk_refuses_sends_serves_reads_and_loses_nothing_acknowledged(
    disk: Path, clusters: StartCluster
) -> None:
    cluster = clusters(disk, SETTINGS)
    names = alive(cluster)
    acked: dict[int, bytes] = {}  # queue offset -> body
    filler = Filler(disk)
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic(TOPIC, 1, 1)
        admin.create_topic(LATER, 1, 1)
    producer = Producer("pg-disk", cluster.namesrv_addr, retry_times=0)
    producer.start()

    def send(i: int) -> None:
        body = b"%05d-" % i + BODY
        result = producer.send(Message(TOPIC, body, keys=[f"k{i}"]))
        acked[result.queue_offset] = body

    def refused(i: int) -> DiskFullError | None:
        try:
            send(i)
        except DiskFullError as err:
            return err
        return None

    try:
        for i in range(200):
            send(i)

        # 1. above diskSpaceWarningLevelRatio (90%): refused by the guard, before the disk is full
        filler.used_ratio_at(0.92)
        started = time.monotonic()
        counter = iter(range(200, 100_000))
        guard = wait_for(lambda: refused(next(counter)), timeout=5, what="the ratio guard")
        guard_s = time.monotonic() - started
        assert guard.code == ResponseCode.DISK_FULL and guard.retriable
        assert "diskSpaceWarningLevelRatio 90%" in guard.message, guard.message
        assert "%" in guard.message.split("is ", 1)[1]  # how full it is
        reads_go_on(cluster, acked)

        # 2. the guard at 99% and less than a segment left: the disk itself refuses
        with Admin(cluster.namesrv_addr) as admin:
            admin.update_broker_config({"diskSpaceWarningLevelRatio": "99"})
        # due (10 s) once the disk is full: stored now, while the CommitLog still has room
        later = Message(LATER, b"due while the disk is full", delay_level=3)
        wait_for(lambda: send_later(producer, later), timeout=10, what="the delayed send")
        filler.leave(600 * 1024)
        nospace = wait_for(lambda: refused(next(counter)), timeout=30, what="ENOSPC")
        assert "no space left" in nospace.message and "CommitLog segment" in nospace.message, (
            nospace.message
        )
        in_first_segment = max(acked) + 1
        reads_go_on(cluster, acked)

        # 3. nothing at all left: metadata writes fail and keep their last good file
        with PullConsumer("cg-disk", cluster.namesrv_addr, ConsumeFromWhere.FIRST_OFFSET) as c:
            c.subscribe(TOPIC)
            got = drain(c, len(acked) // 2)
            c.commit()
            wait_for(lambda: offsets_file(disk), timeout=5, what="consumerOffset.json")
            before = offsets_file(disk)
            filler.leave(0)
            # the delayed message falls due about now: delivered before the disk filled, or
            # refused and delivered once space returns (checked at the end), never lost
            got += drain(c, len(acked) - len(got))
            c.commit()
            committed = max(m.queue_offset for m in got) + 1
            remoting = cluster.get("broker-remoting")
            wait_for(
                lambda: "_flush_offsets failed" in remoting.recent_output(),
                timeout=10,
                what="a failed rewrite of consumerOffset.json",
            )
            assert offsets_file(disk) == before  # still the last good content, parseable
            assert not (disk / "broker-a" / "config" / "consumerOffset.json.tmp").exists()
            assert refused(next(counter)) is not None
            assert alive(cluster) == names

        # 4. space comes back: sends succeed again, the offsets file catches up
        filler.remove()
        freed = time.monotonic()
        wait_for(lambda: refused(next(counter)) is None, timeout=5, what="sends to resume")
        resume_s = time.monotonic() - freed
        for _ in range(300):  # into a second segment: the roll that failed now succeeds
            send(next(counter))

        def offsets_saved() -> bool:
            table = offsets_file(disk)
            return any(committed in queues.values() for queues in table.values())

        wait_for(offsets_saved, timeout=5, what="consumerOffset.json rewritten")
        with PullConsumer("cg-later", cluster.namesrv_addr, ConsumeFromWhere.FIRST_OFFSET) as c:
            c.subscribe(LATER)
            assert [m.body for m in drain(c, 1)] == [b"due while the disk is full"]
        assert max(acked) + 1 > in_first_segment
        assert alive(cluster) == names
        reads_go_on(cluster, acked)
        with Admin(cluster.namesrv_addr) as admin:
            for offset in (0, in_first_segment - 1, max(acked)):  # before, at and after
                i = int(acked[offset].split(b"-", 1)[0])
                found = wait_for(
                    lambda i=i: admin.query_msg_by_key(TOPIC, f"k{i}"),
                    timeout=10,
                    what=f"key k{i} in the index",
                )
                assert [m.body for m in found] == [acked[offset]]
        print(
            f"\ndisk full figures: {len(acked)} acked, guard refused {guard_s:.2f}s after the "
            f"filler; sends resumed {resume_s:.3f}s after it was deleted"
        )
    finally:
        producer.shutdown()


def test_with_the_guard_off_the_disk_itself_refuses_and_the_index_lags_then_catches_up(
    disk: Path, clusters: StartCluster
) -> None:
    # diskUsedRatioOverride=0: the guard never refuses (nor does retention ever delete); the
    # store writes until it needs a block it cannot have. Index files of 500 messages whose
    # 20 KB of slots do not fit in what is left: the index needs a new file and cannot have it.
    settings = {
        **SETTINGS,
        "diskUsedRatioOverride": "0",
        "maxIndexNum": "1000",
        "maxHashSlotNum": "5000",
    }
    cluster = clusters(disk, settings)
    names = alive(cluster)
    acked: dict[int, bytes] = {}
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic(TOPIC, 1, 1)
        admin.create_topic("Later", 1, 1)
    producer = Producer("pg-disk", cluster.namesrv_addr, retry_times=0)
    producer.start()

    def send(i: int, topic: str = TOPIC) -> DiskFullError | None:
        body = b"%05d-" % i + BODY
        try:
            result = producer.send(Message(topic, body, keys=[f"k{i}"]))
        except DiskFullError as err:
            return err
        if topic == TOPIC:
            acked[result.queue_offset] = body
        return None

    try:
        for i in range(100):
            assert send(i) is None
        filler = Filler(disk)
        filler.leave(8 * 1024)  # a few more pages of the queue; not the index file's slots
        refused = None
        i = 100
        while refused is None:
            i += 1
            refused = send(i)
            assert i < 2000, "no refusal on a full disk"
        assert "no space left" in refused.message, refused.message
        assert "ConsumeQueue DiskFull/0" in refused.message, refused.message
        assert len(acked) > 520  # past the index's first file
        new_queue = send(i, "Later")  # its ConsumeQueue has no block reserved
        assert new_queue is not None and "ConsumeQueue Later/0" in new_queue.message
        assert alive(cluster) == names

        with Admin(cluster.namesrv_addr) as admin:
            early = admin.query_msg_by_key(TOPIC, "k50")
            assert [m.body for m in early] == [acked[50]]  # queries go on
            last = max(acked)
            last_key = f"k{int(acked[last].split(b'-', 1)[0])}"
            assert admin.query_msg_by_key(TOPIC, last_key) == []  # the index lags
            reads_go_on(cluster, acked)

            filler.remove()
            freed = time.monotonic()
            found = wait_for(
                lambda: admin.query_msg_by_key(TOPIC, last_key),
                timeout=10,
                what="the index to catch up",
            )
            catch_up_s = time.monotonic() - freed
            assert [m.body for m in found] == [acked[last]]
        assert send(i + 1, "Later") is None
        for j in range(i + 2, i + 50):
            assert send(j) is None
        assert alive(cluster) == names
        reads_go_on(cluster, acked)
        print(f"\nindex caught up {catch_up_s:.2f}s after space returned; {len(acked)} acked")
    finally:
        producer.shutdown()


def test_a_producer_sends_to_another_broker_while_one_disk_is_full(
    disk: Path, tmp_path: Path, clusters: StartCluster
) -> None:
    """DiskFullError is retriable: the retry goes to another broker, and with latency fault
    avoidance later sends stay away from the full one."""
    cluster = clusters(disk, SETTINGS)
    broker_a = cluster.broker_addr
    start_broker_services(
        cluster,
        str(tmp_path / "broker-b"),
        namesrv_addr=cluster.namesrv_addr,
        overrides={**SETTINGS, "brokerName": "broker-b"},
    )
    with Admin(cluster.namesrv_addr) as admin:
        wait_for(lambda: len(admin.master_addrs()) == 2, what="two brokers registered")
        admin.create_topic(TOPIC, 2, 2)
        Filler(disk).leave(0)

        def a_is_full() -> bool:
            info = admin.broker_runtime_info(broker_a)
            return float(info["commitLogDiskRatio"]) >= 0.9  # what the guard measured

        wait_for(a_is_full, timeout=5, what="broker-a's guard to see its disk full")
    # queues are taken in turn: every other send tries broker-a first, then retries
    for avoid in (False, True):
        producer = Producer(
            "pg-two", cluster.namesrv_addr, retry_times=2, send_latency_fault_enable=avoid
        )
        with producer:
            stored = [producer.send(Message(TOPIC, b"%d" % i)) for i in range(40)]
        assert {r.queue.broker_name for r in stored} == {"broker-b"}
    assert alive(cluster) == sorted(sp.name for sp in cluster.processes)


def drain(consumer: PullConsumer, count: int) -> list[MessageExt]:
    got: list[MessageExt] = []
    deadline = time.monotonic() + 20
    while len(got) < count:
        assert time.monotonic() < deadline, f"only {len(got)} of {count} messages"
        got.extend(consumer.poll(timeout=1.0))
    return got


def reads_go_on(cluster: LocalCluster, acked: dict[int, bytes]) -> None:
    """A new group reads every acknowledged message, each at its acknowledged offset."""
    group = f"cg-check-{len(acked)}"
    with PullConsumer(group, cluster.namesrv_addr, ConsumeFromWhere.FIRST_OFFSET) as c:
        c.subscribe(TOPIC)
        got = drain(c, len(acked))
    assert {m.queue_offset: m.body for m in got} == acked
    assert sorted(acked) == list(range(len(acked)))
