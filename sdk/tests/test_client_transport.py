"""The SDK transport against a real ROUTER service (ferry.runtime.service) on 127.0.0.1."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from echo_service_support import EchoServer

from ferry.client.transport import Connection, ConnectionPool, expect
from ferry.protocol.errors import (
    ConnectionFailedError,
    MessageIllegalError,
    RequestTimeoutError,
    TopicNotExistError,
)
from ferry.protocol.messages import (
    AnyReply,
    ConsumerIdsChangedNotice,
    GetMaxOffsetRequest,
    GetRouteInfoRequest,
    HeartbeatRequest,
    OffsetReply,
    OkReply,
    PingRequest,
    PongReply,
    SendMessageReply,
    SendMessageRequest,
)
from ferry.runtime.service import Service


@pytest.fixture
def server() -> Iterator[EchoServer]:
    srv = EchoServer()
    srv.thread.start()
    yield srv
    srv.service.stop()
    srv.thread.join(10)
    assert not srv.thread.is_alive()


@pytest.fixture
def conn(server: EchoServer) -> Iterator[Connection]:
    c = Connection(server.address)
    yield c
    c.close()


def io_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("ferry-io-")]


def test_reply_and_payload_frames_come_back(conn: Connection) -> None:
    reply, payload = conn.request(
        SendMessageRequest(producer_group="g", topic="t", queue_id=3),
        [b"hello world"],
        traceparent="00-abc",
    )
    assert isinstance(reply, SendMessageReply)
    assert (reply.queue_id, reply.queue_offset) == (3, 11)
    assert [bytes(f) for f in payload] == [b"dlrow olleh"]
    # the trace context travels in the request envelope
    assert reply.broker_name == "00-abc"


def test_concurrent_requests_from_many_threads_get_their_own_replies(conn: Connection) -> None:
    def ask(queue_id: int) -> tuple[int, int]:
        result = conn.request(GetMaxOffsetRequest(topic="t", queue_id=queue_id), timeout_s=10)
        return queue_id, expect(result, OffsetReply).offset

    started = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(ask, range(2000)))
    assert all(offset == queue_id * 7 for queue_id, offset in answers)
    assert len(answers) == 2000
    # A lost wake-up of the I/O thread costs a whole poll timeout per request.
    assert time.monotonic() - started < 20


def test_many_requests_in_flight_are_correlated(conn: Connection) -> None:
    futures = [
        conn.submit(GetMaxOffsetRequest(topic="t", queue_id=i), timeout_s=10) for i in range(5000)
    ]
    offsets = [expect(f.result(15), OffsetReply).offset for f in futures]
    assert offsets == [i * 7 for i in range(5000)]


def test_error_reply_becomes_the_typed_exception(conn: Connection) -> None:
    with pytest.raises(TopicNotExistError, match="No route info of this topic: missing") as info:
        conn.request(GetMaxOffsetRequest(topic="missing", queue_id=0))
    assert info.value.retriable
    with pytest.raises(MessageIllegalError) as illegal:
        conn.request(GetMaxOffsetRequest(topic="illegal", queue_id=0))
    assert not illegal.value.retriable


def test_unanswered_request_fails_with_timeout_and_others_go_on(
    conn: Connection, server: EchoServer
) -> None:
    held = conn.submit(GetRouteInfoRequest(topic="t"), timeout_s=0.3)
    quick = conn.submit(GetMaxOffsetRequest(topic="t", queue_id=2), timeout_s=5)
    assert expect(quick.result(5), OffsetReply).offset == 14
    started = time.monotonic()
    with pytest.raises(RequestTimeoutError):
        held.result(5)
    assert time.monotonic() - started < 2.0
    assert len(server.held) == 1


def test_requests_with_different_timeouts_expire_in_deadline_order(conn: Connection) -> None:
    slow = conn.submit(GetRouteInfoRequest(topic="t"), timeout_s=30)
    fast = conn.submit(GetRouteInfoRequest(topic="t"), timeout_s=0.2)
    with pytest.raises(RequestTimeoutError):
        fast.result(5)
    assert not slow.done()


def test_no_server_means_a_quick_failure_not_a_hang() -> None:
    pool = ConnectionPool()
    try:
        # a port nobody listens on: bind and close a service to learn a free one
        probe = Service("probe")
        endpoint = probe.bind_router("tcp://127.0.0.1:0")
        probe.ctx.destroy(linger=0)
        started = time.monotonic()
        with pytest.raises(ConnectionFailedError):
            pool.get(endpoint.removeprefix("tcp://")).request(PingRequest(), timeout_s=10)
        # the refused connection failed it, long before its timeout
        assert time.monotonic() - started < 2.0
    finally:
        pool.close()
    assert not io_threads()


def test_close_fails_pending_requests_and_stops_the_thread(server: EchoServer) -> None:
    before = len(io_threads())
    c = Connection(server.address)
    assert len(io_threads()) == before + 1
    pending = c.submit(GetRouteInfoRequest(topic="t"), timeout_s=30)
    assert expect(c.request(PingRequest()), PongReply).service == "echo"
    c.close()
    with pytest.raises(ConnectionFailedError):
        pending.result(1)
    assert len(io_threads()) == before
    late = c.submit(PingRequest())
    with pytest.raises(ConnectionFailedError):
        late.result(1)


def test_pool_shares_one_connection_per_address(server: EchoServer) -> None:
    pool = ConnectionPool()
    try:
        assert pool.get(server.address) is pool.get(server.address)
        assert expect(pool.get(server.address).request(PingRequest()), PongReply)
    finally:
        pool.close()
    assert not io_threads()


def test_oneway_requests_get_no_reply_and_do_not_block(
    conn: Connection, server: EchoServer
) -> None:
    for _ in range(10):
        conn.send_oneway(GetRouteInfoRequest(topic="t"))
    deadline = time.monotonic() + 5
    while len(server.held) < 10 and time.monotonic() < deadline:
        time.sleep(0.01)  # wait-ok: polling within a deadline
    assert len(server.held) == 10
    assert all(call.oneway for call in server.held)


def test_requests_fail_at_once_when_the_peer_goes_away() -> None:
    srv = EchoServer()
    srv.thread.start()
    c = Connection(srv.address)
    try:
        assert expect(c.request(PingRequest()), PongReply)
        held = c.submit(GetRouteInfoRequest(topic="t"), timeout_s=30)
        deadline = time.monotonic() + 5
        while not srv.held and time.monotonic() < deadline:
            time.sleep(0.01)  # wait-ok: polling within a deadline
        started = time.monotonic()
        srv.service.stop()
        srv.thread.join(10)
        with pytest.raises(ConnectionFailedError, match="lost"):
            held.result(10)
        assert time.monotonic() - started < 5
        assert held.exception() is not None and held.exception().retriable  # type: ignore[union-attr]
    finally:
        c.close()


def test_requests_after_the_peer_went_away_fail_at_once_and_resume_when_it_is_back() -> None:
    srv = EchoServer()
    srv.thread.start()
    c = Connection(srv.address)
    try:
        assert expect(c.request(PingRequest()), PongReply)
        srv.service.stop()
        srv.thread.join(10)
        started = time.monotonic()
        deadline = started + 10
        while time.monotonic() < deadline:  # until the I/O thread has seen the disconnect
            try:
                c.request(PingRequest(), timeout_s=0.5)
            except ConnectionFailedError:
                break
            except RequestTimeoutError:
                continue
        with pytest.raises(ConnectionFailedError):
            c.request(PingRequest(), timeout_s=30)
        assert time.monotonic() - started < 5  # not the 30 s timeout
    finally:
        c.close()


def test_notices_sent_unasked_go_to_the_notice_callback(server: EchoServer) -> None:
    seen: list[tuple[str, AnyReply]] = []
    got = threading.Event()

    def on_notice(address: str, body: AnyReply) -> None:
        seen.append((address, body))
        got.set()

    c = Connection(server.address, on_notice=on_notice)
    try:
        assert c.request(HeartbeatRequest(client_id="group-x"))[0] == OkReply()
        assert got.wait(5), "the notice never reached the callback"
        assert seen == [(server.address, ConsumerIdsChangedNotice(consumer_group="group-x"))]
        # and the connection goes on serving requests
        assert expect(c.request(PingRequest()), PongReply).service == "echo"
    finally:
        c.close()


def test_answered_requests_leave_no_deadline_state_behind(conn: Connection) -> None:
    # every async send has its own remaining-time timeout: nothing may pile up per request
    futures = [
        conn.submit(GetMaxOffsetRequest(topic="t", queue_id=i), timeout_s=10 + i / 1000)
        for i in range(5000)
    ]
    for f in futures:
        f.result(15)
    held = conn.submit(GetRouteInfoRequest(topic="t"), timeout_s=0.3)
    with pytest.raises(RequestTimeoutError):
        held.result(5)
    assert len(conn._deadlines) <= 1024 + 2 * len(conn._pending)


def direct_ready(c: Connection, deadline_s: float = 5.0) -> None:
    """Asks until a request went the direct way (the thread's socket is connected)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        assert expect(c.request(PingRequest(), direct=True), PongReply)
        lease = c._lease()
        if lease is not None and lease.direct.client.connect().poll(0, 2):  # POLLOUT: connected
            return
        time.sleep(0.01)  # wait-ok: polling within a deadline
    raise AssertionError("the direct socket never connected")


def test_direct_requests_answer_like_queued_ones_from_many_threads(conn: Connection) -> None:
    direct_ready(conn)
    reply, payload = conn.request(
        SendMessageRequest(producer_group="g", topic="t", queue_id=3),
        [b"hello world"],
        traceparent="00-abc",
        direct=True,
    )
    assert isinstance(reply, SendMessageReply)
    assert [bytes(f) for f in payload] == [b"dlrow olleh"]
    assert reply.broker_name == "00-abc"
    with pytest.raises(TopicNotExistError):
        conn.request(GetMaxOffsetRequest(topic="missing", queue_id=0), direct=True)

    def ask(queue_id: int) -> int:
        result = conn.request(GetMaxOffsetRequest(topic="t", queue_id=queue_id), direct=True)
        return expect(result, OffsetReply).offset

    with ThreadPoolExecutor(12) as pool:  # more threads than direct sockets: some queue
        answers = list(pool.map(ask, range(1000)))
    assert answers == [i * 7 for i in range(1000)]
    assert len(conn._direct_all) <= 8


def test_a_direct_request_times_out_and_the_next_one_ignores_its_late_reply(
    conn: Connection, server: EchoServer
) -> None:
    direct_ready(conn)
    started = time.monotonic()
    with pytest.raises(RequestTimeoutError):
        conn.request(GetRouteInfoRequest(topic="t"), timeout_s=0.2, direct=True)
    assert time.monotonic() - started < 2.0
    held = server.held[-1]
    server.service.later(0, lambda: held.reply(PongReply(service="late")))
    # the late reply to the timed-out request is skipped, not taken for this one
    assert expect(conn.request(PingRequest(), direct=True), PongReply).service == "echo"


def test_a_direct_wait_fails_at_once_when_the_peer_goes_away() -> None:
    srv = EchoServer()
    srv.thread.start()
    c = Connection(srv.address)
    try:
        direct_ready(c)
        errors: list[BaseException] = []

        def held_request() -> None:
            try:
                c.request(GetRouteInfoRequest(topic="t"), timeout_s=30, direct=True)
            except Exception as exc:  # noqa: BLE001 - the test looks at it
                errors.append(exc)

        asker = threading.Thread(target=held_request)
        asker.start()
        deadline = time.monotonic() + 5
        while not srv.held and time.monotonic() < deadline:
            time.sleep(0.01)  # wait-ok: polling within a deadline
        assert srv.held, "the direct request never arrived"
        started = time.monotonic()
        srv.service.stop()
        srv.thread.join(10)
        asker.join(10)
        assert time.monotonic() - started < 5  # not its 30 s timeout
        assert len(errors) == 1 and isinstance(errors[0], ConnectionFailedError)
    finally:
        c.close()


def test_close_releases_direct_sockets_and_a_thread_that_ends_returns_its_own(
    server: EchoServer,
) -> None:
    c = Connection(server.address)
    done = threading.Event()

    def worker() -> None:
        direct_ready(c)
        done.set()

    t = threading.Thread(target=worker)
    t.start()
    t.join(10)
    assert done.is_set()
    assert len(c._direct_all) == 1
    deadline = time.monotonic() + 5
    while not c._direct_free and time.monotonic() < deadline:
        time.sleep(0.01)  # wait-ok: the ended thread's lease is collected
    assert c._direct_free, "the ended thread's socket did not come back"
    direct_ready(c)  # this thread reuses it
    assert len(c._direct_all) == 1
    c.close()
    assert c.stopped
    with pytest.raises(ConnectionFailedError):
        c.request(PingRequest(), direct=True)
