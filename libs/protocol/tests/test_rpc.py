"""The blocking request client against a real ROUTER peer on 127.0.0.1: replies matched by id,
notices and garbled answers passed over, an immediate socket that refuses to queue, and waits
that end on their deadline or when the caller says stop."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import zmq

from ferry.protocol.framing import ReplyEnvelope, RequestCodec
from ferry.protocol.messages import PingRequest, PongReply
from ferry.protocol.rpc import BlockingClient


class Peer:
    """A ROUTER that answers each request after a notice (id 0) and a garbled message, or
    stays silent."""

    def __init__(self, silent: bool = False) -> None:
        self.ctx: zmq.Context[Any] = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.linger = 0
        port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = f"tcp://127.0.0.1:{port}"
        self.silent = silent
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        codec = RequestCodec()
        while not self.stop.is_set():
            if not self.sock.poll(20):
                continue
            frames = self.sock.recv_multipart()
            routing, rest = frames[:1], frames[2:]
            env, _ = codec.decode_request(rest)
            if self.silent:
                continue
            self.sock.send_multipart(codec.reply_frames(routing, 0, PongReply("peer")))  # a notice
            self.sock.send_multipart([*routing, b"", b"garbage"])
            self.sock.send_multipart(codec.reply_frames(routing, env.id, PongReply("peer"), [b"p"]))

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.sock.close()
        self.ctx.term()


@pytest.fixture
def peer() -> Iterator[Peer]:
    p = Peer()
    yield p
    p.close()


@pytest.fixture
def silent() -> Iterator[Peer]:
    p = Peer(silent=True)
    yield p
    p.close()


def test_a_call_gets_its_own_reply_past_notices_and_garbage(peer: Peer) -> None:
    notices: list[ReplyEnvelope] = []
    with BlockingClient(peer.endpoint) as client:
        rid = client.send(PingRequest())
        answer = client.receive(rid, 5000, on_other=notices.append)
        assert answer is not None
        assert isinstance(answer[0], PongReply)
        assert [bytes(f) for f in answer[1]] == [b"p"]
        assert [n.id for n in notices] == [0]
        again = client.call(PingRequest(), 5000)  # the plain way, on the same socket
        assert again is not None and isinstance(again[0], PongReply)


def test_an_immediate_socket_sends_nothing_while_nobody_is_there() -> None:
    with zmq.Context() as ctx:
        probe = ctx.socket(zmq.ROUTER)
        port = probe.bind_to_random_port("tcp://127.0.0.1")
        probe.close(linger=0)  # a port nobody listens on now
        client = BlockingClient(f"tcp://127.0.0.1:{port}", ctx, immediate=True)
        with pytest.raises(zmq.Again):
            client.send(PingRequest(), flags=zmq.NOBLOCK)
        client.close()


def test_a_wait_ends_when_the_caller_says_stop_and_at_its_deadline(silent: Peer) -> None:
    with BlockingClient(silent.endpoint, slice_ms=20) as client:
        rid = client.send(PingRequest())
        asked: list[float] = []

        def keep_waiting() -> bool:
            asked.append(time.monotonic())
            return len(asked) < 3

        started = time.monotonic()
        assert client.receive(rid, 60_000, keep_waiting=keep_waiting) is None
        assert len(asked) == 3  # asked once a slice, and stopped when told
        assert time.monotonic() - started < 10
        started = time.monotonic()
        assert client.call(PingRequest(), 150) is None
        took = time.monotonic() - started
        assert 0.15 <= took < 5
