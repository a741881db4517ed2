"""The broker-store process, started by the launcher and spoken to over real ZeroMQ sockets."""

from __future__ import annotations

import itertools
import subprocess
import sys
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
    AnyRequest,
    DispatchNotice,
    ErrorReply,
    GrantWriteLeaseRequest,
    OkReply,
    PingRequest,
    PongReply,
    Reply,
    StoreConfirmOffsetRequest,
    StoreGetReply,
    StoreGetRequest,
    StorePutReply,
    StorePutRequest,
    StoreQueueOffsetsReply,
    StoreQueueOffsetsRequest,
    StoreReadLogReply,
    StoreReadLogRequest,
    StoreStatusReply,
    StoreStatusRequest,
)
from ferry.protocol.version import PROTOCOL_ID
from ferry.runtime.config import BrokerConfig
from ferry.runtime.launcher import LaunchError, ServiceProcess, service_args, start_service
from ferry.runtime.testing.store import store_settings
from ferry.store.app import default_endpoints

pytestmark = pytest.mark.integration


def store_args(root: Path, *extra: str) -> list[str]:
    settings = store_settings(root, mappedFileSizeCommitLog="65536")
    return [*service_args(None, settings), *extra]


class Client:
    """A DEALER speaking the Ferry framing, every receive bounded by a poll timeout."""

    def __init__(self, ctx: zmq.Context[Any], endpoint: str) -> None:
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.linger = 0
        self.sock.connect(endpoint)
        self.codec = RequestCodec()
        self._ids = itertools.count(1)

    def close(self) -> None:
        self.sock.close(linger=0)

    def send(self, req: AnyRequest, payload: list[bytes] | None = None) -> int:
        rid = next(self._ids)
        self.sock.send_multipart(self.codec.request_frames(RequestEnvelope(rid, req), payload))
        return rid

    def recv(self, timeout: float = 10.0) -> tuple[int, Reply, list[bytes]]:
        if not self.sock.poll(int(timeout * 1000)):
            raise TimeoutError("no reply in time")
        frames = self.sock.recv_multipart()
        env, payload = self.codec.decode_reply(frames[1:])
        return env.id, env.body, payload

    def call(
        self, req: AnyRequest, payload: list[bytes] | None = None, timeout: float = 10.0
    ) -> tuple[Reply, list[bytes]]:
        rid = self.send(req, payload)
        got_id, body, frames = self.recv(timeout)
        assert got_id == rid
        return body, frames


@pytest.fixture
def zmq_ctx() -> Iterator[zmq.Context[Any]]:
    ctx: zmq.Context[Any] = zmq.Context()
    yield ctx
    ctx.destroy(linger=0)


@pytest.fixture
def store_proc(tmp_path: Path) -> Iterator[ServiceProcess]:
    sp = start_service("broker-store", store_args(tmp_path / "store"))
    yield sp
    sp.stop()


@pytest.fixture
def client(store_proc: ServiceProcess, zmq_ctx: zmq.Context[Any]) -> Iterator[Client]:
    c = Client(zmq_ctx, store_proc.endpoints["endpoint"])
    yield c
    c.close()


def records(topic: str, bodies: list[bytes], tags: str | None = None) -> bytes:
    props = {record.PROPERTY_TAGS: tags} if tags else {}
    return b"".join(
        record.encode_record(topic.encode(), b, record.encode_properties(props)) for b in bodies
    )


def put(client: Client, topic: str, queue_id: int, bodies: list[bytes]) -> StorePutReply:
    reply, _ = client.call(StorePutRequest(topic, queue_id, len(bodies)), [records(topic, bodies)])
    assert isinstance(reply, StorePutReply), reply
    return reply


def test_put_and_get_over_zeromq(client: Client) -> None:
    sent = put(client, "Wire", 2, [b"one", b"two", b"three"])
    assert sent.status == SendStatus.SEND_OK
    assert sent.queue_offset == 0
    assert len(sent.phys_offsets) == 3

    reply, payload = client.call(StoreGetRequest("Wire", 2, 1, max_msgs=10))
    assert isinstance(reply, StoreGetReply)
    assert (reply.status, reply.count, reply.next_begin_offset, reply.max_offset) == (
        PullStatus.FOUND,
        2,
        3,
        3,
    )
    assert len(payload) == 1
    recs = list(record.iter_records(payload[0]))
    assert [(r.body, r.queue_offset, r.queue_id) for r in recs] == [
        (b"two", 1, 2),
        (b"three", 2, 2),
    ]
    assert [r.phys_offset for r in recs] == sent.phys_offsets[1:]

    empty, frames = client.call(StoreGetRequest("Wire", 2, 3))
    assert isinstance(empty, StoreGetReply)
    assert (empty.status, frames) == (PullStatus.NO_NEW_MSG, [])


def test_a_get_asking_for_more_bytes_than_a_long_holds_is_served_as_a_large_one(
    client: Client,
) -> None:
    """max_bytes past any frame (a C size could not hold 2**63 - 1): read as the limit."""
    put(client, "HugeAsk", 0, [b"a", b"b"])
    for max_bytes in (2**63 - 1, 2**64 - 1):
        reply, payload = client.call(StoreGetRequest("HugeAsk", 0, 0, max_bytes=max_bytes))
        assert isinstance(reply, StoreGetReply), reply
        assert (reply.status, reply.count) == (PullStatus.FOUND, 2)
        assert [r.body for r in record.iter_records(payload[0])] == [b"a", b"b"]


def test_queue_offsets_read_log_and_status_over_zeromq(client: Client) -> None:
    put(client, "Stats", 0, [b"a"] * 4)
    offsets, _ = client.call(StoreQueueOffsetsRequest("Stats", [0, 1]))
    assert isinstance(offsets, StoreQueueOffsetsReply)
    assert [(q.queue_id, q.min_offset, q.max_offset) for q in offsets.queues] == [
        (0, 0, 4),
        (1, 0, 0),
    ]
    log_reply, payload = client.call(StoreReadLogRequest(0, 1 << 20))
    assert isinstance(log_reply, StoreReadLogReply)
    assert log_reply.next_offset == log_reply.max_offset == len(payload[0])
    assert [r.body for r in record.iter_records(payload[0])] == [b"a"] * 4
    status, _ = client.call(StoreStatusRequest())
    assert isinstance(status, StoreStatusReply)
    assert (status.max_offset, status.topics, status.queues) == (len(payload[0]), 1, 1)
    past, _ = client.call(StoreReadLogRequest(status.max_offset + 100))
    assert isinstance(past, ErrorReply)
    assert past.code == ResponseCode.INVALID_PARAMETER


def test_long_polled_get_is_answered_as_soon_as_a_put_arrives(client: Client) -> None:
    started = time.monotonic()
    get_id = client.send(StoreGetRequest("Poll", 0, 0, suspend_ms=20_000))
    with pytest.raises(TimeoutError):
        client.recv(timeout=0.3)  # held: nothing to answer yet
    put_id = client.send(StorePutRequest("Poll", 0, 1), [records("Poll", [b"arrived"])])
    replies: dict[int, tuple[Reply, list[bytes]]] = {}
    while len(replies) < 2:
        rid, body, payload = client.recv(timeout=5.0)
        replies[rid] = (body, payload)
    assert time.monotonic() - started < 5.0  # far less than the 20 s suspend
    body, payload = replies[get_id]
    assert isinstance(body, StoreGetReply)
    assert (body.status, body.count) == (PullStatus.FOUND, 1)
    assert next(record.iter_records(payload[0])).body == b"arrived"
    assert isinstance(replies[put_id][0], StorePutReply)


def test_long_polled_get_expires_with_no_new_msg(client: Client) -> None:
    started = time.monotonic()
    body, _ = client.call(StoreGetRequest("Quiet", 0, 0, suspend_ms=400), timeout=10.0)
    waited = time.monotonic() - started
    assert isinstance(body, StoreGetReply)
    assert body.status == PullStatus.NO_NEW_MSG
    assert 0.35 <= waited < 5.0


def test_feed_publishes_every_append_with_its_records(
    store_proc: ServiceProcess, client: Client, zmq_ctx: zmq.Context[Any]
) -> None:
    sub = zmq_ctx.socket(zmq.SUB)
    sub.linger = 0
    sub.setsockopt(zmq.SUBSCRIBE, b"dispatch")
    sub.connect(store_proc.endpoints["feed"])
    try:
        # A subscription takes a moment to reach the publisher: put until notices come.
        deadline = time.monotonic() + 10
        while not sub.poll(200):
            assert time.monotonic() < deadline, "no dispatch notice"
            put(client, "Warmup", 0, [b"w"])
        sent = put(client, "Feed", 1, [b"fed-1", b"fed-2"])
        while True:  # skip notices of the warm-up puts
            assert sub.poll(int(max(deadline - time.monotonic(), 0) * 1000)), "no notice"
            frames = sub.recv_multipart()
            notice = msgspec.msgpack.decode(frames[1], type=DispatchNotice)
            if notice.from_offset >= sent.phys_offsets[0]:
                break
        assert frames[0] == b"dispatch"
        assert notice.from_offset == sent.phys_offsets[0]
        assert notice.next_offset - notice.from_offset == len(frames[2])
        recs = list(record.iter_records(frames[2]))
        assert [(r.body, r.phys_offset, r.topic) for r in recs] == [
            (b"fed-1", sent.phys_offsets[0], "Feed"),
            (b"fed-2", sent.phys_offsets[1], "Feed"),
        ]
        log_reply, payload = client.call(StoreReadLogRequest(notice.from_offset, 1 << 20))
        assert isinstance(log_reply, StoreReadLogReply)
        assert payload[0] == frames[2]
    finally:
        sub.close(linger=0)


def test_bad_requests_get_typed_errors_and_the_service_keeps_serving(client: Client) -> None:
    codec = client.codec

    def raw(frames: list[bytes]) -> Reply:
        client.sock.send_multipart(frames)
        _, body, _ = client.recv()
        return body

    def code_of(body: Reply) -> int:
        assert isinstance(body, ErrorReply), body
        return body.code

    assert code_of(raw([b"", b"garbage"])) == ResponseCode.BAD_FRAME
    assert code_of(raw([b"", PROTOCOL_ID, b"\xc1\xc1"])) == ResponseCode.BAD_FRAME
    assert code_of(raw([b"", b"FERRY/9", b"x"])) == ResponseCode.VERSION_NOT_SUPPORTED
    unknown = codec.encode({"id": 5, "body": {"t": "no_such_request"}})
    assert code_of(raw([b"", PROTOCOL_ID, unknown])) == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    not_store = codec.encode({"id": 6, "body": {"t": "get_route", "topic": "T"}})
    assert code_of(raw([b"", PROTOCOL_ID, not_store])) == ResponseCode.REQUEST_CODE_NOT_SUPPORTED

    good = records("Bad", [b"1", b"2"])
    cases: list[tuple[AnyRequest, list[bytes] | None, int]] = [
        (StorePutRequest("Bad", 0, 2), [], ResponseCode.INVALID_PARAMETER),
        (StorePutRequest("Bad", 0, 2), [good, good], ResponseCode.INVALID_PARAMETER),
        (StorePutRequest("Bad", 0, 2), [good[:-10]], ResponseCode.MESSAGE_ILLEGAL),
        (StorePutRequest("Bad", 0, 3), [good], ResponseCode.MESSAGE_ILLEGAL),
        (StorePutRequest("Other", 0, 2), [good], ResponseCode.MESSAGE_ILLEGAL),
        (StorePutRequest("Bad", 0, 2), [b"\x00" * 500], ResponseCode.MESSAGE_ILLEGAL),
        (StorePutRequest("b a d", 0, 2), [good], ResponseCode.INVALID_PARAMETER),
        (StoreGetRequest("Bad", -1, 0), None, ResponseCode.INVALID_PARAMETER),
    ]
    for req, payload, expected in cases:
        body, _ = client.call(req, payload)
        assert code_of(body) == expected, (req, body)

    status, _ = client.call(StoreStatusRequest())
    assert isinstance(status, StoreStatusReply)
    assert status.max_offset == 0  # nothing bad was written
    pong, _ = client.call(PingRequest())
    assert isinstance(pong, PongReply)
    assert pong.service == "broker-store"
    assert put(client, "Bad", 0, [b"fine"]).queue_offset == 0


def test_a_second_store_on_the_same_directory_fails_to_start(
    store_proc: ServiceProcess, tmp_path: Path
) -> None:
    with pytest.raises(LaunchError, match="in use by another broker-store"):
        start_service("broker-store", store_args(tmp_path / "store"), ready_timeout=20)
    assert store_proc.alive()


def test_messages_survive_a_clean_stop_and_a_kill(
    tmp_path: Path, zmq_ctx: zmq.Context[Any]
) -> None:
    root = tmp_path / "store"
    sp = start_service("broker-store", store_args(root))
    clients: list[Client] = []

    def connect() -> Client:
        clients.append(Client(zmq_ctx, sp.endpoints["endpoint"]))
        return clients[-1]

    try:
        client = connect()
        put(client, "Durable", 0, [b"x" * 1000] * 50)
        put(client, "Durable", 0, [b"y" * 1000] * 50)
        assert sp.stop() == 0
        assert not (root / "abort").exists()

        sp = start_service("broker-store", store_args(root))
        client = connect()
        reply, payload = client.call(StoreGetRequest("Durable", 0, 0, max_msgs=1000))
        assert isinstance(reply, StoreGetReply)
        assert reply.count == 100
        put(client, "Durable", 0, [b"z"] * 3)
        sp.kill()
        assert (root / "abort").exists()

        sp = start_service("broker-store", store_args(root))
        client = connect()
        reply, payload = client.call(StoreGetRequest("Durable", 0, 0, max_msgs=1000))
        assert isinstance(reply, StoreGetReply)
        bodies = [r.body[:1] for r in record.iter_records(payload[0])]
        assert bodies == [b"x"] * 50 + [b"y"] * 50 + [b"z"] * 3
    finally:
        for c in clients:
            c.close()
        sp.stop()


def test_sync_flush_replies_once_the_log_is_on_disk(
    tmp_path: Path, zmq_ctx: zmq.Context[Any]
) -> None:
    sp = start_service(
        "broker-store", store_args(tmp_path / "store", "--set", "flushDiskType=SYNC_FLUSH")
    )
    client = Client(zmq_ctx, sp.endpoints["endpoint"])
    try:
        for _ in range(3):
            sent = put(client, "Sync", 0, [b"s" * 100] * 10)
            assert sent.status == SendStatus.SEND_OK
            status, _ = client.call(StoreStatusRequest())
            assert isinstance(status, StoreStatusReply)
            assert status.flushed_offset == status.max_offset
    finally:
        client.close()
        sp.stop()


def test_default_endpoints_are_ipc_sockets_in_the_run_directory(
    tmp_path: Path, zmq_ctx: zmq.Context[Any]
) -> None:
    root = tmp_path / "s"
    sp = start_service("broker-store", ["--set", f"storePathRootDir={root}"])
    client = Client(zmq_ctx, sp.endpoints["endpoint"])
    try:
        assert sp.endpoints["endpoint"] == f"ipc://{root.resolve()}/run/store.sock"
        assert sp.endpoints["feed"] == f"ipc://{root.resolve()}/run/feed.sock"
        pong, _ = client.call(PingRequest())
        assert isinstance(pong, PongReply)
    finally:
        client.close()
        sp.stop()


def test_long_store_paths_fall_back_to_tcp_endpoints(tmp_path: Path) -> None:
    config = BrokerConfig(store_path_root_dir=str(tmp_path / ("d" * 120)))
    assert default_endpoints(config) == ("tcp://127.0.0.1:0", "tcp://127.0.0.1:0")


def test_a_bad_config_value_is_one_clear_line_and_exit_code_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ferry.store",
            "--set",
            f"storePathRootDir={tmp_path}",
            "--set",
            "mappedFileSizeCommitLog=100",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "ferry-broker-store: mappedFileSizeCommitLog must be at least 65536 bytes"
    ]


def test_a_controller_mode_master_appends_only_under_its_write_lease(
    tmp_path: Path, zmq_ctx: zmq.Context[Any]
) -> None:
    """Issue 38: a master paused past its lease found a put in its socket when it resumed and
    stored it. The store checks the agent's lease itself, right before every append, whoever
    asks (remoting, the scheduler, the check-back)."""
    args = store_args(
        tmp_path / "store",
        "--set",
        "enableControllerMode=true",
        "--set",
        "brokerRole=SYNC_MASTER",
        "--set",
        "brokerId=1",
        "--set",
        "controllerAddr=127.0.0.1:9",  # never asked: the store only takes the agent's leases
    )
    sp = start_service("broker-store", args)
    c = Client(zmq_ctx, sp.endpoints["endpoint"])
    try:

        def put_one(body: bytes) -> Reply:
            reply, _ = c.call(StorePutRequest("Fenced", 0, 1), [records("Fenced", [body])])
            return reply

        refused = put_one(b"before any lease")
        assert isinstance(refused, ErrorReply), refused
        assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE and refused.retriable
        assert "no write lease" in refused.message
        granted, _ = c.call(GrantWriteLeaseRequest(time.monotonic() + 30, epoch=2))
        assert isinstance(granted, OkReply)
        assert isinstance(put_one(b"under the lease"), StorePutReply)
        # an older epoch's agent cannot extend it; a revocation (until 0) fences at once
        stale, _ = c.call(GrantWriteLeaseRequest(time.monotonic() + 30, epoch=1))
        assert isinstance(stale, ErrorReply)
        c.call(GrantWriteLeaseRequest(0.0, epoch=2))
        assert isinstance(put_one(b"after the revocation"), ErrorReply)
        c.call(GrantWriteLeaseRequest(time.monotonic() + 0.3, epoch=2))
        assert isinstance(put_one(b"short lease"), StorePutReply)
        time.sleep(0.4)  # wait-ok: the lease's own length is what is under test
        assert isinstance(put_one(b"lapsed"), ErrorReply)
        status, _ = c.call(StoreStatusRequest())
        assert isinstance(status, StoreStatusReply)
        # controller mode gates reads at the in-sync set's confirm offset: confirm it all
        c.call(StoreConfirmOffsetRequest(status.max_offset))
        got, _ = c.call(StoreGetRequest("Fenced", 0, 0))
        assert isinstance(got, StoreGetReply) and got.count == 2  # only the two under a lease
    finally:
        c.close()
        sp.stop()
