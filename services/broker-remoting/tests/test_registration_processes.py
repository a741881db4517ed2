"""Registration with real name server processes: immediate after a topic change, and back
after a name server outage without anyone restarting the broker."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from ferry.protocol.framing import RequestCodec, RequestEnvelope
from ferry.protocol.messages import (
    AnyReply,
    AnyRequest,
    ClusterInfoReply,
    GetClusterInfoRequest,
    GetRouteInfoRequest,
    RouteInfoReply,
    SendMessageReply,
    SendMessageRequest,
)
from ferry.protocol.record import encode_record
from ferry.runtime.launcher import LocalCluster, service_args, start_broker_services, start_service

pytestmark = pytest.mark.integration

SMALL_STORE = {
    "mappedFileSizeCommitLog": str(4 * 1024 * 1024),
    "mappedFileSizeConsumeQueue": str(20 * 10_000),
}


class Dealer:
    def __init__(self, addr: str) -> None:
        self.ctx: zmq.Context[Any] = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.linger = 0
        self.sock.connect(f"tcp://{addr}")
        self.codec = RequestCodec()
        self.next_id = 0

    def call(self, body: AnyRequest, payload: list[bytes] | None = None) -> AnyReply:
        self.next_id += 1
        self.sock.send_multipart(
            self.codec.request_frames(RequestEnvelope(self.next_id, body), payload)
        )
        while True:
            assert self.sock.poll(10_000), "no reply in time"
            env, _ = self.codec.decode_reply(self.sock.recv_multipart()[1:])
            if env.id == self.next_id:
                return env.body

    def close(self) -> None:
        self.sock.close()
        self.ctx.term()


@pytest.fixture
def dealers() -> Iterator[Callable[[str], Dealer]]:
    made: list[Dealer] = []

    def make(addr: str) -> Dealer:
        made.append(Dealer(addr))
        return made[-1]

    yield make
    for d in made:
        d.close()


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> float:
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < timeout, f"timed out waiting for {what}"
        time.sleep(0.05)  # wait-ok: polling within a deadline
    return time.monotonic() - start


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_auto_created_topic_is_routed_without_waiting_a_period(
    tmp_path: Path, dealers: Callable[[str], Dealer]
) -> None:
    with LocalCluster() as cluster:
        namesrv = start_service("namesrv", service_args(None, {"listenPort": "0"}))
        cluster.processes.append(namesrv)
        start_broker_services(
            cluster,
            str(tmp_path),
            namesrv_addr=namesrv.endpoints["addr"],
            overrides={**SMALL_STORE, "registerNameServerPeriod": "60000"},
        )
        ns = dealers(namesrv.endpoints["addr"])
        wait_for(
            lambda: isinstance(ns.call(GetRouteInfoRequest("TBW102")), RouteInfoReply),
            10,
            "the first registration",
        )

        broker = dealers(cluster.broker_addr)
        sent = broker.call(
            SendMessageRequest("pg", "NewTopic", -1, default_topic="TBW102"),
            [encode_record(b"NewTopic", b"x", b"")],
        )
        assert isinstance(sent, SendMessageReply)

        wait_for(
            lambda: isinstance(ns.call(GetRouteInfoRequest("NewTopic")), RouteInfoReply),
            5,
            "the route of the new topic",
        )
        route = ns.call(GetRouteInfoRequest("NewTopic"))
        assert isinstance(route, RouteInfoReply)
        assert route.route.broker_datas[0].broker_addrs[0] == cluster.broker_addr
        assert route.route.queue_datas[0].write_queue_nums == 4


def test_broker_registers_once_a_down_name_server_comes_up(
    tmp_path: Path, dealers: Callable[[str], Dealer]
) -> None:
    port = free_port()
    with LocalCluster() as cluster:
        start_broker_services(
            cluster,
            str(tmp_path),
            namesrv_addr=f"127.0.0.1:{port}",
            overrides={**SMALL_STORE, "registerNameServerPeriod": "1000"},
        )
        remoting = cluster.get("broker-remoting")
        wait_for(lambda: "does not answer" in remoting.recent_output(), 20, "the outage log")

        namesrv = start_service("namesrv", service_args(None, {"listenPort": str(port)}))
        cluster.processes.insert(0, namesrv)
        ns = dealers(namesrv.endpoints["addr"])

        def registered() -> bool:
            info = ns.call(GetClusterInfoRequest())
            return isinstance(info, ClusterInfoReply) and "broker-a" in info.brokers

        wait_for(registered, 15, "the broker to register")
        assert remoting.recent_output().count("does not answer") == 1


def test_a_name_server_restarted_within_a_period_gets_the_registration_at_once(
    tmp_path: Path, dealers: Callable[[str], Dealer]
) -> None:
    """kill -9 and restart of the name server on its port, the broker's period being 60 s:
    the broker registers with the new one as soon as its connection is back."""
    port = free_port()
    with LocalCluster() as cluster:
        namesrv = start_service("namesrv", service_args(None, {"listenPort": str(port)}))
        cluster.processes.append(namesrv)
        start_broker_services(
            cluster,
            str(tmp_path),
            namesrv_addr=f"127.0.0.1:{port}",
            overrides={**SMALL_STORE, "registerNameServerPeriod": "60000"},
        )

        def registered(ns: Dealer) -> bool:
            info = ns.call(GetClusterInfoRequest())
            return isinstance(info, ClusterInfoReply) and "broker-a" in info.brokers

        first = dealers(f"127.0.0.1:{port}")
        wait_for(lambda: registered(first), 10, "the first registration")
        namesrv.kill()
        cluster.processes.remove(namesrv)
        again = start_service("namesrv", service_args(None, {"listenPort": str(port)}))
        cluster.processes.insert(0, again)
        ns = dealers(f"127.0.0.1:{port}")
        wait_for(lambda: registered(ns), 5, "a registration with the new one")
        assert "connected to name server" in cluster.get("broker-remoting").recent_output()
