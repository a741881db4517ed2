from __future__ import annotations

import pytest

from ferry.namesrv.route_table import BrokerRef, RouteTable
from ferry.protocol.codes import Perm, ResponseCode
from ferry.protocol.errors import IllegalStateError, TopicNotExistError
from ferry.protocol.messages import QueueData, TopicConfig

TIMEOUT_MS = 1000


def topics(*names: str, queues: int = 4) -> dict[str, TopicConfig]:
    return {n: TopicConfig(n, read_queue_nums=queues, write_queue_nums=queues) for n in names}


def register(
    table: RouteTable,
    broker_name: str = "broker-a",
    broker_id: int = 0,
    addr: str = "127.0.0.1:10911",
    topic_configs: dict[str, TopicConfig] | None = None,
    now_ms: int = 0,
    cluster: str = "DefaultCluster",
    ha_addr: str = "",
    epoch: int = 0,
) -> bool:
    result = table.register(
        cluster=cluster,
        broker_name=broker_name,
        broker_id=broker_id,
        broker_addr=addr,
        ha_addr=ha_addr,
        topics=topic_configs,
        timeout_ms=TIMEOUT_MS,
        now_ms=now_ms,
        epoch=epoch,
    )
    return result.first


def test_master_registration_makes_routes_for_its_topics() -> None:
    table = RouteTable()
    register(table, topic_configs=topics("TopicA", "TopicB", queues=4))

    route = table.route("TopicA")
    assert route.queue_datas == [QueueData("broker-a", 4, 4, Perm.READ_WRITE)]
    assert [(b.cluster, b.broker_name, b.broker_addrs) for b in route.broker_datas] == [
        ("DefaultCluster", "broker-a", {0: "127.0.0.1:10911"})
    ]
    assert table.topic_names() == ["TopicA", "TopicB"]


def test_brokers_of_one_name_share_broker_data_and_slave_gets_master_addrs() -> None:
    table = RouteTable()
    register(table, addr="10.0.0.1:10911", ha_addr="10.0.0.1:10912", topic_configs=topics("T"))
    reply = table.register(
        cluster="DefaultCluster",
        broker_name="broker-a",
        broker_id=1,
        broker_addr="10.0.0.2:10911",
        timeout_ms=TIMEOUT_MS,
        now_ms=0,
    ).reply

    assert (reply.master_addr, reply.ha_addr) == ("10.0.0.1:10911", "10.0.0.1:10912")
    [broker] = table.route("T").broker_datas
    assert broker.broker_addrs == {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}


def test_slave_registration_does_not_change_queue_data() -> None:
    table = RouteTable()
    register(table, topic_configs=topics("T", queues=8))
    slave_topics = topics("T", "Other", queues=2)
    register(table, broker_id=1, addr="127.0.0.1:20911", topic_configs=slave_topics)

    assert table.route("T").queue_datas == [QueueData("broker-a", 8, 8)]
    assert table.topic_names() == ["T"]


def test_master_reregistration_replaces_its_topic_set() -> None:
    table = RouteTable()
    register(table, topic_configs=topics("Kept", "Dropped"))
    register(table, "broker-b", addr="127.0.0.1:11911", topic_configs=topics("Kept", "Dropped"))
    register(table, topic_configs=topics("Kept", "Added"), now_ms=10)

    assert table.topic_names() == ["Added", "Dropped", "Kept"]
    assert [q.broker_name for q in table.route("Dropped").queue_datas] == ["broker-b"]
    assert [q.broker_name for q in table.route("Kept").queue_datas] == ["broker-a", "broker-b"]

    register(table, "broker-b", addr="127.0.0.1:11911", topic_configs=topics("Kept"), now_ms=10)
    assert table.topic_names() == ["Added", "Kept"]
    with pytest.raises(TopicNotExistError):
        table.route("Dropped")


def test_only_new_brokers_count_as_first_registration() -> None:
    table = RouteTable()
    assert register(table) is True
    assert register(table, now_ms=100) is False
    assert register(table, addr="127.0.0.1:19999", now_ms=200) is True


def test_expire_removes_silent_brokers_and_their_routes() -> None:
    table = RouteTable()
    register(table, topic_configs=topics("T"), now_ms=0)
    register(table, broker_id=1, addr="127.0.0.1:20911", now_ms=0)
    register(table, "broker-b", addr="127.0.0.1:11911", topic_configs=topics("T"), now_ms=0)

    assert table.expire(TIMEOUT_MS) == []
    # broker-b keeps registering; broker-a's master and slave go silent.
    register(table, "broker-b", addr="127.0.0.1:11911", topic_configs=topics("T"), now_ms=900)
    removed = table.expire(TIMEOUT_MS + 1)

    assert sorted(removed, key=lambda r: r.broker_id) == [
        BrokerRef("DefaultCluster", "broker-a", 0, "127.0.0.1:10911"),
        BrokerRef("DefaultCluster", "broker-a", 1, "127.0.0.1:20911"),
    ]
    assert [q.broker_name for q in table.route("T").queue_datas] == ["broker-b"]
    assert list(table.cluster_info().brokers) == ["broker-b"]

    assert [r.broker_name for r in table.expire(900 + TIMEOUT_MS + 1)] == ["broker-b"]
    with pytest.raises(TopicNotExistError):
        table.route("T")
    assert table.topic_names() == []


def test_queue_data_survives_a_lost_master_while_a_slave_lives() -> None:
    table = RouteTable()
    register(table, topic_configs=topics("T"), now_ms=0)
    register(table, broker_id=1, addr="127.0.0.1:20911", now_ms=500)

    assert [r.broker_id for r in table.expire(TIMEOUT_MS + 1)] == [0]
    route = table.route("T")
    assert [q.broker_name for q in route.queue_datas] == ["broker-a"]
    assert route.broker_datas[0].broker_addrs == {1: "127.0.0.1:20911"}


def test_unregister_removes_only_a_matching_address() -> None:
    table = RouteTable()
    register(table, topic_configs=topics("T"))

    assert table.unregister(broker_name="broker-a", broker_id=0, broker_addr="1.2.3.4:1") is None
    assert table.route("T").queue_datas
    removed = table.unregister(broker_name="broker-a", broker_id=0, broker_addr="127.0.0.1:10911")

    assert removed == BrokerRef("DefaultCluster", "broker-a", 0, "127.0.0.1:10911")
    assert table.topic_names() == []
    assert table.cluster_info().brokers == {}


def test_route_of_unknown_topic_raises_rocketmq_wording() -> None:
    with pytest.raises(TopicNotExistError) as info:
        RouteTable().route("Nope")

    assert info.value.code == ResponseCode.TOPIC_NOT_EXIST
    assert info.value.message == "No route info of this topic: Nope"


def test_cluster_info_groups_broker_names_by_cluster() -> None:
    table = RouteTable()
    register(table, "broker-b", addr="h:2", cluster="C1")
    register(table, "broker-a", addr="h:1", cluster="C1")
    register(table, "broker-a", broker_id=1, addr="h:3", cluster="C1")
    register(table, "broker-x", addr="h:4", cluster="C2")

    info = table.cluster_info()

    assert info.clusters == {"C1": ["broker-a", "broker-b"], "C2": ["broker-x"]}
    assert info.brokers["broker-a"].broker_addrs == {0: "h:1", 1: "h:3"}
    assert info.brokers["broker-x"].cluster == "C2"


def test_broker_that_changes_id_is_listed_once() -> None:
    table = RouteTable()
    register(table, broker_id=1, addr="h:1")
    register(table, broker_id=0, addr="h:1")

    assert table.cluster_info().brokers["broker-a"].broker_addrs == {0: "h:1"}


OLD, NEW = "127.0.0.1:10911", "127.0.0.1:20911"


def master_of(table: RouteTable, topic: str = "T") -> str:
    return table.route(topic).broker_datas[0].broker_addrs.get(0, "")


def test_a_master_of_an_older_epoch_never_replaces_the_newer_one() -> None:
    """Controller mode: a master paused past its lease resumes and registers as id 0 again
    before it learnt it was replaced (issue 38): the name server keeps the newer master."""
    table = RouteTable()
    register(table, addr=OLD, topic_configs=topics("T"), epoch=1)
    register(table, addr=NEW, topic_configs=topics("T"), epoch=2)
    assert master_of(table) == NEW
    with pytest.raises(IllegalStateError, match=r"epoch 1 is refused.*epoch 2"):
        register(table, addr=OLD, topic_configs=topics("T", "Stale"), epoch=1)
    assert master_of(table) == NEW
    assert table.topic_names() == ["T"]  # the refused one's topics were not taken either
    # on its way to the slave role it unregisters id 0: the newer master's entry stays
    assert table.unregister(broker_name="broker-a", broker_id=0, broker_addr=OLD, epoch=1) is None
    assert table.unregister(broker_name="broker-a", broker_id=0, broker_addr=NEW, epoch=1) is None
    assert master_of(table) == NEW
    # as a slave of the new epoch it registers under its own id
    register(table, broker_id=1, addr=OLD, epoch=2)
    assert table.route("T").broker_datas[0].broker_addrs == {0: NEW, 1: OLD}


def test_the_newest_epoch_is_kept_after_its_master_expired() -> None:
    table = RouteTable()
    register(table, addr=NEW, topic_configs=topics("T"), epoch=2, now_ms=0)
    assert table.expire(now_ms=TIMEOUT_MS + 1)
    with pytest.raises(IllegalStateError):
        register(table, addr=OLD, topic_configs=topics("T"), epoch=1, now_ms=TIMEOUT_MS + 2)
    register(table, addr=OLD, topic_configs=topics("T"), epoch=3, now_ms=TIMEOUT_MS + 2)
    assert master_of(table) == OLD


def test_brokers_without_controller_mode_register_at_epoch_zero_as_before() -> None:
    table = RouteTable()
    register(table, addr=OLD, topic_configs=topics("T"))
    register(table, addr=NEW, topic_configs=topics("T"))  # a replaced master, by hand
    assert master_of(table) == NEW
    assert table.unregister(broker_name="broker-a", broker_id=0, broker_addr=NEW) is not None


def test_routes_name_each_brokers_rocketmq_door_beside_its_ferry_address() -> None:
    table = RouteTable()
    for broker_id, door in ((0, "10.0.0.1:9911"), (1, "")):
        table.register(
            cluster="DefaultCluster",
            broker_name="broker-a",
            broker_id=broker_id,
            broker_addr=f"10.0.0.{broker_id + 1}:10911",
            rocketmq_addr=door,
            topics=topics("T") if broker_id == 0 else None,
            timeout_ms=TIMEOUT_MS,
            now_ms=0,
        )

    [broker] = table.route("T").broker_datas
    assert broker.broker_addrs == {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}
    assert broker.rocketmq_addrs == {0: "10.0.0.1:9911"}  # the slave serves no door
    assert table.cluster_info().brokers["broker-a"].rocketmq_addrs == {0: "10.0.0.1:9911"}
