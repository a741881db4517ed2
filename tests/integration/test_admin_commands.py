"""mqadmin's administration commands against one real cluster: each runs in-process through
Typer's CliRunner and its effect is checked on the cluster (routes, files, clients)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import typer
from itest_support import (
    Cluster,
    module_cluster,  # noqa: F401 - the cluster fixture
    wait_for,
)
from typer.testing import CliRunner, Result

from ferry.admin import Admin
from ferry.cli.completion import complete_group, complete_topic
from ferry.cli.main import app as ferry_app
from ferry.cli.output import show_time
from ferry.client import (
    ConsumeFromWhere,
    ConsumeResult,
    Message,
    MessageExt,
    MessageQueue,
    Producer,
    PullConsumer,
    PushConsumer,
)
from ferry.protocol.errors import FerryError, NoPermissionError
from ferry.runtime.config import BrokerConfig, load_config

pytestmark = pytest.mark.integration

RUNNER = CliRunner()
BIN = Path(sys.executable).parent
# over maxMessageSize 1024 with the broker's allowance for record headers, and incompressible
BIG_BODY = os.urandom(100_000)


def admin(cluster: Cluster, *args: str) -> Result:
    return RUNNER.invoke(ferry_app, ["admin", *args, "-n", cluster.namesrv])


def admin_json(cluster: Cluster, *args: str) -> Any:
    done = admin(cluster, *args, "--json")
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)


def store_root(cluster: Cluster) -> Path:
    return cluster.dir / "broker-a"


def topics_on_namesrv(cluster: Cluster) -> list[str]:
    return admin_json(cluster, "topicList")  # type: ignore[no-any-return]


# ---- topics ----


def test_delete_topic_removes_it_from_broker_namesrv_and_store(cluster: Cluster) -> None:
    made = admin(cluster, "updateTopic", "-t", "DelMe", "-r", "2", "-w", "2")
    assert made.exit_code == 0, made.output
    with Producer("pg-del", cluster.namesrv) as producer:
        for i in range(4):
            producer.send(Message("DelMe", f"m{i}".encode()))
    cq_dir = store_root(cluster) / "consumequeue" / "DelMe"
    wait_for(cq_dir.exists, what="DelMe's ConsumeQueue on disk")
    with Admin(cluster.namesrv) as a:
        a.update_consumer_offset("cg-del", MessageQueue("DelMe", "broker-a", 0), 1)
    done = admin_json(cluster, "deleteTopic", "-t", "DelMe")
    assert done["brokers"][0]["queues"] == 2
    assert "DelMe" not in topics_on_namesrv(cluster)
    assert not cq_dir.exists()
    topics_file = json.loads((store_root(cluster) / "config" / "topics.json").read_text())
    assert "DelMe" not in topics_file["topicConfigTable"]
    with Admin(cluster.namesrv) as a:
        assert "DelMe" not in [c.topic_name for c in a.topic_configs(cluster.broker_addr)]
    gone = admin(cluster, "topicRoute", "-t", "DelMe")
    assert gone.exit_code == 3
    assert f"name server {cluster.namesrv}" in gone.stderr
    again = admin(cluster, "deleteTopic", "-t", "DelMe")
    assert again.exit_code == 3  # not found


def test_update_topic_perm_changes_the_route(cluster: Cluster) -> None:
    assert admin(cluster, "updateTopic", "-t", "PermTopic", "-r", "2", "-w", "2").exit_code == 0
    done = admin_json(cluster, "updateTopicPerm", "-t", "PermTopic", "-p", "4")
    assert done["brokers"] == [cluster.broker_addr]

    def perm() -> int:
        route = admin_json(cluster, "topicRoute", "-t", "PermTopic")
        return int(route["queue_datas"][0].get("perm", 6))

    wait_for(lambda: perm() == 4, what="read-only route")
    missing = admin(cluster, "updateTopicPerm", "-t", "NoSuchPermTopic", "-p", "6")
    assert missing.exit_code == 3


# ---- subscription groups ----


def test_update_and_delete_sub_group(cluster: Cluster) -> None:
    done = admin_json(cluster, "updateSubGroup", "-g", "cg-sub", "-r", "3", "-s", "false")
    assert done[cluster.broker_addr]["retry_max_times"] == 3
    with Admin(cluster.namesrv) as a:
        (config,) = [g for g in a.sub_groups(cluster.broker_addr) if g.group_name == "cg-sub"]
        assert config.retry_max_times == 3
        assert not config.consume_enable
        a.create_topic("SubTopic", 1, 1)
        wait_for(lambda: "SubTopic" in a.topic_list(), what="SubTopic's route")
        with pytest.raises(NoPermissionError):  # consumeEnable=false: pulls are refused
            a.pull(MessageQueue("SubTopic", "broker-a", 0), 0, group="cg-sub")
    kept = json.loads((store_root(cluster) / "config" / "subscriptionGroup.json").read_text())
    assert kept["subscriptionGroupTable"]["cg-sub"]["retry_max_times"] == 3
    # what is not given keeps its value
    admin_json(cluster, "updateSubGroup", "-g", "cg-sub", "-s", "true")
    with Admin(cluster.namesrv) as a:
        (config,) = [g for g in a.sub_groups(cluster.broker_addr) if g.group_name == "cg-sub"]
        assert (config.consume_enable, config.retry_max_times) == (True, 3)
        queue = MessageQueue("SubTopic", "broker-a", 0)
        a.update_consumer_offset("cg-sub", queue, 0)
        assert a.consumer_offset("cg-sub", queue) == 0
        admin_json(cluster, "deleteSubGroup", "-g", "cg-sub", "-r")
        assert "cg-sub" not in [g.group_name for g in a.sub_groups(cluster.broker_addr)]
        assert a.consumer_offset("cg-sub", queue) is None
    bad = admin(cluster, "updateSubGroup", "-g", "cg-sub", "-s", "maybe")
    assert bad.exit_code == 2


# ---- broker config ----


def test_get_and_update_broker_config_live_and_persisted(cluster: Cluster) -> None:
    config = admin_json(cluster, "getBrokerConfig", "-b", cluster.broker_addr)
    assert config[cluster.broker_addr]["brokerName"] == "broker-a"
    assert config[cluster.broker_addr]["maxMessageSize"] == str(4 * 1024 * 1024)
    admin_json(cluster, "updateBrokerConfig", "-k", "maxMessageSize", "-v", "1024")
    try:
        with (
            Producer("pg-cfg", cluster.namesrv) as producer,
            pytest.raises(FerryError, match="MESSAGE_ILLEGAL"),
        ):
            producer.send(Message("CfgTopic", BIG_BODY))
        now = admin_json(cluster, "getBrokerConfig")[cluster.broker_addr]
        assert now["maxMessageSize"] == "1024"
        overlay = store_root(cluster) / "config" / "broker-overlay.conf"
        assert "maxMessageSize=1024" in overlay.read_text()
        # what the broker's services read at their next start
        at_start = load_config(
            BrokerConfig, overrides={"storePathRootDir": str(store_root(cluster))}
        )
        assert at_start.max_message_size == 1024
        # a store key goes to the store, which checks it
        admin_json(cluster, "updateBrokerConfig", "-k", "fileReservedTime", "-v", "96")
        assert (
            admin_json(cluster, "getBrokerConfig")[cluster.broker_addr]["fileReservedTime"] == "96"
        )
        refused = admin(cluster, "updateBrokerConfig", "-k", "listenPort", "-v", "1")
        assert refused.exit_code == 2
        assert "restart" in refused.stderr
        unknown = admin(cluster, "updateBrokerConfig", "-k", "noSuchKey", "-v", "1")
        assert unknown.exit_code == 2
        assert "unknown" in unknown.stderr
        bad = admin(cluster, "updateBrokerConfig", "-k", "deleteWhen", "-v", "99")
        assert bad.exit_code == 2  # the store refuses it; nothing changed
        assert admin_json(cluster, "getBrokerConfig")[cluster.broker_addr]["deleteWhen"] == "04"
    finally:
        admin_json(cluster, "updateBrokerConfig", "-k", "maxMessageSize", "-v", str(4 << 20))
    with Producer("pg-cfg", cluster.namesrv) as producer:
        assert producer.send(Message("CfgTopic", BIG_BODY)).status.name == "SEND_OK"


# ---- write permission on the name servers ----


def test_wipe_and_add_write_perm_steer_producers(cluster: Cluster) -> None:
    assert admin(cluster, "updateTopic", "-t", "WipeTopic", "-r", "2", "-w", "2").exit_code == 0
    wiped = admin_json(cluster, "wipeWritePerm", "-b", "broker-a")
    assert wiped["topics"][cluster.namesrv] >= 1
    route = admin_json(cluster, "topicRoute", "-t", "WipeTopic")
    assert route["queue_datas"][0]["perm"] == 4
    # a re-registration (updateTopic makes one at once) does not bring it back
    assert admin(cluster, "updateTopic", "-t", "WipeTopic2", "-r", "1", "-w", "1").exit_code == 0
    wait_for(lambda: "WipeTopic2" in topics_on_namesrv(cluster), what="re-registration")
    assert admin_json(cluster, "topicRoute", "-t", "WipeTopic")["queue_datas"][0]["perm"] == 4
    with (  # the only broker takes no writes now, and the error says why (not "no topic")
        Producer("pg-wipe", cluster.namesrv, send_timeout_ms=1000) as producer,
        pytest.raises(NoPermissionError, match="write permission"),
    ):
        producer.send(Message("WipeTopic", b"refused"))
    admin_json(cluster, "addWritePerm", "-b", "broker-a")
    assert admin_json(cluster, "topicRoute", "-t", "WipeTopic")["queue_datas"][0]["perm"] == 6
    with Producer("pg-wipe", cluster.namesrv) as producer:
        assert producer.send(Message("WipeTopic", b"taken")).status.name == "SEND_OK"


# ---- clients ----


def test_consumer_and_producer_connections_list_live_clients(cluster: Cluster) -> None:
    got = threading.Event()

    def listener(_msgs: list[MessageExt]) -> ConsumeResult:
        got.set()
        return ConsumeResult.SUCCESS

    consumer = PushConsumer("cg-conn", cluster.namesrv)
    consumer.subscribe("ConnTopic", "TagA || TagB")
    consumer.register_listener(listener)
    with Producer("pg-conn", cluster.namesrv) as producer, consumer:
        producer.send(Message("ConnTopic", b"hello", tags="TagA"))

        def listed() -> Any:
            done = admin(cluster, "consumerConnection", "-g", "cg-conn", "--json")
            return json.loads(done.stdout) if done.exit_code == 0 else None

        info = wait_for(listed, what="the consumer in consumerConnection")
        (conn,) = info["connections"]
        assert conn["client_id"] == consumer.client_id
        assert conn["language"] == "PYTHON"
        assert conn["client_addr"]
        assert info["message_model"] == "CLUSTERING"
        assert {"topic": "ConnTopic", "expression": "TagA || TagB"} in info["subscriptions"]
        producers = admin_json(cluster, "producerConnection", "-g", "pg-conn", "-t", "ConnTopic")
        assert [p["language"] for p in producers] == ["PYTHON"]
        assert producers[0]["client_id"].startswith(producers[0]["client_addr"])
        human = admin(cluster, "consumerConnection", "-g", "cg-conn")
        assert human.exit_code == 0
        assert "ConnTopic" in human.stdout
    nobody = admin(cluster, "consumerConnection", "-g", "cg-nobody")
    assert nobody.exit_code == 3
    assert "CONSUMER_NOT_ONLINE" in nobody.stderr


def test_reset_offset_by_time_rewinds_running_push_and_pull_consumers(cluster: Cluster) -> None:
    assert admin(cluster, "updateTopic", "-t", "ResetTopic", "-r", "2", "-w", "2").exit_code == 0
    before = int(time.time() * 1000) - 1
    with Producer("pg-reset", cluster.namesrv) as producer:
        for i in range(6):
            producer.send(Message("ResetTopic", f"r{i}".encode()))
    pushed: list[bytes] = []
    lock = threading.Lock()

    def listener(msgs: list[MessageExt]) -> ConsumeResult:
        with lock:
            pushed.extend(m.body for m in msgs)
        return ConsumeResult.SUCCESS

    push = PushConsumer(
        "cg-reset-push", cluster.namesrv, consume_from=ConsumeFromWhere.FIRST_OFFSET
    )
    push.subscribe("ResetTopic")
    push.register_listener(listener)
    pull = PullConsumer("cg-reset-pull", cluster.namesrv, ConsumeFromWhere.FIRST_OFFSET)
    pull.subscribe("ResetTopic")
    polled: list[bytes] = []
    with push, pull:
        wait_for(lambda: len(pushed) >= 6, timeout=20, what="first push delivery")

        def poll_until(n: int) -> bool:
            polled.extend(m.body for m in pull.poll(timeout=0.5))
            return len(polled) >= n

        wait_for(lambda: poll_until(6), timeout=20, what="first poll delivery")
        pull.commit()
        for group in ("cg-reset-push", "cg-reset-pull"):
            done = admin_json(
                cluster, "resetOffsetByTime", "-g", group, "-t", "ResetTopic", "-s", str(before)
            )
            assert sum(o["offset"] for o in done["offsets"]) == 0
        wait_for(lambda: len(pushed) >= 12, timeout=20, what="push redelivery after the reset")
        wait_for(lambda: poll_until(12), timeout=20, what="poll redelivery after the reset")
    assert sorted(pushed) == sorted(pushed[:6] * 2)
    assert sorted(polled[6:]) == sorted(polled[:6])
    with Admin(cluster.namesrv) as a:
        queues = a.queues("ResetTopic")
        now = admin_json(
            cluster, "resetOffsetByTime", "-g", "cg-reset-pull", "-t", "ResetTopic", "-s", "now"
        )
        assert sum(o["offset"] for o in now["offsets"]) == 6
        assert sum(a.consumer_offset("cg-reset-pull", q) or 0 for q in queues) == 6


def test_stats_all_counts_in_and_out_per_topic_and_group(cluster: Cluster) -> None:
    with Producer("pg-stats", cluster.namesrv) as producer:
        for i in range(7):
            producer.send(Message("StatsTopic", f"s{i}".encode()))
    with PullConsumer("cg-stats", cluster.namesrv, ConsumeFromWhere.FIRST_OFFSET) as consumer:
        consumer.subscribe("StatsTopic")
        got: list[MessageExt] = []
        wait_for(lambda: len(got.__iadd__(consumer.poll(0.5))) >= 7, what="7 messages")
    stats = admin_json(cluster, "statsAll", "-t", "StatsTopic")
    rows = {(r["topic"], r["group"]): r for r in stats["rows"]}
    assert rows[("StatsTopic", "")]["in_total"] == 7
    assert rows[("StatsTopic", "")]["in_tps"] > 0
    assert rows[("StatsTopic", "cg-stats")]["out_total"] == 7
    assert stats["totals"]["in_total"] == 7
    human = admin(cluster, "statsAll")
    assert human.exit_code == 0
    assert "TOTAL" in human.stdout


# ---- output and errors ----


def test_namesrv_from_the_environment_and_exit_codes(cluster: Cluster) -> None:
    listed = RUNNER.invoke(
        ferry_app, ["admin", "clusterList", "--json"], env={"NAMESRV_ADDR": cluster.namesrv}
    )
    assert listed.exit_code == 0, listed.output
    assert "broker-a" in json.loads(listed.stdout)["brokers"]
    usage = RUNNER.invoke(ferry_app, ["admin", "topicRoute", "--no-such-flag"])
    assert usage.exit_code == 2
    down = RUNNER.invoke(ferry_app, ["admin", "topicList", "-n", "127.0.0.1:1"])
    assert down.exit_code == 3
    assert "127.0.0.1:1" in down.stderr


def complete(*words: str) -> list[str]:
    """What the shell gets offered for the last word (bash, through the real entry point)."""
    done = subprocess.run(
        [str(BIN / "ferry")],
        env={
            **os.environ,
            "_FERRY_COMPLETE": "complete_bash",
            "COMP_WORDS": " ".join(["ferry", *words]),
            "COMP_CWORD": str(len(words)),
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert not done.stderr  # nothing but completions reaches the shell
    return done.stdout.split()


def test_shell_completion_offers_topic_and_group_names(cluster: Cluster) -> None:
    assert admin(cluster, "updateTopic", "-t", "CompleteMe", "-r", "1", "-w", "1").exit_code == 0
    admin_json(cluster, "updateSubGroup", "-g", "cg-complete")
    ns = cluster.namesrv
    assert complete("admin", "topicRoute", "-n", ns, "-t", "Complete") == ["CompleteMe"]
    # the callbacks themselves, in-process: groups, and a name server that does not answer
    ctx = typer.Context(typer.main.get_command(ferry_app))
    ctx.params = {"namesrv": ns}
    assert complete_group(ctx, "cg-comp") == ["cg-complete"]
    ctx.params = {"namesrv": "127.0.0.1:1"}
    started = time.monotonic()
    assert complete_topic(ctx, "Complete") == []
    assert time.monotonic() - started < 10


def test_send_message_many_times(cluster: Cluster) -> None:
    sent = admin_json(cluster, "sendMessage", "-t", "ManyTopic", "-p", "x", "--count", "25")
    assert sent["sent"] == 25
    status = admin_json(cluster, "topicStatus", "-t", "ManyTopic")
    assert sum(q[2] - q[1] for q in status["broker-a"]) == 25
    # --json keeps the raw epoch ms; the table prints it in UTC, readable
    stored = max(q[3] for q in status["broker-a"])
    assert abs(stored - time.time() * 1000) < 600_000
    human = RUNNER.invoke(
        ferry_app,
        ["admin", "topicStatus", "-t", "ManyTopic", "-n", cluster.namesrv],
        env={"COLUMNS": "200"},
    )
    assert human.exit_code == 0, human.output
    assert "last store (UTC)" in human.stdout
    assert show_time(stored) in human.stdout
    assert str(stored) not in human.stdout


# ---- last: deletes CommitLog segments other tests' messages live in ----


def test_clean_expired_cq_drops_queues_wholly_below_the_commitlog(cluster: Cluster) -> None:
    assert admin(cluster, "updateTopic", "-t", "CqOld", "-r", "1", "-w", "1").exit_code == 0
    body = os.urandom(1024 * 1024)  # incompressible: stored at its size
    with Producer("pg-cq", cluster.namesrv) as producer:
        for _ in range(6):  # fills two 4 MiB segments
            producer.send(Message("CqOld", body))
        producer.send(Message("CqPad", body))  # starts the next one
    admin_json(cluster, "updateBrokerConfig", "-k", "fileReservedTime", "-v", "0")
    (ran,) = admin_json(cluster, "deleteExpiredCommitLog", "-b", cluster.broker_addr)
    assert ran["commitlog_min_offset"] > 0
    with Admin(cluster.namesrv) as a:
        info = a.broker_runtime_info(cluster.broker_addr)
    assert int(info["commitLogMinOffset"]) == ran["commitlog_min_offset"]
    cq_dir = store_root(cluster) / "consumequeue" / "CqOld"
    assert cq_dir.exists()
    done = admin_json(cluster, "cleanExpiredCQ", "-b", cluster.broker_addr)
    assert done[0]["queues_removed"] >= 1
    assert not cq_dir.exists()
    assert (store_root(cluster) / "consumequeue" / "CqPad").exists()
    again = admin_json(cluster, "cleanExpiredCQ")
    assert again[0]["queues_removed"] == 0
