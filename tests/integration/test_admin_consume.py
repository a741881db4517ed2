"""mqadmin's consumer commands through a pipe, against a real cluster: getConsumerConfig,
brokerConsumeStats, allocateMQ, skipAccumulatedMessage, cloneGroupOffset. Each command's
effect is checked on the brokers (committed offsets), not only in its output."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from admin_pipe_support import admin_piped as piped
from admin_pipe_support import admin_run as run
from admin_pipe_support import lines_with
from itest_support import Cluster, start_cluster, wait_for

from ferry.admin import Admin
from ferry.client import ConsumeFromWhere, Message, Producer, PullConsumer

pytestmark = pytest.mark.integration

# long names: a table that folds cells breaks them
TOPIC = "ConsumeTopic_" + "of_the_north_warehouse_" * 3
GROUP = "ConsumeGroup_" + "readers_of_the_north_warehouse_" * 2
CLONE = "CloneGroup_" + "copies_of_the_readers_" * 3
SENT = 40


@dataclass
class Setup:
    cluster: Cluster
    committed: dict[int, int]  # queue id -> GROUP's committed offset


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    c = start_cluster(tmp_path_factory.mktemp("consume-admin"))
    try:
        piped(c, "updateTopic", "-t", TOPIC, "-r", "4", "-w", "4")
        with Producer("ConsumeAdminProducer", c.namesrv) as producer:
            for i in range(SENT):
                producer.send(Message(TOPIC, f"m{i}".encode()))
        with PullConsumer(  # a few at a time: one poll could take them all, leaving no lag
            GROUP,
            c.namesrv,
            ConsumeFromWhere.FIRST_OFFSET,
            auto_commit=False,
            max_poll_messages=5,
        ) as consumer:
            consumer.subscribe(TOPIC)
            got: list[object] = []
            deadline = time.monotonic() + 20
            while len(got) < SENT // 2 and time.monotonic() < deadline:
                got += consumer.poll(timeout=1.0)
            consumer.commit()
        with Admin(c.namesrv) as admin:
            committed = {
                q.queue_id: o
                for q in admin.queues(TOPIC)
                if (o := admin.consumer_offset(GROUP, q)) is not None
            }
        assert committed and sum(committed.values()) < SENT  # some lag is left
        yield Setup(c, committed)
    finally:
        c.local.stop()


def offsets(cluster: Cluster, group: str) -> dict[int, int | None]:
    with Admin(cluster.namesrv) as admin:
        return {q.queue_id: admin.consumer_offset(group, q) for q in admin.queues(TOPIC)}


def test_get_consumer_config_shows_every_broker_with_the_group(setup: Setup) -> None:
    c = setup.cluster
    piped(c, "updateSubGroup", "-g", GROUP, "-r", "5")
    out = piped(c, "getConsumerConfig", "-g", GROUP)
    row = lines_with(out, "DefaultCluster", "broker-a", c.broker_addr)[0].split()
    assert row[-2] == "5"  # retry max times, as just set
    got = json.loads(piped(c, "getConsumerConfig", "-g", GROUP, "--json"))
    assert got[0]["addr"] == c.broker_addr and got[0]["config"]["retry_max_times"] == 5
    missing = run(c, "getConsumerConfig", "-g", "NoSuchGroup_xyz")
    assert missing.returncode == 3 and "NoSuchGroup_xyz" in missing.stderr
    assert run(c, "getConsumerConfig").returncode == 2  # -g is required


def test_broker_consume_stats_lists_each_queue_with_its_lag(setup: Setup) -> None:
    c = setup.cluster
    out = piped(c, "brokerConsumeStats", "-b", c.broker_addr)
    rows = lines_with(out, TOPIC, GROUP, "broker-a")
    assert len(rows) == 4  # one per queue
    got = json.loads(piped(c, "brokerConsumeStats", "-b", c.broker_addr, "--json"))
    mine = [q for q in got["queues"] if q["topic"] == TOPIC and q["group"] == GROUP]
    assert {q["queue"]: q["consumer_offset"] for q in mine} == {
        i: setup.committed.get(i, "-") for i in range(4)
    }
    assert sum(q["lag"] for q in mine) == SENT - sum(setup.committed.values())
    assert all(q["lag"] == q["broker_offset"] - q["consumer_offset"] for q in mine)
    # -l: only queues lagging at least that much
    top = max(q["lag"] for q in mine)
    high = json.loads(piped(c, "brokerConsumeStats", "-b", c.broker_addr, "-l", str(top), "--json"))
    assert [q["lag"] for q in high["queues"] if q["group"] == GROUP] == [
        q["lag"] for q in mine if q["lag"] == top
    ]
    assert run(c, "brokerConsumeStats", "-b", c.broker_addr, "-l", "-1").returncode == 2
    unknown = run(c, "brokerConsumeStats", "-b", "127.0.0.1:1")
    assert unknown.returncode == 3 and "127.0.0.1:1" in unknown.stderr
    assert run(c, "brokerConsumeStats").returncode == 2  # -b is required


def test_allocate_mq_splits_queues_averagely(setup: Setup) -> None:
    c = setup.cluster
    ids = ["10.0.0.1@12345#consumer-one", "10.0.0.2@12346#consumer-two", "10.0.0.3@1#three"]
    out = piped(c, "allocateMQ", "-t", TOPIC, "-i", ",".join(ids))
    for cid in ids:
        lines_with(out, cid)
    plan = json.loads(piped(c, "allocateMQ", "-t", TOPIC, "-i", ",".join(ids), "--json"))
    # 4 queues over 3 sorted ids: contiguous blocks, the first one larger
    assert [[q["queue"] for q in plan[cid]] for cid in sorted(ids)] == [[0, 1], [2], [3]]
    assert run(c, "allocateMQ", "-t", TOPIC, "-i", " , ").returncode == 2
    assert run(c, "allocateMQ", "-t", TOPIC).returncode == 2  # -i is required


def test_clone_group_offset_copies_committed_offsets(setup: Setup) -> None:
    c = setup.cluster
    out = piped(c, "cloneGroupOffset", "-s", GROUP, "-d", CLONE, "-t", TOPIC)
    for qid, offset in setup.committed.items():
        lines_with(out, "broker-a", str(qid), str(offset))
    assert "\x1b" not in out  # no progress bar in a pipe
    assert {q: o for q, o in offsets(c, CLONE).items() if o is not None} == setup.committed
    same = run(c, "cloneGroupOffset", "-s", GROUP, "-d", GROUP, "-t", TOPIC)
    assert same.returncode == 2 and "same" in same.stderr
    none = run(c, "cloneGroupOffset", "-s", "NeverCommitted_xyz", "-d", CLONE, "-t", TOPIC)
    assert none.returncode == 3 and "NeverCommitted_xyz" in none.stderr
    assert run(c, "cloneGroupOffset", "-s", GROUP, "-t", TOPIC).returncode == 2  # no -d


def test_skip_accumulated_message_moves_the_group_to_the_max_offsets(setup: Setup) -> None:
    c = setup.cluster
    piped(c, "cloneGroupOffset", "-s", GROUP, "-d", CLONE, "-t", TOPIC)
    with Admin(c.namesrv) as admin:
        tops = {q.queue_id: admin.max_offset(q) for q in admin.queues(TOPIC)}
    out = piped(c, "skipAccumulatedMessage", "-g", CLONE, "-t", TOPIC)
    for qid, top in tops.items():
        lines_with(out, "broker-a", str(qid), str(top))
    assert offsets(c, CLONE) == tops
    progress = json.loads(piped(c, "consumerProgress", "-g", CLONE, "-t", TOPIC, "--json"))
    assert [p["lag"] for p in progress] == [0, 0, 0, 0]
    assert run(c, "skipAccumulatedMessage", "-g", CLONE).returncode == 2  # no -t
    other = run(c, "skipAccumulatedMessage", "-g", CLONE, "-t", TOPIC, "-c", "NoSuchCluster")
    assert other.returncode == 3 and "NoSuchCluster" in other.stderr


def test_producer_lists_every_live_producer_of_a_broker(setup: Setup) -> None:
    c = setup.cluster
    groups = ["ProducerOne_" + "of_the_north_warehouse_" * 2, "ProducerTwo_of_the_south"]
    with Producer(groups[0], c.namesrv) as one, Producer(groups[1], c.namesrv) as two:
        one.send(Message(TOPIC, b"a"))
        two.send(Message(TOPIC, b"b"))

        def listed() -> dict[str, list[dict[str, str]]] | None:
            got = json.loads(piped(c, "producer", "-b", c.broker_addr, "--json"))
            return got if all(got.get(g) for g in groups) else None

        got = wait_for(listed, 30, "both producer groups on the broker")
        assert got is not None
        out = piped(c, "producer", "-b", c.broker_addr)
        for group in groups:
            (conn,) = got[group]
            lines_with(out, group, conn["client_id"])
    assert run(c, "producer").returncode == 2  # -b is required
    nobody = run(c, "producer", "-b", "127.0.0.1:1")
    assert nobody.returncode == 3 and "127.0.0.1:1" in nobody.stderr
