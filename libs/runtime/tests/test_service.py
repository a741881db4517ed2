"""The service loop, driven over real ZeroMQ sockets with a real client."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
import zmq

from ferry.protocol.codes import ResponseCode
from ferry.protocol.errors import TopicNotExistError
from ferry.protocol.framing import ReplyEnvelope, RequestCodec, RequestEnvelope
from ferry.protocol.messages import (
    ErrorReply,
    GetMaxOffsetRequest,
    GetRouteInfoRequest,
    OffsetReply,
    PingRequest,
    PongReply,
    StoreStatusRequest,
)
from ferry.protocol.version import PROTOCOL_ID
from ferry.runtime.service import Call, Service


class Harness:
    def __init__(self, service: Service, endpoint: str) -> None:
        self.service = service
        self.endpoint = endpoint
        self.ctx: zmq.Context[Any] = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.linger = 0
        self.sock.connect(endpoint)
        self.codec = RequestCodec()
        self.next_id = 0

    def send_raw(self, frames: list[bytes]) -> None:
        self.sock.send_multipart(frames)

    def recv(self, timeout_ms: int = 5000) -> tuple[ReplyEnvelope, list[bytes]]:
        assert self.sock.poll(timeout_ms), "no reply in time"
        frames = self.sock.recv_multipart()
        return self.codec.decode_reply(frames[1:])

    def call(self, body: Any, payload: list[bytes] | None = None) -> ReplyEnvelope:
        self.next_id += 1
        self.send_raw(self.codec.request_frames(RequestEnvelope(self.next_id, body), payload))
        env, _ = self.recv()
        assert env.id == self.next_id
        return env

    def close(self) -> None:
        self.sock.close()
        self.ctx.term()


@pytest.fixture
def harness() -> Iterator[Harness]:
    service = Service("test", max_deferred=2)
    held: list[Call] = []

    def max_offset(req: GetMaxOffsetRequest, _call: Call) -> OffsetReply:
        if req.topic == "missing":
            raise TopicNotExistError(f"No route info of this topic: {req.topic}")
        if req.topic == "crash":
            raise ValueError("boom")
        return OffsetReply(offset=req.queue_id * 10)

    def hold(_req: GetRouteInfoRequest, call: Call) -> None:
        held.append(call)

    service.on(GetMaxOffsetRequest, max_offset)
    service.on(GetRouteInfoRequest, hold)
    endpoint = service.bind_router("tcp://127.0.0.1:0")
    thread = threading.Thread(target=service.run, kwargs={"handle_signals": False}, daemon=True)
    thread.start()
    h = Harness(service, endpoint)
    yield h
    h.close()
    service.stop()
    thread.join(5)
    assert not thread.is_alive()


def test_port_zero_is_resolved_to_a_real_port(harness: Harness) -> None:
    assert harness.endpoint.startswith("tcp://127.0.0.1:")
    assert not harness.endpoint.endswith(":0")


def test_handler_reply_is_correlated(harness: Harness) -> None:
    env = harness.call(GetMaxOffsetRequest("T", 3))
    assert env.body == OffsetReply(30)
    assert isinstance(harness.call(PingRequest()).body, PongReply)


def test_typed_error_from_handler_reaches_client(harness: Harness) -> None:
    body = harness.call(GetMaxOffsetRequest("missing", 0)).body
    assert isinstance(body, ErrorReply)
    assert body.code == ResponseCode.TOPIC_NOT_EXIST
    assert body.retriable


def test_handler_crash_is_system_error_and_loop_survives(harness: Harness) -> None:
    body = harness.call(GetMaxOffsetRequest("crash", 0)).body
    assert isinstance(body, ErrorReply)
    assert body.code == ResponseCode.SYSTEM_ERROR
    assert "boom" in body.message
    assert harness.call(GetMaxOffsetRequest("T", 1)).body == OffsetReply(10)


def test_request_without_handler_is_not_supported(harness: Harness) -> None:
    body = harness.call(StoreStatusRequest()).body
    assert isinstance(body, ErrorReply)
    assert body.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED


@pytest.mark.parametrize(
    "frames",
    [
        [b"", b"garbage"],
        [b"", PROTOCOL_ID],
        [b"", PROTOCOL_ID, b"\xc1\xc1\xc1"],
        [b"no delimiter at all"],
        [b"", PROTOCOL_ID, msgspec.msgpack.encode({"id": "x", "body": 5})],
    ],
)
def test_garbage_gets_bad_frame_and_service_keeps_serving(
    harness: Harness, frames: list[bytes]
) -> None:
    harness.send_raw(frames)
    env, _ = harness.recv()
    assert isinstance(env.body, ErrorReply)
    assert env.body.code == ResponseCode.BAD_FRAME
    assert isinstance(harness.call(PingRequest()).body, PongReply)


def test_unknown_request_tag_is_not_supported(harness: Harness) -> None:
    harness.send_raw([b"", PROTOCOL_ID, msgspec.msgpack.encode({"id": 77, "body": {"t": "zap"}})])
    env, _ = harness.recv()
    assert env.id == 77
    assert isinstance(env.body, ErrorReply)
    assert env.body.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED


def test_overload_answers_system_busy_at_once(harness: Harness) -> None:
    codec = harness.codec
    for i in (1, 2):  # fill max_deferred=2 with held calls
        harness.send_raw(codec.request_frames(RequestEnvelope(i, GetRouteInfoRequest("T"))))
    harness.send_raw(codec.request_frames(RequestEnvelope(3, GetRouteInfoRequest("T"))))
    env, _ = harness.recv()
    assert env.id == 3
    assert isinstance(env.body, ErrorReply)
    assert env.body.code == ResponseCode.SYSTEM_BUSY
    assert env.body.retriable
    # pings are exempt so health checks still answer under load
    assert isinstance(harness.call(PingRequest()).body, PongReply)


def test_peer_request_times_out_with_rpc_time_out() -> None:
    service = Service("caller")
    silent: zmq.Socket[Any] = zmq.Context.instance().socket(zmq.ROUTER)
    silent.linger = 0
    port = silent.bind_to_random_port("tcp://127.0.0.1")
    peer = service.connect_peer(f"tcp://127.0.0.1:{port}")
    got: list[Any] = []

    def on_reply(body: Any, _payload: list[Any]) -> None:
        got.append(body)
        service.stop()

    peer.request(PingRequest(), on_reply, timeout_s=0.2)
    service.run(handle_signals=False)
    silent.close()
    assert len(got) == 1
    assert isinstance(got[0], ErrorReply)
    assert got[0].code == ResponseCode.RPC_TIME_OUT


def test_peer_that_is_down_fails_fast_without_blocking_the_loop() -> None:
    service = Service("caller")
    probe: zmq.Socket[Any] = zmq.Context.instance().socket(zmq.ROUTER)
    port = probe.bind_to_random_port("tcp://127.0.0.1")
    probe.close(linger=0)  # a port where nothing listens any more
    peer = service.connect_peer(f"tcp://127.0.0.1:{port}")
    got: list[Any] = []

    def on_reply(body: Any, _payload: list[Any]) -> None:
        got.append(body)
        if len(got) == 3000:
            service.stop()

    started = time.monotonic()
    for _ in range(3000):  # far more than the socket queue holds
        peer.request(PingRequest(), on_reply, timeout_s=0.5)
    assert time.monotonic() - started < 2.0  # never blocked
    service.run(handle_signals=False)
    assert len(got) == 3000
    assert all(isinstance(b, ErrorReply) for b in got)
    codes = [b.code for b in got]
    # the queued ones time out; the rest are refused at once
    assert set(codes) == {ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.RPC_TIME_OUT}
    assert codes.count(ResponseCode.SERVICE_NOT_AVAILABLE) >= 1000
