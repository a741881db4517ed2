"""Send retries against in-process stand-ins for a name server and two brokers: a broker that
answers SYSTEM_BUSY is retried on the other one, within the send timeout."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from ferry.client import Message, Producer, SendStatus
from ferry.protocol.errors import SystemBusyError
from ferry.protocol.messages import (
    BrokerData,
    GetRouteInfoRequest,
    HeartbeatRequest,
    OkReply,
    QueueData,
    RouteInfoReply,
    SendMessageReply,
    SendMessageRequest,
    TopicRouteData,
    UnregisterClientRequest,
)
from ferry.runtime.service import Call, Service


class Stand:
    """A service on a thread; counts the sends it got."""

    def __init__(self, name: str, busy: bool = False) -> None:
        self.name = name
        self.busy = busy
        self.sends = 0
        self.service = Service(name)
        self.service.on(SendMessageRequest, self._send)
        self.service.on(HeartbeatRequest, lambda _r, _c: OkReply())
        self.service.on(UnregisterClientRequest, lambda _r, _c: OkReply())
        self.address = self.service.bind_router("tcp://127.0.0.1:0").removeprefix("tcp://")
        self.thread = threading.Thread(
            target=self.service.run, kwargs={"handle_signals": False}, daemon=True
        )
        self.thread.start()

    def _send(self, req: SendMessageRequest, _call: Call) -> SendMessageReply:
        self.sends += 1
        if self.busy:
            raise SystemBusyError(f"{self.name} is overloaded")
        return SendMessageReply(0, req.queue_id, self.sends, "127.0.0.1:1", [7], self.name)

    def stop(self) -> None:
        self.service.stop()
        self.thread.join(10)


@pytest.fixture
def stands() -> Iterator[tuple[Stand, Stand, Stand]]:
    busy, ok = Stand("broker-a", busy=True), Stand("broker-b")
    namesrv = Stand("namesrv")
    route = TopicRouteData(
        [QueueData("broker-a", 2, 2), QueueData("broker-b", 2, 2)],
        [
            BrokerData("c", "broker-a", {0: busy.address}),
            BrokerData("c", "broker-b", {0: ok.address}),
        ],
    )
    namesrv.service.on(GetRouteInfoRequest, lambda _r, _c: RouteInfoReply(route))
    yield namesrv, busy, ok
    for stand in (namesrv, busy, ok):
        stand.stop()


def test_system_busy_is_retried_on_the_other_broker(stands: tuple[Stand, Stand, Stand]) -> None:
    namesrv, busy, ok = stands
    with Producer("pg", namesrv.address, send_timeout_ms=3000) as producer:
        results = [producer.send(Message("T", f"m{i}".encode())) for i in range(6)]
        future = producer.send_async(Message("T", b"async"))
        results.append(future.result(5))
    assert {r.status for r in results} == {SendStatus.SEND_OK}
    assert {r.queue.broker_name for r in results} == {"broker-b"}
    assert busy.sends >= 3  # round robin kept trying it; each time the retry went elsewhere
    assert ok.sends == 7
