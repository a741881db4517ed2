"""The TCP door on a real Service loop (its own thread), driven by real TCP clients on
127.0.0.1 and, beside them, a ZeroMQ client of the same loop."""

from __future__ import annotations

import contextlib
import hashlib
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import zmq

from ferry.protocol.framing import RequestCodec, RequestEnvelope
from ferry.protocol.messages import PingRequest, PongReply
from ferry.runtime.service import Service
from ferry.runtime.tcp_door import MAX_FRAME_BYTES, Connection, TcpDoor
from ferry.runtime.testing.pytest_support import wait_for

PATTERN = bytes(range(256))
TIGHT_CAP = 1024 * 1024


def frame(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def pattern(size: int) -> bytes:
    return (PATTERN * (size // len(PATTERN) + 1))[:size]


@dataclass
class Server:
    service: Service
    door: TcpDoor  # echoes; cap of 64 MiB
    tight: TcpDoor  # output cap of 1 MiB, 2 connections at most
    router: str
    thread: threading.Thread
    closed: list[Connection] = field(default_factory=list)
    rounds: list[int] = field(default_factory=list)  # the loop round of each frame delivered
    inside_hold: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    timer_wrote_at_once: list[bool] = field(default_factory=list)


class Client:
    def __init__(self, door: TcpDoor, rcvbuf: int = 0) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(10)
        self.sock.connect((door.host, door.port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def exactly(self, size: int) -> bytes:
        buf = bytearray(size)
        view = memoryview(buf)
        got = 0
        while got < size:
            n = self.sock.recv_into(view[got:], min(size - got, 1 << 20))
            assert n, f"connection closed after {got} of {size} bytes"
            got += n
        return bytes(buf)

    def recv_frame(self) -> bytes:
        (size,) = struct.unpack(">I", self.exactly(4))
        return self.exactly(size)

    def call(self, data: bytes) -> bytes:
        self.send(frame(data))
        return self.recv_frame()

    def closed_by_server(self) -> bool:
        """Reads until the server's EOF or reset (failing on a timeout)."""
        try:
            while self.sock.recv(65536):
                pass
        except ConnectionResetError:
            pass
        return True

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def server() -> Iterator[Server]:
    service = Service("door-test")
    router = service.bind_router("tcp://127.0.0.1:0")
    holder: dict[str, Server] = {}

    def on_frame(conn: Connection, data: bytes) -> None:
        s = holder["server"]
        s.rounds.append(service.poller.rounds)
        if data.startswith(b"big:"):
            conn.send_frame(pattern(int(data[4:])))
        elif data == b"hold":  # blocks the loop until the test lets it go
            s.inside_hold.set()
            s.release.wait(10)
            conn.send_frame(data)
        elif data == b"sink":
            pass
        elif data == b"crash":
            raise ValueError("handler bug")
        elif data == b"timer":

            def later() -> None:
                before = s.door.writes
                conn.send_frame(b"from a timer")
                s.timer_wrote_at_once.append(s.door.writes == before + 1)

            service.later(0.0, later)
        else:
            conn.send_frame(data)

    def on_close(conn: Connection) -> None:
        holder["server"].closed.append(conn)

    door = TcpDoor(service, "127.0.0.1", 0, on_frame, on_close=on_close, min_frame_bytes=1)
    tight = TcpDoor(
        service,
        "127.0.0.1",
        0,
        on_frame,
        on_close=on_close,
        name="tight",
        max_output_bytes=TIGHT_CAP,
        max_connections=2,
    )
    thread = threading.Thread(target=service.run, kwargs={"handle_signals": False}, daemon=True)
    s = Server(service, door, tight, router, thread)
    holder["server"] = s
    thread.start()
    yield s
    s.release.set()
    service.stop()
    thread.join(10)
    assert not thread.is_alive()


Connect = Callable[..., Client]


@pytest.fixture
def connect() -> Iterator[Connect]:
    """Client(door, ...) that is closed at the end of the test."""
    made: list[Client] = []

    def make(door: TcpDoor, rcvbuf: int = 0) -> Client:
        made.append(Client(door, rcvbuf))
        return made[-1]

    yield make
    for client in made:
        client.close()


def only_conn(door: TcpDoor) -> Connection:
    wait_for(lambda: len(door.open) == 1, what="one connection open")
    return next(iter(door.open.values()))


def test_bound_address_is_a_real_port(server: Server) -> None:
    assert server.door.host == "127.0.0.1"
    assert server.door.port > 0
    assert server.door.address == f"127.0.0.1:{server.door.port}"


def test_frames_sent_one_byte_at_a_time_are_reassembled(server: Server, connect: Connect) -> None:
    client = connect(server.door)
    frames = [b"a", b"hello door", bytes(range(256)) * 4]
    for byte in b"".join(frame(f) for f in frames):
        client.send(bytes([byte]))
    assert [client.recv_frame() for _ in frames] == frames
    conn = only_conn(server.door)
    assert conn.frames_in == 3
    assert conn.peer == f"127.0.0.1:{client.sock.getsockname()[1]}"


def test_frames_of_one_read_are_delivered_in_one_round_and_answered_in_one_write(
    server: Server, connect: Connect
) -> None:
    client = connect(server.door)
    assert client.call(b"warm") == b"warm"
    # the counters move just after the syscall, on the loop's thread
    wait_for(lambda: server.door.writes == 1, what="the warm-up's write counted")
    client.send(frame(b"hold"))
    assert server.inside_hold.wait(10)
    many = [b"frame %04d" % i for i in range(1000)]
    client.send(b"".join(frame(f) for f in many))  # lands while the loop is held
    server.release.set()
    assert client.recv_frame() == b"hold"
    assert [client.recv_frame() for _ in many] == many
    assert len(set(server.rounds[-1000:])) == 1  # all in the same loop round
    # one write for the hold's reply, one for the thousand
    wait_for(lambda: server.door.writes >= 3, what="writes counted")
    assert server.door.writes == 3
    assert server.door.frames_in == 1002


def test_a_large_reply_to_a_slow_reader_is_drained_completely(
    server: Server, connect: Connect
) -> None:
    size = 50_000_000
    client = connect(server.door)
    client.send(frame(b"big:%d" % size))
    conn = only_conn(server.door)
    # the client has read nothing: the rest waits in the door, on POLLOUT
    wait_for(lambda: conn.pending_bytes > 0 and server.door.write_waits >= 1, what="backlog")
    reply = client.recv_frame()
    assert len(reply) == size
    assert hashlib.sha256(reply).digest() == hashlib.sha256(pattern(size)).digest()
    wait_for(lambda: conn.pending_bytes == 0, what="drained")
    assert client.call(b"after") == b"after"
    assert not conn.closed
    assert server.door.bytes_out >= size


@pytest.mark.parametrize("length", [MAX_FRAME_BYTES + 1, 0xFFFFFFFF, 0])
def test_a_lying_length_closes_only_that_connection(
    server: Server, length: int, connect: Connect
) -> None:
    liar, honest = connect(server.door), connect(server.door)
    assert honest.call(b"one") == b"one"
    liar.send(struct.pack(">I", length) + b"0123")
    assert liar.closed_by_server()
    wait_for(lambda: len(server.closed) == 1, what="on_close")
    assert server.door.closed_for_bad_length == 1
    assert honest.call(b"two") == b"two"
    assert server.door.connections == 1


def test_a_peer_reset_mid_frame_closes_it_and_the_loop_goes_on(
    server: Server, connect: Connect
) -> None:
    client = connect(server.door)
    assert client.call(b"x") == b"x"
    conn = only_conn(server.door)
    client.send(struct.pack(">I", 1000) + b"only part")
    wait_for(lambda: conn.bytes_in >= 4 + 1 + 4 + 9, what="partial frame read")
    client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.close()  # RST
    wait_for(lambda: len(server.closed) == 1, what="on_close after the reset")
    assert server.closed == [conn]
    assert conn.closed
    assert conn.frames_in == 1  # the partial frame never reached the handler
    other = connect(server.door)
    assert other.call(b"still here") == b"still here"


def test_a_client_that_never_reads_is_closed_at_the_output_cap(
    server: Server, connect: Connect
) -> None:
    client = connect(server.tight, rcvbuf=64 * 1024)
    for _ in range(100):  # 25 MB of replies asked for; none read
        try:
            client.send(frame(b"big:%d" % (256 * 1024)))
        except ConnectionResetError:
            break  # closed at the cap before all were sent: what this test waits for
    wait_for(lambda: len(server.closed) == 1, what="closed at the cap")
    assert server.tight.closed_for_backlog == 1
    assert server.tight.connections == 0
    assert client.closed_by_server()


def test_past_max_connections_a_new_one_is_accepted_and_closed(
    server: Server, connect: Connect
) -> None:
    first, second = connect(server.tight), connect(server.tight)
    assert first.call(b"1") == b"1"
    assert second.call(b"2") == b"2"
    third = connect(server.tight)
    assert third.closed_by_server()
    assert server.tight.refused == 1
    first.close()
    wait_for(lambda: server.tight.connections == 1, what="first one gone")
    fourth = connect(server.tight)
    assert fourth.call(b"4") == b"4"


def test_a_handler_crash_drops_that_frame_only(server: Server, connect: Connect) -> None:
    client = connect(server.door)
    client.send(frame(b"crash") + frame(b"next"))
    assert client.recv_frame() == b"next"
    assert server.door.handler_errors == 1


def test_a_send_from_a_timer_is_written_at_once(server: Server, connect: Connect) -> None:
    client = connect(server.door)
    client.send(frame(b"timer"))
    assert client.recv_frame() == b"from a timer"
    wait_for(lambda: len(server.timer_wrote_at_once) == 1, what="the timer's check")
    assert server.timer_wrote_at_once == [True]


def test_the_zeromq_side_answers_while_a_door_client_floods(
    server: Server, connect: Connect
) -> None:
    flooder = connect(server.door)
    stop = threading.Event()
    chunk = b"".join([frame(b"sink")] * 16_000)  # 128 KB of frames nobody answers

    def flood() -> None:
        with contextlib.suppress(OSError):  # the test's end shuts the socket under it
            while not stop.is_set():
                flooder.send(chunk)

    flooding = threading.Thread(target=flood, daemon=True)
    flooding.start()
    ctx: zmq.Context[Any] = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    dealer.linger = 0
    dealer.connect(server.router)
    codec = RequestCodec()
    try:
        wait_for(lambda: server.door.frames_in > 100_000, what="flood under way")
        frames_before = server.door.frames_in
        slowest = 0.0
        for i in range(1, 31):
            started = time.monotonic()
            dealer.send_multipart(codec.request_frames(RequestEnvelope(i, PingRequest())))
            assert dealer.poll(5000), "no pong while flooded"
            env, _ = codec.decode_reply(dealer.recv_multipart()[1:])
            assert env.id == i
            assert isinstance(env.body, PongReply)
            slowest = max(slowest, time.monotonic() - started)
        assert server.door.frames_in - frames_before > 10_000  # it went on flooding meanwhile
        assert slowest < 2.0
    finally:
        stop.set()
        flooder.sock.shutdown(socket.SHUT_RDWR)
        flooding.join(10)
        dealer.close()
        ctx.term()


def test_stopping_the_service_closes_the_door_and_its_connections(connect: Connect) -> None:
    service = Service("door-stop")
    closed: list[Connection] = []
    door = TcpDoor(service, "127.0.0.1", 0, lambda c, f: c.send_frame(f), on_close=closed.append)
    thread = threading.Thread(target=service.run, kwargs={"handle_signals": False}, daemon=True)
    thread.start()
    clients = [connect(door) for _ in range(3)]
    for c in clients:
        assert c.call(b"hi") == b"hi"
    service.stop()
    thread.join(10)
    assert not thread.is_alive()
    assert door.closed
    assert len(closed) == 3
    assert door.connections == 0
    for c in clients:
        assert c.closed_by_server()
    with pytest.raises(OSError):
        socket.create_connection((door.host, door.port), timeout=2)


def test_a_zeromq_client_on_the_door_is_closed_and_named_in_the_log(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    # Compose publishes RocketMQ's door on 9876 and Ferry's own port beside it: a Ferry client
    # given the wrong one must be told so, not left guessing
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    caplog.set_level("WARNING", logger="ferry.tcp_door")
    try:
        dealer.connect(f"tcp://{server.door.address}")
        dealer.send(b"ping")
        wait_for(
            lambda: "ZeroMQ greeting" in caplog.text, timeout=10, what="the wrong-port warning"
        )
    finally:
        dealer.close()
    assert server.door.closed_for_bad_length >= 1
    assert "listenPort" in caplog.text
