"""Nothing a peer sends ends a service's loop: bad frames get typed errors, and whatever else
fails while one message is read drops that message with a throttled log line (issue 25)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
import zmq

from ferry.protocol.codes import ResponseCode
from ferry.protocol.framing import RequestCodec, RequestEnvelope
from ferry.protocol.messages import (
    ErrorReply,
    GetMaxOffsetRequest,
    OffsetReply,
    PingRequest,
    PongReply,
    PullMessageRequest,
)
from ferry.protocol.version import PROTOCOL_ID
from ferry.runtime.service import Call, Service
from ferry.runtime.throttled_log import ThrottledLog, ThrottleFilter

BAD_UTF8 = b"\xff\xfe\xfd"


class Client:
    def __init__(self, endpoint: str) -> None:
        self.ctx: zmq.Context[Any] = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.linger = 0
        self.sock.connect(endpoint)
        self.codec = RequestCodec()

    def send(self, frames: list[bytes]) -> None:
        self.sock.send_multipart(frames)

    def reply(self, timeout_ms: int = 5000) -> Any:
        assert self.sock.poll(timeout_ms), "no reply in time"
        env, _ = self.codec.decode_reply(self.sock.recv_multipart()[1:])
        return env

    def ping(self) -> None:
        self.send(self.codec.request_frames(RequestEnvelope(999, PingRequest())))
        env = self.reply()
        assert env.id == 999 and isinstance(env.body, PongReply)

    def close(self) -> None:
        self.sock.close()
        self.ctx.term()


@pytest.fixture
def running() -> Iterator[tuple[Service, Client, threading.Thread, zmq.Socket[Any]]]:
    service = Service("fragile")

    def max_offset(req: GetMaxOffsetRequest, _call: Call) -> Any:
        if req.topic == "unencodable":
            return OffsetReply(offset=object())  # type: ignore[arg-type]  # a handler bug
        return OffsetReply(offset=1)

    service.on(GetMaxOffsetRequest, max_offset)
    # a reader with a bug: it takes its message and raises
    pull = service.ctx.socket(zmq.PULL)
    pull_port = pull.bind_to_random_port("tcp://127.0.0.1")

    def broken_reader(sock: zmq.Socket[Any]) -> None:
        while sock.poll(0):
            sock.recv()
        raise ValueError("reader bug")

    service.add_reader(pull, broken_reader)
    failures = {"n": 0}

    def broken_after_poll() -> None:
        failures["n"] += 1
        if failures["n"] % 2:
            raise KeyError("after-poll bug")

    service.after_poll(broken_after_poll)
    endpoint = service.bind_router("tcp://127.0.0.1:0")
    thread = threading.Thread(target=service.run, kwargs={"handle_signals": False}, daemon=True)
    thread.start()
    client = Client(endpoint)
    push = client.ctx.socket(zmq.PUSH)
    push.linger = 0
    push.connect(f"tcp://127.0.0.1:{pull_port}")
    yield service, client, thread, push
    push.close()
    client.close()
    service.stop()
    thread.join(5)
    assert not thread.is_alive()


def test_reported_frame_invalid_utf8_in_header_string_is_answered(running: Any) -> None:
    _, client, thread, _ = running
    header = client.codec.encode(RequestEnvelope(41, PingRequest(), traceparent="abc"))
    client.send([b"", PROTOCOL_ID, header.replace(b"abc", BAD_UTF8)])
    env = client.reply()
    assert env.id == 41
    assert isinstance(env.body, ErrorReply)
    assert env.body.code == ResponseCode.INVALID_PARAMETER
    client.ping()
    assert thread.is_alive()


@pytest.mark.parametrize(
    "header",
    [
        RequestCodec()
        .encode(RequestEnvelope(7, PullMessageRequest("grp", "Top", 0, 0, 32)))
        .replace(b"Top", BAD_UTF8),
        msgspec.msgpack.encode({"id": 7, "body": {"t": "x"}}).replace(b"\xa1x", b"\xa1\xff"),
        b"\x91" * 100_000 + b"\x00",
        b"\xd7\xff" + b"\xff" * 8,
    ],
)
def test_more_undecodable_headers_are_typed_errors(running: Any, header: bytes) -> None:
    _, client, thread, _ = running
    client.send([b"", PROTOCOL_ID, header])
    env = client.reply()
    assert isinstance(env.body, ErrorReply)
    assert env.body.code in (ResponseCode.BAD_FRAME, ResponseCode.INVALID_PARAMETER)
    client.ping()
    assert thread.is_alive()


def test_a_bug_past_the_handler_drops_that_request_only(running: Any) -> None:
    service, client, thread, _ = running
    codec = client.codec
    client.send(codec.request_frames(RequestEnvelope(1, GetMaxOffsetRequest("unencodable", 0))))
    client.send(codec.request_frames(RequestEnvelope(2, GetMaxOffsetRequest("fine", 0))))
    env = client.reply()
    assert env.id == 2 and isinstance(env.body, OffsetReply)
    client.ping()
    assert thread.is_alive()
    assert service.bad_input.total >= 1


def test_a_reader_or_after_poll_step_that_raises_does_not_end_the_loop(running: Any) -> None:
    service, client, thread, push = running
    for i in range(1, 6):
        push.send(b"anything")
        deadline = time.monotonic() + 5
        while service.bad_input.total < i:  # the reader's failure was caught and counted
            assert time.monotonic() < deadline, "the reader never failed"
            time.sleep(0.01)  # wait-ok: polling interval of a deadline-bounded wait
        client.ping()
    assert thread.is_alive()


def test_an_undecodable_reply_from_a_peer_is_dropped_and_the_call_times_out() -> None:
    service = Service("caller")
    ctx: zmq.Context[Any] = zmq.Context()
    fake = ctx.socket(zmq.ROUTER)
    fake.linger = 0
    port = fake.bind_to_random_port("tcp://127.0.0.1")
    peer = service.connect_peer(f"tcp://127.0.0.1:{port}")
    got: list[Any] = []

    def on_reply(body: Any, _payload: list[Any]) -> None:
        got.append(body)
        service.stop()

    def answer_badly() -> None:
        if fake.poll(0):
            routing = fake.recv_multipart()[0]
            bad = RequestCodec().reply_frames([], 1, ErrorReply(code=1, message="abc"))[2]
            fake.send_multipart([routing, b"", PROTOCOL_ID, bad.replace(b"abc", BAD_UTF8)])

    service.every(0.01, answer_badly)
    peer.request(PingRequest(), on_reply, timeout_s=0.5)
    service.run(handle_signals=False)
    fake.close()
    ctx.term()
    assert len(got) == 1 and isinstance(got[0], ErrorReply)
    assert got[0].code == ResponseCode.RPC_TIME_OUT
    assert service.bad_input.total == 1


def test_throttled_log_lets_a_burst_through_then_counts(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("ferry.test.throttle")
    throttled = ThrottledLog(logger, interval_s=3600, burst=3)
    with caplog.at_level(logging.WARNING, logger="ferry.test.throttle"):
        for i in range(100):
            throttled.warning("bad frame %d", i)
    assert [r.getMessage() for r in caplog.records] == ["bad frame 0", "bad frame 1", "bad frame 2"]
    assert throttled.gate.suppressed == 97 and throttled.total == 100
    throttled.gate._window_start -= 3600  # the next interval
    with caplog.at_level(logging.WARNING, logger="ferry.test.throttle"):
        throttled.warning("bad frame %d", 100)
    assert caplog.records[-1].getMessage() == "bad frame 100 (97 more like it not logged)"


def test_throttle_filter_limits_only_the_named_lines(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("ferry.test.filter")
    gate = ThrottleFilter(("Invalid HTTP request",), interval_s=3600, burst=2)
    logger.addFilter(gate)
    try:
        with caplog.at_level(logging.WARNING, logger="ferry.test.filter"):
            for _ in range(50):
                logger.warning("Invalid HTTP request received.")
                logger.warning("something else")
    finally:
        logger.removeFilter(gate)
    messages = [r.getMessage() for r in caplog.records]
    assert messages.count("Invalid HTTP request received.") == 2
    assert messages.count("something else") == 50
