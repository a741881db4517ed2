import pytest

from ferry.protocol.errors import InvalidParameterError
from ferry.protocol.messages import ConsumerData, SubscriptionData
from ferry.remoting.client_table import ClientTable


def consumer(group: str, topic: str = "Orders") -> ConsumerData:
    return ConsumerData(group=group, subscriptions=[SubscriptionData(topic, "TagA")])


def test_consumer_ids_are_sorted_members_of_the_group() -> None:
    table = ClientTable()
    table.heartbeat("10.0.0.2@b", [], [consumer("g1")], now_ms=0)
    table.heartbeat("10.0.0.1@a", [], [consumer("g1")], now_ms=0)
    table.heartbeat("10.0.0.3@c", ["p1"], [consumer("g2")], now_ms=0)

    assert table.consumer_ids("g1") == ["10.0.0.1@a", "10.0.0.2@b"]
    assert table.consumer_ids("g2") == ["10.0.0.3@c"]
    assert table.consumer_ids("nobody") == []
    assert table.producer_ids("p1") == ["10.0.0.3@c"]


def test_silent_client_expires_after_120_seconds() -> None:
    table = ClientTable()
    table.heartbeat("old", [], [consumer("g1")], now_ms=1_000)
    table.heartbeat("fresh", [], [consumer("g1")], now_ms=60_000)

    assert table.expire(now_ms=121_000) == []  # exactly 120 s: still alive
    assert table.expire(now_ms=121_001) == ["old"]
    assert table.consumer_ids("g1") == ["fresh"]
    assert len(table) == 1


def test_heartbeat_keeps_a_client_alive() -> None:
    table = ClientTable(expire_ms=1_000)
    table.heartbeat("c", [], [consumer("g1")], now_ms=0)
    table.heartbeat("c", [], [consumer("g1")], now_ms=900)
    assert table.expire(now_ms=1_800) == []
    assert table.expire(now_ms=1_901) == ["c"]


def test_heartbeat_replaces_what_the_client_runs() -> None:
    table = ClientTable()
    table.heartbeat("c", ["p1"], [consumer("g1"), consumer("g2")], now_ms=0)
    table.heartbeat("c", [], [consumer("g2")], now_ms=1)

    assert table.consumer_ids("g1") == []
    assert table.consumer_ids("g2") == ["c"]
    assert table.producer_ids("p1") == []


def test_unregister_one_group_or_the_whole_client() -> None:
    table = ClientTable()
    table.heartbeat("c", ["p1"], [consumer("g1"), consumer("g2")], now_ms=0)

    table.unregister("c", consumer_group="g1")
    assert table.consumer_ids("g1") == []
    assert table.consumer_ids("g2") == ["c"]

    table.unregister("c")
    assert table.get("c") is None
    table.unregister("never-seen")  # harmless


def test_client_with_no_groups_left_is_dropped() -> None:
    table = ClientTable()
    table.heartbeat("c", ["p1"], [], now_ms=0)
    table.unregister("c", producer_group="p1")
    assert len(table) == 0


@pytest.mark.parametrize(
    ("client_id", "producers", "group"), [("", [], "g1"), ("c", ["bad group"], "g1"), ("c", [], "")]
)
def test_bad_heartbeat_is_rejected(client_id: str, producers: list[str], group: str) -> None:
    table = ClientTable()
    with pytest.raises(InvalidParameterError):
        table.heartbeat(client_id, producers, [ConsumerData(group=group)], now_ms=0)
    assert len(table) == 0


def test_changes_report_the_groups_that_gained_or_lost_a_member() -> None:
    table = ClientTable()
    assert table.heartbeat("c", [], [consumer("g1"), consumer("g2")], now_ms=0) == {"g1", "g2"}
    assert table.heartbeat("c", [], [consumer("g1"), consumer("g2")], now_ms=1) == set()
    assert table.heartbeat("c", [], [consumer("g2"), consumer("g3")], now_ms=2) == {"g1", "g3"}
    assert table.unregister("c", consumer_group="g2") == {"g2"}
    assert table.unregister("c") == {"g3"}
    table.heartbeat("d", [], [consumer("g4")], now_ms=0)
    assert [info.consumers.keys() for info in table.drop_silent(now_ms=200_000)] == [{"g4"}]


def test_groups_consuming_a_topic() -> None:
    table = ClientTable()
    table.heartbeat("c", [], [consumer("g1", "Orders"), consumer("g2", "Other")], now_ms=0)
    table.heartbeat("d", [], [consumer("g3", "Orders")], now_ms=0)
    assert table.groups_consuming("Orders") == {"g1", "g3"}
