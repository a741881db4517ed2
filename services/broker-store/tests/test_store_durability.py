"""The broker-store process under flush modes, retention, a full disk and restarts, spoken to
over its real sockets (started by the launcher; kill -9 is ServiceProcess.kill)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import zmq

from ferry.protocol import record
from ferry.protocol.codes import PullStatus, ResponseCode, SendStatus
from ferry.protocol.framing import RequestCodec, RequestEnvelope
from ferry.protocol.messages import (
    DeleteExpiredCommitLogRequest,
    DispatchNotice,
    ErrorReply,
    OffsetReply,
    OkReply,
    SearchOffsetByTimestampRequest,
    StoreGetReply,
    StoreGetRequest,
    StorePutReply,
    StorePutRequest,
    StoreReadLogReply,
    StoreReadLogRequest,
    StoreStatusReply,
    StoreStatusRequest,
    ViewMessageReply,
    ViewMessageRequest,
)
from ferry.runtime.launcher import ServiceProcess
from ferry.runtime.offset_names import file_name
from ferry.runtime.testing import store as testing_store
from ferry.runtime.testing.pytest_support import RawClient, wait_for

pytestmark = pytest.mark.integration

SEGMENT = 65536


def start_store(root: Path, **settings: str) -> ServiceProcess:
    return testing_store.start_store(root, **{"mappedFileSizeCommitLog": str(SEGMENT), **settings})


def records(topic: str, bodies: list[bytes]) -> bytes:
    return b"".join(record.encode_record(topic.encode(), b, b"") for b in bodies)


def put(client: RawClient, topic: str, queue_id: int, bodies: list[bytes]) -> Any:
    body, _ = client.call(StorePutRequest(topic, queue_id, len(bodies)), [records(topic, bodies)])
    return body


def status(client: RawClient) -> StoreStatusReply:
    body, _ = client.call(StoreStatusRequest())
    assert isinstance(body, StoreStatusReply)
    return body


def read_all_log(client: RawClient, start: int = 0) -> list[record.Record]:
    out: list[record.Record] = []
    offset = start
    while True:
        body, payload = client.call(StoreReadLogRequest(offset, 64 * 1024))
        assert isinstance(body, StoreReadLogReply)
        out += record.iter_records(payload[0])
        if body.next_offset == body.max_offset:
            return out
        offset = body.next_offset


@pytest.fixture
def stores() -> Iterator[list[ServiceProcess]]:
    started: list[ServiceProcess] = []
    yield started
    for sp in started:
        sp.stop()


@pytest.fixture
def clients() -> Iterator[list[RawClient]]:
    opened: list[RawClient] = []
    yield opened
    for c in opened:
        c.close()


def test_pipelined_sync_puts_share_fsyncs_and_are_acked_only_once_durable(
    tmp_path: Path, stores: list[ServiceProcess]
) -> None:
    sp = start_store(tmp_path / "s", flushDiskType="SYNC_FLUSH")
    stores.append(sp)
    ctx: zmq.Context[Any] = zmq.Context()
    codec = RequestCodec()
    socks = [ctx.socket(zmq.DEALER) for _ in range(8)]
    try:
        for sock in socks:
            sock.linger = 0
            sock.connect(sp.endpoints["endpoint"])
        ids = itertools.count(1)
        payload = records("Group", [b"g" * 200] * 4)
        per_sock = 25
        for _ in range(per_sock):  # every sender keeps 25 puts in flight
            for sock in socks:
                env = RequestEnvelope(next(ids), StorePutRequest("Group", 0, 4))
                sock.send_multipart(codec.request_frames(env, [payload]))
        poller = zmq.Poller()
        for sock in socks:
            poller.register(sock, zmq.POLLIN)
        replies: list[StorePutReply] = []
        deadline = time.monotonic() + 30
        while len(replies) < per_sock * len(socks):
            assert time.monotonic() < deadline, f"only {len(replies)} replies"
            for sock, _ in poller.poll(1000):
                reply, _ = codec.decode_reply(sock.recv_multipart()[1:])
                assert isinstance(reply.body, StorePutReply), reply.body
                replies.append(reply.body)
        assert {r.status for r in replies} == {SendStatus.SEND_OK}
        offsets = sorted(r.queue_offset for r in replies)
        assert offsets == list(range(0, 4 * len(replies), 4))
    finally:
        ctx.destroy(linger=0)
    client = RawClient(sp.endpoints["endpoint"])
    try:
        st = status(client)
        assert st.flushed_offset == st.max_offset
        assert 1 <= st.log_syncs <= len(replies) // 2  # puts in flight together share fsyncs
    finally:
        client.close()


def test_each_acked_sync_put_is_already_on_disk(
    tmp_path: Path, stores: list[ServiceProcess], clients: list[RawClient]
) -> None:
    sp = start_store(tmp_path / "s", flushDiskType="SYNC_FLUSH")
    stores.append(sp)
    client = RawClient(sp.endpoints["endpoint"])
    clients.append(client)
    for i in range(5):
        sent = put(client, "Acked", 0, [b"a" * 300] * (i + 1))
        assert isinstance(sent, StorePutReply)
        assert sent.status == SendStatus.SEND_OK
        end = sent.phys_offsets[-1] + len(records("Acked", [b"a" * 300]))
        assert status(client).flushed_offset >= end


def test_a_sync_put_not_flushed_within_sync_flush_timeout_is_reported_but_kept(
    tmp_path: Path, stores: list[ServiceProcess], clients: list[RawClient]
) -> None:
    # syncFlushTimeout=0: no fsync can finish in no time, so every put is late
    sp = start_store(tmp_path / "s", flushDiskType="SYNC_FLUSH", syncFlushTimeout="0")
    stores.append(sp)
    client = RawClient(sp.endpoints["endpoint"])
    clients.append(client)
    sent = put(client, "Late", 0, [b"late-1", b"late-2"])
    assert isinstance(sent, StorePutReply)
    assert sent.status == SendStatus.FLUSH_DISK_TIMEOUT
    got, payload = client.call(StoreGetRequest("Late", 0, 0))
    assert isinstance(got, StoreGetReply)
    assert [r.body for r in record.iter_records(payload[0])] == [b"late-1", b"late-2"]
    wait_for(lambda: status(client).flushed_offset == status(client).max_offset, what="flush")


def test_queries_and_retention_on_request_over_the_socket(
    tmp_path: Path, stores: list[ServiceProcess], clients: list[RawClient]
) -> None:
    sp = start_store(tmp_path / "s", fileReservedTime="0", deleteWhen="")
    stores.append(sp)
    client = RawClient(sp.endpoints["endpoint"])
    clients.append(client)
    first = put(client, "Q", 0, [b"first"])
    assert isinstance(first, StorePutReply)
    view, payload = client.call(ViewMessageRequest(first.phys_offsets[0]))
    assert isinstance(view, ViewMessageReply)
    assert view.size == len(payload[0])
    assert next(record.iter_records(payload[0])).body == b"first"
    stored_ms = next(record.iter_records(payload[0])).store_timestamp
    found, _ = client.call(SearchOffsetByTimestampRequest("Q", 0, stored_ms))
    assert found == OffsetReply(0)
    later, _ = client.call(SearchOffsetByTimestampRequest("Q", 0, stored_ms + 3_600_000))
    assert later == OffsetReply(1)

    for _ in range(20):
        put(client, "Q", 0, [b"q" * 1000] * 10)
    wait_for(lambda: status(client).flushed_offset == status(client).max_offset, what="flush")
    done, _ = client.call(DeleteExpiredCommitLogRequest())
    assert isinstance(done, OkReply)
    st = status(client)
    assert st.min_offset > first.phys_offsets[0]
    gone, _ = client.call(ViewMessageRequest(first.phys_offsets[0]))
    assert isinstance(gone, ErrorReply)
    assert gone.code == ResponseCode.QUERY_NOT_FOUND
    moved, _ = client.call(StoreGetRequest("Q", 0, 0))
    assert isinstance(moved, StoreGetReply)
    assert moved.status == PullStatus.OFFSET_ILLEGAL
    assert moved.next_begin_offset == moved.min_offset > 0


def test_a_full_disk_refuses_puts_with_disk_full_and_still_serves_reads(
    tmp_path: Path, stores: list[ServiceProcess], clients: list[RawClient]
) -> None:
    root = tmp_path / "s"
    sp = start_store(root)
    client = RawClient(sp.endpoints["endpoint"])
    put(client, "Disk", 0, [b"before"])
    client.close()
    assert sp.stop() == 0

    sp = start_store(root, diskUsedRatioOverride="95")
    stores.append(sp)
    client = RawClient(sp.endpoints["endpoint"])
    clients.append(client)
    refused = put(client, "Disk", 0, [b"refused"])
    assert isinstance(refused, ErrorReply)
    assert (refused.code, refused.retriable) == (ResponseCode.DISK_FULL, True)
    assert status(client).disk_full
    got, payload = client.call(StoreGetRequest("Disk", 0, 0))
    assert isinstance(got, StoreGetReply)
    assert [r.body for r in record.iter_records(payload[0])] == [b"before"]


def test_above_max_used_ratio_old_segments_go_without_being_asked(
    tmp_path: Path, stores: list[ServiceProcess], clients: list[RawClient]
) -> None:
    hour = (time.localtime().tm_hour + 12) % 24  # not now: only the disk pressure deletes
    sp = start_store(tmp_path / "s", deleteWhen=f"{hour:02d}", diskUsedRatioOverride="80")
    stores.append(sp)
    client = RawClient(sp.endpoints["endpoint"])
    clients.append(client)
    for _ in range(20):
        reply = put(client, "Pressed", 0, [b"p" * 1000] * 10)
        assert isinstance(reply, StorePutReply)  # 80 % is below the 90 % write guard
    wait_for(lambda: status(client).min_offset > 0, timeout=20, what="retention under pressure")
    assert not status(client).disk_full


# ---- the dispatch feed across restarts ---------------------------------------------------


class Follower:
    """A dispatch subscriber: applies notices in order, catches up with StoreReadLog when a
    notice starts past what it has, and checks the store's recovered offset after restarts."""

    def __init__(self) -> None:
        self.ctx: zmq.Context[Any] = zmq.Context()
        self.applied = 0
        self.records: list[record.Record] = []
        self.sub: Any = None
        self.client: RawClient | None = None

    def connect(self, sp: ServiceProcess) -> None:
        if self.sub is not None:
            self.sub.close(linger=0)
        if self.client is not None:
            self.client.close()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.linger = 0
        self.sub.setsockopt(zmq.SUBSCRIBE, b"dispatch")
        self.sub.connect(sp.endpoints["feed"])
        self.client = RawClient(sp.endpoints["endpoint"])
        st = status(self.client)
        if self.applied > st.recovered_offset:  # what we applied past it is gone
            self.records = [r for r in self.records if r.phys_offset < st.recovered_offset]
            self.applied = st.recovered_offset

    def apply(self, start: int, stop: int, data: bytes) -> None:
        recs = list(record.iter_records(data))
        assert all(record.verify_crc(data, r.phys_offset - start, r.total_size) for r in recs)
        self.records += recs
        self.applied = stop

    def catch_up(self) -> None:
        assert self.client is not None
        while True:
            body, payload = self.client.call(StoreReadLogRequest(self.applied, 32 * 1024))
            assert isinstance(body, StoreReadLogReply)
            if body.next_offset == body.from_offset:
                return
            self.apply(body.from_offset, body.next_offset, payload[0])

    def drain(self, until: int) -> None:
        deadline = time.monotonic() + 10
        while self.applied < until:
            assert time.monotonic() < deadline, "the feed and catch-up did not reach the end"
            if not self.sub.poll(200):
                self.catch_up()  # a quiet feed may have dropped notices (or never joined)
                continue
            _, raw, data = self.sub.recv_multipart()
            notice = msgspec.msgpack.decode(raw, type=DispatchNotice)
            if notice.from_offset > self.applied:
                self.catch_up()  # missed notices
            if notice.from_offset == self.applied:
                self.apply(notice.from_offset, notice.next_offset, data)

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
        self.ctx.destroy(linger=0)


def assert_follows_the_log(follower: Follower, client: RawClient) -> None:
    log_records = read_all_log(client)
    assert [(r.phys_offset, r.body) for r in follower.records] == [
        (r.phys_offset, r.body) for r in log_records
    ]
    assert follower.applied == status(client).max_offset


def test_a_subscriber_gets_exactly_the_records_it_missed_across_a_kill(
    tmp_path: Path, stores: list[ServiceProcess], clients: list[RawClient]
) -> None:
    root = tmp_path / "s"
    sp = start_store(root)
    client = RawClient(sp.endpoints["endpoint"])
    follower = Follower()
    try:
        follower.connect(sp)
        for i in range(10):
            put(client, "Feed", i % 3, [f"seen-{i}".encode()] * 5)
        follower.drain(status(client).max_offset)
        seen = follower.applied
        for i in range(10):  # the subscriber is not listening any more
            put(client, "Feed", i % 3, [f"missed-{i}".encode() * 100] * 5)
        client.close()
        sp.kill()

        sp = start_store(root)
        stores.append(sp)
        client = RawClient(sp.endpoints["endpoint"])
        clients.append(client)
        assert status(client).recovered_offset >= seen
        follower.connect(sp)
        assert follower.applied == seen
        for i in range(5):
            put(client, "Feed", i % 3, [f"after-{i}".encode()] * 5)
        follower.drain(status(client).max_offset)
        assert_follows_the_log(follower, client)
        bodies = [r.body for r in follower.records]
        assert len(bodies) == 125
        assert len({r.phys_offset for r in follower.records}) == 125
    finally:
        follower.close()


def test_a_subscriber_drops_what_it_applied_past_a_torn_tail(
    tmp_path: Path, stores: list[ServiceProcess], clients: list[RawClient]
) -> None:
    root = tmp_path / "s"
    sp = start_store(root, flushIntervalCommitLog="600000")  # no flush: no checkpoint
    client = RawClient(sp.endpoints["endpoint"])
    follower = Follower()
    try:
        follower.connect(sp)
        sent = [put(client, "Torn", 0, [f"r{i}".encode() * 50]) for i in range(20)]
        follower.drain(status(client).max_offset)
        client.close()
        sp.kill()
        torn_at = sent[15].phys_offsets[0]  # lost as by a power cut: the subscriber had it
        with (root / "commitlog" / file_name(0)).open("r+b") as f:
            f.seek(torn_at + 100)
            f.write(b"\x00" * 16)

        sp = start_store(root)
        stores.append(sp)
        client = RawClient(sp.endpoints["endpoint"])
        clients.append(client)
        assert status(client).recovered_offset == torn_at < follower.applied
        follower.connect(sp)
        assert follower.applied == torn_at
        put(client, "Torn", 0, [b"new tail"])
        follower.drain(status(client).max_offset)
        assert_follows_the_log(follower, client)
        assert [r.body for r in follower.records][-2:] == [b"r14" * 50, b"new tail"]
    finally:
        follower.close()
