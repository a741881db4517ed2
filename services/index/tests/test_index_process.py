"""The index process following a real broker-store process over real sockets."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import pytest
import zmq

from ferry.index import follower as follower_module
from ferry.index.follower import LogFollower, connect_store
from ferry.index.index_store import Geometry, IndexStore
from ferry.index.keys import key_hash
from ferry.protocol import record
from ferry.protocol.codes import ResponseCode
from ferry.protocol.messages import (
    DispatchNotice,
    ErrorReply,
    IndexQueryReply,
    IndexQueryRequest,
    IndexRebuildRequest,
    IndexStatusReply,
    IndexStatusRequest,
    OkReply,
    PingRequest,
    StorePutReply,
    StorePutRequest,
    StoreStatusReply,
    StoreStatusRequest,
)
from ferry.runtime.launcher import ServiceProcess, start_service
from ferry.runtime.service import Service
from ferry.runtime.testing.pytest_support import RawClient, wait_for
from ferry.runtime.testing.store import start_store

pytestmark = pytest.mark.integration

# small files, so that indexes roll and deletions have something to delete
GEOMETRY = ["--set", "maxHashSlotNum=64", "--set", "maxIndexNum=300"]
STORE_SEGMENT = "1048576"
T = TypeVar("T")


class Group:
    """broker-store and the index on tmp_path, with clients to both."""

    def __init__(self, root: Path, *, records_on_feed: bool = False, index: bool = True) -> None:
        self.root = root
        self.records_on_feed = records_on_feed  # rather than read from the log files
        self.store = start_store(root, mappedFileSizeCommitLog=STORE_SEGMENT)
        self.store_client = RawClient(self.store.endpoints["endpoint"])
        self.index: ServiceProcess | None = None
        self.index_client: RawClient | None = None
        if index:
            self.start_index()

    def index_args(self) -> list[str]:
        return [
            "--set",
            f"storePathRootDir={self.root}",
            "--set",
            f"storeEndpoint={self.store.endpoints['endpoint']}",
            "--set",
            f"storeFeedEndpoint={self.store.endpoints['feed']}",
            "--set",
            "indexEndpoint=tcp://127.0.0.1:0",
            "--set",
            f"indexReadsCommitLog={str(not self.records_on_feed).lower()}",
            *GEOMETRY,
        ]

    def start_index(self) -> None:
        self.index = start_service("index", self.index_args())
        self.index_client = RawClient(self.index.endpoints["endpoint"])

    def stop_index(self, *, kill: bool = False) -> None:
        assert self.index is not None and self.index_client is not None
        self.index_client.close()
        if kill:
            self.index.kill()
        else:
            assert self.index.stop() == 0
        self.index = self.index_client = None

    def put(self, topic: str, keys: Sequence[Sequence[str]], *, body: bytes = b"b") -> list[int]:
        """One put of one record per entry of keys; each record also gets a UNIQ_KEY."""
        raw = b"".join(
            record.encode_record(
                topic.encode(),
                body,
                record.encode_properties(
                    {record.PROPERTY_KEYS: " ".join(k), record.PROPERTY_UNIQ_KEY: f"U-{k[0]}"}
                ),
            )
            for k in keys
        )
        reply, _ = self.store_client.call(
            StorePutRequest(topic=topic, queue_id=0, count=len(keys)), [raw]
        )
        assert isinstance(reply, StorePutReply), reply
        return list(reply.phys_offsets)

    def query(
        self, topic: str, key: str, *, unique: bool = False, max_num: int = 1000
    ) -> list[int]:
        assert self.index_client is not None
        reply, _ = self.index_client.call(
            IndexQueryRequest(topic=topic, key=key, unique=unique, max_num=max_num)
        )
        assert isinstance(reply, IndexQueryReply), reply
        return [h.phys_offset for h in reply.hits]

    def status(self) -> IndexStatusReply:
        assert self.index_client is not None
        reply, _ = self.index_client.call(IndexStatusRequest())
        assert isinstance(reply, IndexStatusReply), reply
        return reply

    def log_end(self) -> int:
        reply, _ = self.store_client.call(StoreStatusRequest())
        assert isinstance(reply, StoreStatusReply)
        return reply.max_offset

    def wait_caught_up(self, timeout: float = 30.0) -> IndexStatusReply:
        end = self.log_end()

        def caught_up() -> IndexStatusReply | None:
            s = self.status()
            return s if s.applied_offset >= end and not s.rebuilding else None

        return wait_for(caught_up, timeout, f"the index to reach CommitLog offset {end}")

    def close(self) -> None:
        if self.index is not None:
            self.stop_index()
        self.store_client.close()
        self.store.stop()


@pytest.fixture
def group(tmp_path: Path) -> Iterator[Group]:
    g = Group(tmp_path)
    try:
        yield g
    finally:
        g.close()


@pytest.fixture
def feed_group(tmp_path: Path) -> Iterator[Group]:
    """The index takes the records from the store's feed, not from the log files."""
    g = Group(tmp_path, records_on_feed=True)
    try:
        yield g
    finally:
        g.close()


@pytest.fixture
def store_only(tmp_path: Path) -> Iterator[Group]:
    """The store alone, for a LogFollower run in this process."""
    g = Group(tmp_path / "broker", index=False)
    try:
        yield g
    finally:
        g.close()


class InProcessFollower:
    """A LogFollower on its own Service loop (in a thread) reading the store of `group`."""

    def __init__(self, group: Group, directory: Path) -> None:
        self.service = Service("follower-test")
        self.store = connect_store(self.service, group.store.endpoints["endpoint"])
        self.index = IndexStore.open(directory, Geometry(64, 300))
        self.follower = LogFollower(self.service, self.store, self.index)
        self._thread = threading.Thread(
            target=self.service.run, kwargs={"handle_signals": False}, daemon=True
        )

    def connected(self) -> None:
        """Waits for one answer from the store (the connection is up), before the loop runs."""
        self.store.request(PingRequest(), lambda _body, _frames: None)
        # private: the answer waits in the socket, taken once the loop runs
        assert self.store._socket.poll(10_000), "the store did not answer a ping"

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self.service.stop()
        self._thread.join(10)
        self.index.close()


def test_notices_that_arrive_during_a_read_are_read_right_after_it(
    store_only: Group, tmp_path: Path
) -> None:
    """The log grows after the store answered a catch-up read: the follower reads again at
    once, without waiting for a status check (none runs here)."""
    first = store_only.put("T", [["a", "a1"], ["a", "a2"]])
    f = InProcessFollower(store_only, tmp_path / "index")
    try:
        f.follower.catch_up()
        # the answer (the log as it was) waits in the socket, not yet taken by the loop
        assert f.store._socket.poll(10_000), "no answer to the catch-up read"
        later = store_only.put("T", [["b", "b1"]])
        end = store_only.log_end()
        f.follower.on_notice(later[0], end, b"")  # comes while the read is under way
        assert f.follower.reading and f.index.applied < end
        f.start()
        # no status check runs here: without the second read this never comes
        wait_for(lambda: f.index.applied >= end, 20.0, f"the follower to reach {end}")
        wait_for(lambda: not f.follower.reading, 5.0, "the read to end")
        assert f.follower.reads == 2 and f.follower.caught_up

        def hits(key: str) -> list[int]:
            return sorted(h.phys_offset for h in f.index.query(key_hash("T", key), 0, 2**62, 9))

        assert hits("a") == first and hits("b") == later
    finally:
        f.close()


def test_a_read_held_by_a_killed_store_is_asked_again_of_its_restart(
    store_only: Group, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store dies holding a catch-up read: the follower asks its restart at once rather
    than waiting out the read's timeout."""
    # a read timeout far past the wait below: only asking again on the lost connection
    # catches up in time
    monkeypatch.setattr(follower_module, "READ_TIMEOUT_S", 120.0)
    store_only.put("T", [["a", "a1"]])
    end = store_only.log_end()
    endpoints = store_only.store.endpoints
    f = InProcessFollower(store_only, tmp_path / "index")
    try:
        f.connected()
        os.kill(store_only.store.pid, signal.SIGSTOP)  # takes the read and never answers
        asked = time.monotonic()
        f.follower.catch_up()
        f.start()
        store_only.store_client.close()
        store_only.store.kill()
        store_only.store = start_store(
            store_only.root,
            storeEndpoint=endpoints["endpoint"],
            storeFeedEndpoint=endpoints["feed"],
            mappedFileSizeCommitLog=STORE_SEGMENT,
        )
        store_only.store_client = RawClient(store_only.store.endpoints["endpoint"])
        wait_for(lambda: f.index.applied >= end, 30.0, f"the follower to reach {end}")
        print(f"caught up {time.monotonic() - asked:.2f} s after the read was asked")
    finally:
        f.close()


def test_the_index_reads_the_records_from_the_store_files_and_the_feed_carries_notices(
    group: Group,
) -> None:
    # A feed subscriber misses what is published before its subscription is live (ZeroMQ's
    # slow joiner) and catches up by asking the store instead: one put, caught up, first.
    group.put("T", [["k", "warm-up"]], body=b"w")
    group.wait_caught_up()
    body = b"r" * 50_000  # 1 MiB segments: the log rolls, so a notice starts at a blank tail
    offsets = [group.put("T", [["k", f"f{i}"]], body=body)[0] for i in range(60)]
    status = group.wait_caught_up()
    assert status.log_file_reads >= 1 and status.log_file_misses == 0
    assert group.log_end() > 2 * 1024 * 1024
    assert [group.query("T", f"f{i}") for i in range(60)] == [[o] for o in offsets]
    assert status.entries == 61 * 3


def test_notices_of_back_to_back_puts_are_read_from_the_files_as_one_range(group: Group) -> None:
    """Puts made while the index cannot run queue their notices: the next drain reads the
    adjacent ranges as one, instead of one read (and one commit) per put."""
    assert group.index is not None
    group.put("T", [["warm"]])
    before = group.wait_caught_up().log_file_reads
    os.kill(group.index.pid, signal.SIGSTOP)
    try:
        offsets = [group.put("T", [["k", f"c{i}"]])[0] for i in range(100)]
    finally:
        os.kill(group.index.pid, signal.SIGCONT)
    status = group.wait_caught_up()
    assert [group.query("T", f"c{i}") for i in range(100)] == [[o] for o in offsets]
    assert status.entries == 1 * 2 + 100 * 3  # each once
    assert status.log_file_misses == 0
    assert 1 <= status.log_file_reads - before <= 3, status.log_file_reads - before


def test_an_index_that_cannot_read_the_store_files_takes_the_records_from_the_feed(
    tmp_path: Path,
) -> None:
    """Its storePathRootDir has a commitlog directory, but not the store's: the first read
    misses, and from then on the records come on the feed (and the gap from the store)."""
    group = Group(tmp_path / "store")
    try:
        group.stop_index()
        (tmp_path / "elsewhere" / "commitlog").mkdir(parents=True)
        args = group.index_args()
        args[args.index(f"storePathRootDir={group.root}")] = (
            f"storePathRootDir={tmp_path / 'elsewhere'}"
        )
        group.index = start_service("index", args)
        group.index_client = RawClient(group.index.endpoints["endpoint"])
        group.wait_caught_up()
        first = [group.put("T", [["k", f"a{i}"]])[0] for i in range(20)]
        status = group.wait_caught_up()
        assert status.log_file_misses == 1 and status.log_file_reads == 0
        later = [group.put("T", [["k", f"b{i}"]])[0] for i in range(20)]
        group.wait_caught_up()
        assert group.query("T", "k") == (first + later)[::-1]
    finally:
        group.close()


def test_the_index_follows_the_feed_and_answers_key_and_unique_queries(group: Group) -> None:
    first = group.put("Orders", [["o1", "shared"], ["o2", "shared"]])
    second = group.put("Orders", [["o3", "shared"]])
    other = group.put("Refunds", [["o1"]])
    status = group.wait_caught_up()
    assert status.entries == 3 * 3 + 2  # each key, plus one UNIQ_KEY per record
    assert group.query("Orders", "shared") == (first + second)[::-1]
    assert group.query("Orders", "o2") == [first[1]]
    assert group.query("Refunds", "o1") == other
    assert group.query("Orders", "U-o3", unique=True) == second
    assert group.query("Orders", "U-o3") == []  # a unique id is not a business key
    assert group.query("Orders", "shared", max_num=2) == [second[0], first[1]]


def test_a_killed_index_catches_up_on_restart_and_indexes_each_record_once(
    group: Group,
) -> None:
    before = [group.put("T", [["k", f"a{i}"]])[0] for i in range(60)]
    group.wait_caught_up()
    group.stop_index(kill=True)
    during = [group.put("T", [["k", f"b{i}"]])[0] for i in range(60)]
    group.start_index()
    status = group.wait_caught_up()
    assert group.query("T", "k") == (before + during)[::-1]
    assert group.query("T", "b59") == [during[-1]]
    assert status.entries == 120 * 3
    assert status.files >= 2  # 300 entries a file: it rolled, and resumed across the roll


def test_notices_lost_while_the_index_stalls_are_read_back_from_the_log(
    feed_group: Group,
) -> None:
    group = feed_group  # notices that carry the records fill the feed's buffers soon
    assert group.index is not None
    body = b"x" * 8192  # notices carry the records: the feed's buffers fill up soon
    group.put("T", [["warm"]], body=body)
    group.wait_caught_up()
    os.kill(group.index.pid, signal.SIGSTOP)
    try:
        offsets = [group.put("T", [["k", f"n{i}"]], body=body)[0] for i in range(3000)]
    finally:
        os.kill(group.index.pid, signal.SIGCONT)
    status = group.wait_caught_up(timeout=60)
    assert group.query("T", "k") == offsets[::-1][:1000]  # max_num is at most 1000
    assert [group.query("T", f"n{i}") for i in range(3000)] == [[o] for o in offsets]
    assert status.entries == 1 * 2 + 3000 * 3  # nothing indexed twice
    # the lost notices were noticed: a later one started past the index, or the log grew
    # with none arriving
    lines = list(group.index.output)
    assert any("feed jumped" in ln or "with no notice" in ln for ln in lines), lines


def test_a_rebuild_from_the_commitlog_answers_as_the_live_index_did(group: Group) -> None:
    for i in range(40):
        group.put("T", [[f"k{i % 5}", f"own{i}"], [f"k{i % 3}"]])
    group.wait_caught_up()
    keys = [f"k{i}" for i in range(5)] + [f"own{i}" for i in range(40)]
    before = {k: group.query("T", k) for k in keys}
    files_before = group.status().files
    assert group.index_client is not None
    reply, _ = group.index_client.call(IndexRebuildRequest())
    assert isinstance(reply, OkReply)
    after_status = group.wait_caught_up()
    assert {k: group.query("T", k) for k in keys} == before
    assert after_status.files == files_before
    later = group.put("T", [["k1"]])
    group.wait_caught_up()
    assert group.query("T", "k1") == later + before["k1"]


def test_a_second_index_on_the_same_directory_exits_with_a_clear_error(group: Group) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ferry.index", *group.index_args()],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1
    assert "in use by another index process" in proc.stderr


@pytest.mark.parametrize(
    "bad",
    [
        IndexQueryRequest(topic="T", key=""),
        IndexQueryRequest(topic="bad topic!", key="k"),
        IndexQueryRequest(topic="T", key="k", max_num=0),
        IndexQueryRequest(topic="T", key="k", begin_ms=10, end_ms=5),
    ],
)
def test_bad_queries_are_refused_and_the_index_keeps_serving(
    group: Group, bad: IndexQueryRequest
) -> None:
    assert group.index_client is not None
    reply, _ = group.index_client.call(bad)
    assert isinstance(reply, ErrorReply)
    assert reply.code == ResponseCode.INVALID_PARAMETER
    offsets = group.put("T", [["ok"]])
    group.wait_caught_up()
    assert group.query("T", "ok") == offsets


def test_garbage_on_the_feed_or_the_socket_never_stops_the_index_nor_skips_records(
    tmp_path: Path,
) -> None:
    group = Group(tmp_path, records_on_feed=True)
    ctx: zmq.Context[Any] = zmq.Context()
    fake_feed = ctx.socket(zmq.PUB)
    fake_feed.linger = 0
    port = fake_feed.bind_to_random_port("tcp://127.0.0.1")
    try:
        group.stop_index()  # follow a feed the test writes, and the real store's log
        args = group.index_args()
        args[args.index(f"storeFeedEndpoint={group.store.endpoints['feed']}")] = (
            f"storeFeedEndpoint=tcp://127.0.0.1:{port}"
        )
        group.index = start_service("index", args)
        group.index_client = RawClient(group.index.endpoints["endpoint"])
        first = group.put("T", [["a"], ["b"]])
        status = group.wait_caught_up()  # no notice: the log grew, so it was read
        bogus = DispatchNotice(status.applied_offset, status.applied_offset + 200)
        notice = msgspec.msgpack.encode(bogus)
        index = group.index

        def publish(frames: list[bytes], refused: str) -> Callable[[], bool]:
            def attempt() -> bool:
                fake_feed.send_multipart([b"dispatch"])
                fake_feed.send_multipart([b"dispatch", b"\xc1 not msgpack", b""])
                fake_feed.send_multipart(frames)
                return any(refused in line for line in index.output)

            return attempt

        wait_for(publish([b"dispatch", notice, b"\x00" * 200], "do not decode"), 20, "a refusal")
        # a notice claiming bytes it does not carry
        wait_for(publish([b"dispatch", notice, b""], "a notice of 0 bytes"), 20, "a refusal")
        assert group.status().applied_offset == status.applied_offset  # nothing skipped
        later = group.put("T", [["a"]])
        group.wait_caught_up()
        assert group.query("T", "a") == later + first[:1]
        assert group.query("T", "b") == first[1:]

        raw = ctx.socket(zmq.DEALER)
        raw.linger = 0
        raw.connect(index.endpoints["endpoint"])
        raw.send_multipart([b"", b"\x00\x01garbage"])
        assert raw.poll(10_000)
        assert group.index_client is not None
        env, _ = group.index_client.codec.decode_reply(raw.recv_multipart()[1:])
        assert isinstance(env.body, ErrorReply)
        assert env.body.code == ResponseCode.BAD_FRAME
        assert group.query("T", "b") == first[1:]
        assert index.alive()
    finally:
        ctx.destroy(linger=0)
        group.close()
