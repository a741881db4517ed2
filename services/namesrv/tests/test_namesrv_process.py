"""The real name server process, spoken to over a ZeroMQ DEALER as brokers and clients do."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
import pytest
import zmq

from ferry.namesrv.__main__ import main
from ferry.protocol.codes import ResponseCode
from ferry.protocol.framing import RequestCodec, RequestEnvelope
from ferry.protocol.messages import (
    ClusterInfoReply,
    ErrorReply,
    GetAllTopicListRequest,
    GetClusterInfoRequest,
    GetRouteInfoRequest,
    OkReply,
    PingRequest,
    PongReply,
    RegisterBrokerReply,
    RegisterBrokerRequest,
    Reply,
    RouteInfoReply,
    SendMessageRequest,
    TopicConfig,
    TopicListReply,
    UnregisterBrokerRequest,
)
from ferry.protocol.version import PROTOCOL_ID
from ferry.runtime.launcher import ServiceProcess, start_service

pytestmark = pytest.mark.integration

REPLY_TIMEOUT_MS = 5000


class Client:
    def __init__(self, ctx: zmq.Context[Any], addr: str) -> None:
        self.codec = RequestCodec()
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.linger = 0
        self.sock.connect(f"tcp://{addr}")
        self._ids = itertools.count(1)

    def request(self, body: Any) -> Reply:
        rid = next(self._ids)
        reply_id, reply = self.send_raw(self.codec.request_frames(RequestEnvelope(rid, body)))
        assert reply_id == rid
        return reply

    def send_raw(self, frames: list[Any]) -> tuple[int, Reply]:
        self.sock.send_multipart(frames)
        assert self.sock.poll(REPLY_TIMEOUT_MS), "no reply from namesrv"
        reply_frames = self.sock.recv_multipart()
        assert reply_frames[0] == b""
        env, _ = self.codec.decode_reply(reply_frames[1:])
        return env.id, env.body


@pytest.fixture(scope="module")
def namesrv() -> Iterator[ServiceProcess]:
    sp = start_service(
        "namesrv", ["--set", "listenPort=0", "--set", "scanNotActiveBrokerInterval=100"]
    )
    try:
        yield sp
    finally:
        sp.stop()


@pytest.fixture
def client(namesrv: ServiceProcess) -> Iterator[Client]:
    ctx: zmq.Context[Any] = zmq.Context()
    try:
        yield Client(ctx, namesrv.endpoints["addr"])
    finally:
        ctx.destroy(linger=0)


def wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)  # wait-ok: pacing between checks


def log_lines(sp: ServiceProcess, text: str) -> list[str]:
    return [line for line in list(sp.output) if text in line]


def registration(
    broker_name: str, topic: str, *, broker_id: int = 0, addr: str = "127.0.0.1:10911", **kw: Any
) -> RegisterBrokerRequest:
    return RegisterBrokerRequest(
        cluster="DefaultCluster",
        broker_name=broker_name,
        broker_id=broker_id,
        broker_addr=addr,
        topics={topic: TopicConfig(topic, read_queue_nums=4, write_queue_nums=4)},
        **kw,
    )


def test_ready_line_reports_the_bound_host_and_port(namesrv: ServiceProcess) -> None:
    host, _, port = namesrv.endpoints["addr"].rpartition(":")
    assert host == "127.0.0.1"
    assert port.isdigit()
    assert int(port) > 0


def test_registered_broker_is_routed_listed_and_slave_learns_master(
    namesrv: ServiceProcess, client: Client
) -> None:
    master = registration("live-a", "LiveTopic", ha_addr="127.0.0.1:10912")
    assert client.request(master) == RegisterBrokerReply()
    assert client.request(master) == RegisterBrokerReply()  # a heartbeat
    slave = registration("live-a", "LiveTopic", broker_id=1, addr="127.0.0.1:20911")
    assert client.request(slave) == RegisterBrokerReply("127.0.0.1:10911", "127.0.0.1:10912")

    route = client.request(GetRouteInfoRequest("LiveTopic"))
    assert isinstance(route, RouteInfoReply)
    assert [(q.broker_name, q.write_queue_nums) for q in route.route.queue_datas] == [("live-a", 4)]
    assert route.route.broker_datas[0].broker_addrs == {0: "127.0.0.1:10911", 1: "127.0.0.1:20911"}
    cluster = client.request(GetClusterInfoRequest())
    assert isinstance(cluster, ClusterInfoReply)
    assert "live-a" in cluster.clusters["DefaultCluster"]
    topics = client.request(GetAllTopicListRequest())
    assert isinstance(topics, TopicListReply)
    assert "LiveTopic" in topics.topics

    unregister = UnregisterBrokerRequest("DefaultCluster", "live-a", 0, "127.0.0.1:10911")
    assert client.request(unregister) == OkReply()
    unregister = UnregisterBrokerRequest("DefaultCluster", "live-a", 1, "127.0.0.1:20911")
    assert client.request(unregister) == OkReply()
    gone = client.request(GetRouteInfoRequest("LiveTopic"))
    assert gone == ErrorReply(
        ResponseCode.TOPIC_NOT_EXIST, "No route info of this topic: LiveTopic", retriable=True
    )
    # Logged once per broker, not per heartbeat; lines are written in order.
    wait_for(lambda: bool(log_lines(namesrv, "unregistered: live-a id 1")))
    assert len(log_lines(namesrv, "broker registered: live-a id 0")) == 1


def test_silent_broker_expires_and_its_route_disappears(
    namesrv: ServiceProcess, client: Client
) -> None:
    reply = client.request(registration("expiring-a", "ExpiringTopic", timeout_ms=300))
    assert isinstance(reply, RegisterBrokerReply)
    assert isinstance(client.request(GetRouteInfoRequest("ExpiringTopic")), RouteInfoReply)

    def route_gone() -> bool:
        reply = client.request(GetRouteInfoRequest("ExpiringTopic"))
        return isinstance(reply, ErrorReply) and reply.code == ResponseCode.TOPIC_NOT_EXIST

    wait_for(route_gone)
    cluster = client.request(GetClusterInfoRequest())
    assert isinstance(cluster, ClusterInfoReply)
    assert "expiring-a" not in cluster.brokers
    wait_for(lambda: bool(log_lines(namesrv, "expired (no registration within its timeout)")))


@pytest.mark.parametrize(
    ("frames", "code"),
    [
        pytest.param([b"garbage"], ResponseCode.BAD_FRAME, id="garbage"),
        pytest.param([b"", PROTOCOL_ID], ResponseCode.BAD_FRAME, id="truncated"),
        pytest.param(
            [b"", PROTOCOL_ID, b"\xc1not msgpack"], ResponseCode.BAD_FRAME, id="bad-header"
        ),
        pytest.param(
            [b"", PROTOCOL_ID, msgspec.msgpack.encode({"id": 7, "body": {"t": "no_such"}})],
            ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
            id="unknown-tag",
        ),
    ],
)
def test_bad_frames_get_typed_errors_and_service_keeps_answering(
    client: Client, frames: list[bytes], code: int
) -> None:
    _, reply = client.send_raw(frames)

    assert isinstance(reply, ErrorReply)
    assert reply.code == code
    assert isinstance(client.request(PingRequest()), PongReply)


@pytest.mark.parametrize(
    ("request_body", "code"),
    [
        pytest.param(
            registration("bad-a", "bad topic!"), ResponseCode.INVALID_PARAMETER, id="bad-topic"
        ),
        pytest.param(
            registration("bad-a", "T", addr="no-port"), ResponseCode.INVALID_PARAMETER, id="addr"
        ),
        pytest.param(
            registration("bad-a", "T", broker_id=-1), ResponseCode.INVALID_PARAMETER, id="id"
        ),
        pytest.param(registration("", "T"), ResponseCode.INVALID_PARAMETER, id="empty-name"),
        pytest.param(
            GetRouteInfoRequest("bad topic!"), ResponseCode.INVALID_PARAMETER, id="route-topic"
        ),
        pytest.param(
            SendMessageRequest("g", "T", 0),
            ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
            id="not-served",
        ),
    ],
)
def test_invalid_requests_get_typed_errors_and_service_keeps_answering(
    client: Client, request_body: Any, code: int
) -> None:
    reply = client.request(request_body)

    assert isinstance(reply, ErrorReply)
    assert reply.code == code
    assert isinstance(client.request(PingRequest()), PongReply)
    cluster = client.request(GetClusterInfoRequest())
    assert isinstance(cluster, ClusterInfoReply)
    assert "bad-a" not in cluster.brokers


@pytest.fixture
def restore_logging() -> Iterator[None]:
    # main() configures the root logger, as a process does; put pytest's back afterwards.
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


@pytest.mark.usefixtures("restore_logging")
@pytest.mark.parametrize(
    ("setting", "key"),
    [
        ("listenPort=abc", "listenPort"),
        ("listenPort=70000", "listenPort"),
        ("scanNotActiveBrokerInterval=0", "scanNotActiveBrokerInterval"),
    ],
)
def test_bad_config_value_exits_2_naming_the_key(
    capsys: pytest.CaptureFixture[str], setting: str, key: str
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--set", setting])

    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert key in err[0]
