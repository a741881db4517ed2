"""Topic routes from the name server's TopicRouteData, and name server lists."""

from __future__ import annotations

import pytest

from ferry.client.message import MessageQueue
from ferry.client.route import TopicRoute, parse_namesrv
from ferry.protocol.errors import InvalidParameterError
from ferry.protocol.messages import BrokerData, QueueData, TopicRouteData


def route_data() -> TopicRouteData:
    return TopicRouteData(
        queue_datas=[
            QueueData("broker-b", read_queue_nums=2, write_queue_nums=2, perm=6),
            QueueData("broker-a", read_queue_nums=3, write_queue_nums=2, perm=6),
            QueueData("broker-ro", read_queue_nums=1, write_queue_nums=1, perm=4),
            QueueData("broker-noma", read_queue_nums=1, write_queue_nums=1, perm=6),
        ],
        broker_datas=[
            BrokerData("c1", "broker-a", {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}),
            BrokerData("c1", "broker-b", {0: "10.0.0.3:10911"}),
            BrokerData("c1", "broker-ro", {0: "10.0.0.4:10911"}),
            BrokerData("c1", "broker-noma", {1: "10.0.0.5:10911"}),
        ],
    )


def test_write_queues_are_sorted_and_need_write_perm_and_a_master() -> None:
    route = TopicRoute.from_data("t", route_data())
    assert route.write_queues == (
        MessageQueue("t", "broker-a", 0),
        MessageQueue("t", "broker-a", 1),
        MessageQueue("t", "broker-b", 0),
        MessageQueue("t", "broker-b", 1),
    )


def test_read_queues_include_read_only_brokers_and_slaves() -> None:
    route = TopicRoute.from_data("t", route_data())
    assert [str(q) for q in route.read_queues] == [
        "t@broker-a#0",
        "t@broker-a#1",
        "t@broker-a#2",
        "t@broker-b#0",
        "t@broker-b#1",
        "t@broker-noma#0",
        "t@broker-ro#0",
    ]
    assert route.read_addr_of("broker-noma") == "10.0.0.5:10911"
    assert route.read_addr_of("broker-a") == "10.0.0.1:10911"


def test_master_addresses_by_broker_name() -> None:
    route = TopicRoute.from_data("t", route_data())
    assert route.master_of("broker-a") == "10.0.0.1:10911"
    assert route.master_of("broker-noma") is None
    assert route.master_of("unknown") is None


def test_namesrv_lists_split_on_semicolons() -> None:
    assert parse_namesrv("a:1; b:2;") == ["a:1", "b:2"]
    assert parse_namesrv("127.0.0.1:9876") == ["127.0.0.1:9876"]


@pytest.mark.parametrize("bad", ["", ";", "host", "host:port", ":9876"])
def test_bad_namesrv_addresses_are_rejected(bad: str) -> None:
    with pytest.raises(InvalidParameterError):
        parse_namesrv(bad)
