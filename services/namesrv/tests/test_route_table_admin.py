"""The route table's admin operations: deleteTopic, wipeWritePerm / addWritePerm."""

from __future__ import annotations

import pytest

from ferry.namesrv.route_table import RouteTable
from ferry.protocol.codes import Perm
from ferry.protocol.errors import TopicNotExistError
from ferry.protocol.messages import TopicConfig


def register(table: RouteTable, name: str, cluster: str, *topics: str) -> None:
    table.register(
        cluster=cluster,
        broker_name=name,
        broker_id=0,
        broker_addr=f"127.0.0.1:{10911 if name == 'broker-a' else 10921}",
        topics={t: TopicConfig(t, 2, 2) for t in topics},
        timeout_ms=10_000,
        now_ms=0,
    )


def test_delete_topic_drops_its_route_or_only_one_clusters_part() -> None:
    table = RouteTable()
    register(table, "broker-a", "c1", "T", "U")
    register(table, "broker-b", "c2", "T")
    assert table.delete_topic("T", "c2")
    assert [q.broker_name for q in table.route("T").queue_datas] == ["broker-a"]
    assert table.delete_topic("T")
    with pytest.raises(TopicNotExistError):
        table.route("T")
    assert table.topic_names() == ["U"]
    assert not table.delete_topic("T")


def test_wiped_write_perm_survives_registration_until_added_back() -> None:
    table = RouteTable()
    register(table, "broker-a", "c1", "T", "U")
    register(table, "broker-b", "c1", "T")
    assert table.set_write_perm("broker-a", writable=False) == 2
    perms = {q.broker_name: q.perm for q in table.route("T").queue_datas}
    assert perms == {"broker-a": Perm.READ, "broker-b": Perm.READ_WRITE}
    register(table, "broker-a", "c1", "T", "U")  # its next registration
    assert table.route("U").queue_datas[0].perm == Perm.READ
    assert table.set_write_perm("broker-a", writable=True) == 2
    assert table.route("U").queue_datas[0].perm == Perm.READ_WRITE
