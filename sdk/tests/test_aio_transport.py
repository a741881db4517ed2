"""ferry.client.aio's AsyncConnection against a real ROUTER service (ferry.runtime.service):
replies read from the loop's readiness callback, deadlines as timers, refusal while the
peer is down, notices, and cancellation leaving nothing behind."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import pytest
import zmq.asyncio
from echo_service_support import EchoServer

from ferry.client.aio.transport import AsyncConnection
from ferry.client.transport import expect
from ferry.protocol.errors import (
    ConnectionFailedError,
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

T = TypeVar("T")


@pytest.fixture
def server() -> Iterator[EchoServer]:
    srv = EchoServer()
    srv.thread.start()
    yield srv
    srv.service.stop()
    srv.thread.join(10)
    assert not srv.thread.is_alive()


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(coro, 60))


async def connected(address: str, **kw: Any) -> tuple[AsyncConnection, zmq.asyncio.Context]:
    ctx = zmq.asyncio.Context()
    return AsyncConnection(address, ctx, **kw), ctx


async def closed(conn: AsyncConnection, ctx: zmq.asyncio.Context) -> None:
    await conn.close()
    ctx.term()


def test_thousands_in_flight_each_get_their_own_reply(server: EchoServer) -> None:
    # replies come in bursts: a reply left unread after a send would hang its request
    async def scenario() -> None:
        conn, ctx = await connected(server.address)
        try:
            replies = await asyncio.gather(
                *(
                    conn.request(GetMaxOffsetRequest(topic="t", queue_id=i), timeout_s=20)
                    for i in range(3000)
                )
            )
            assert [expect(r, OffsetReply).offset for r in replies] == [i * 7 for i in range(3000)]

            # and sends that go while replies come in, each task waiting for its own
            async def worker(n: int) -> list[int]:
                got = []
                for i in range(100):
                    req = GetMaxOffsetRequest(topic="t", queue_id=n * 100 + i)
                    got.append(expect(await conn.request(req, timeout_s=20), OffsetReply).offset)
                return got

            runs = await asyncio.gather(*(worker(n) for n in range(40)))
            assert runs == [[(n * 100 + i) * 7 for i in range(100)] for n in range(40)]
            body = SendMessageRequest(producer_group="g", topic="t", queue_id=3)
            reply, payload = await conn.request(body, [b"abc", b"def"], traceparent="tp")
            assert isinstance(reply, SendMessageReply) and reply.broker_name == "tp"
            assert [bytes(f) for f in payload] == [b"fedcba"]
            assert not conn._pending
        finally:
            await closed(conn, ctx)

    run(scenario())


def test_error_replies_and_deadlines_are_typed_and_leave_nothing_behind(
    server: EchoServer,
) -> None:
    async def scenario() -> None:
        conn, ctx = await connected(server.address)
        try:
            with pytest.raises(TopicNotExistError):
                await conn.request(GetMaxOffsetRequest(topic="missing", queue_id=0))
            started = time.monotonic()
            with pytest.raises(RequestTimeoutError, match="no reply"):
                await conn.request(GetRouteInfoRequest(topic="t"), timeout_s=0.3)
            assert 0.25 < time.monotonic() - started < 2.0
            # a held request that times out does not hold up the next ones
            assert expect(await conn.request(PingRequest()), PongReply).service == "echo"
            assert not conn._pending
            # answered requests leave no timer behind on the loop
            loop = asyncio.get_running_loop()
            for _ in range(200):
                await conn.request(PingRequest(), timeout_s=30)
            assert sum(not h.cancelled() for h in loop._scheduled) < 10  # type: ignore[attr-defined]
        finally:
            await closed(conn, ctx)

    run(scenario())


def test_a_cancelled_request_leaves_no_pending_entry_and_the_connection_goes_on(
    server: EchoServer,
) -> None:
    async def scenario() -> None:
        conn, ctx = await connected(server.address)
        try:
            held = asyncio.create_task(conn.request(GetRouteInfoRequest(topic="t")))
            async with asyncio.timeout(10):
                while not server.held:
                    await asyncio.sleep(0.01)  # wait-ok: polling within a deadline
            held.cancel()
            with pytest.raises(asyncio.CancelledError):
                await held
            assert not conn._pending
            assert expect(await conn.request(PingRequest()), PongReply).service == "echo"
        finally:
            await closed(conn, ctx)

    run(scenario())


def test_notices_go_to_the_callback_and_oneway_requests_leave(server: EchoServer) -> None:
    async def scenario() -> None:
        seen: list[tuple[str, AnyReply]] = []
        conn, ctx = await connected(server.address, on_notice=lambda a, b: seen.append((a, b)))
        try:
            assert (await conn.request(HeartbeatRequest(client_id="group-x")))[0] == OkReply()
            async with asyncio.timeout(10):
                while not seen:
                    await asyncio.sleep(0.01)  # wait-ok: polling within a deadline
            assert seen == [(server.address, ConsumerIdsChangedNotice(consumer_group="group-x"))]
            for _ in range(5):
                await conn.send_oneway(GetRouteInfoRequest(topic="t"))
            async with asyncio.timeout(10):
                while len(server.held) < 5:
                    await asyncio.sleep(0.01)  # wait-ok: polling within a deadline
            assert all(call.oneway for call in server.held)
        finally:
            await closed(conn, ctx)

    run(scenario())


def test_requests_fail_when_the_peer_goes_and_are_refused_while_it_is_away() -> None:
    srv = EchoServer()
    srv.thread.start()

    async def scenario() -> None:
        conn, ctx = await connected(srv.address)
        try:
            assert expect(await conn.request(PingRequest()), PongReply)
            held = asyncio.create_task(conn.request(GetRouteInfoRequest(topic="t"), timeout_s=30))
            async with asyncio.timeout(10):
                while not srv.held:
                    await asyncio.sleep(0.01)  # wait-ok: polling within a deadline
            started = time.monotonic()
            await asyncio.to_thread(srv.service.stop)
            await asyncio.to_thread(srv.thread.join, 10)
            with pytest.raises(ConnectionFailedError, match="lost"):
                await held
            # refused at once from now on, not after the 30 s timeout
            with pytest.raises(ConnectionFailedError):
                await conn.request(PingRequest(), timeout_s=30)
            assert time.monotonic() - started < 5
        finally:
            await closed(conn, ctx)
        with pytest.raises(ConnectionFailedError, match="closed"):
            await conn.request(PingRequest())

    run(scenario())


def test_a_request_to_nobody_fails_quickly_not_at_its_deadline() -> None:
    async def scenario() -> None:
        probe = EchoServer()  # bound and never run: its port, once closed, is free
        address = probe.address
        probe.service.ctx.destroy(linger=0)
        conn, ctx = await connected(address)
        try:
            started = time.monotonic()
            with pytest.raises(ConnectionFailedError):
                await conn.request(PingRequest(), timeout_s=10)
            assert time.monotonic() - started < 2.0
        finally:
            await closed(conn, ctx)

    run(scenario())
