"""mqadmin's message and consumer commands against a real cluster."""

from __future__ import annotations

import json
from typing import NamedTuple

from itest_support import (
    Cluster,
    module_cluster,  # noqa: F401 - the cluster fixture
)
from typer.testing import CliRunner

from ferry.cli.main import app as ferry_app
from ferry.cli.output import show_time
from ferry.client import ConsumeFromWhere, Message, Producer, PullConsumer

RUNNER = CliRunner()


class Done(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


def admin(cluster: Cluster, *args: str) -> Done:
    """`ferry admin <args>` in-process (the entry point itself is run by test_cli.py)."""
    result = RUNNER.invoke(ferry_app, ["admin", *args, "-n", cluster.namesrv])
    return Done(result.exit_code, result.stdout, result.stderr)


def admin_json(cluster: Cluster, *args: str) -> object:
    done = admin(cluster, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_send_then_read_back_with_every_message_command(cluster: Cluster) -> None:
    sent = admin_json(
        cluster, "sendMessage", "-t", "CliMsgs", "-p", "hello cli", "-c", "TagX", "-k", "k1 k2"
    )
    assert isinstance(sent, dict)
    assert sent["status"] == "SEND_OK"
    read = admin_json(cluster, "consumeMessage", "-t", "CliMsgs", "-c", "5", "--wait", "1")
    assert isinstance(read, list)
    assert [(m["body"], m["tags"], m["keys"]) for m in read] == [
        ("hello cli", "TagX", ["k1", "k2"])
    ]
    assert read[0]["msg_id"] == sent["msg_id"]
    broker, queue = sent["broker"], str(sent["queue_id"])
    by_queue = admin_json(cluster, "printMsgByQueue", "-t", "CliMsgs", "-b", broker, "-i", queue)
    assert isinstance(by_queue, list)
    assert [m["msg_id"] for m in by_queue] == [sent["msg_id"]]
    one = admin_json(
        cluster,
        "queryMsgByOffset",
        "-t",
        "CliMsgs",
        "-b",
        broker,
        "-i",
        queue,
        "-o",
        str(sent["queue_offset"]),
    )
    assert isinstance(one, dict)
    assert one["offset_msg_id"] == sent["offset_msg_id"]
    missing = admin(
        cluster, "queryMsgByOffset", "-t", "CliMsgs", "-b", broker, "-i", queue, "-o", "99"
    )
    assert missing.returncode == 3  # not found
    # mqadmin's own reads never commit: a real group still starts at its own position
    progress = admin_json(cluster, "consumerProgress", "-g", "TOOLS_CONSUMER", "-t", "CliMsgs")
    assert isinstance(progress, list)
    assert all(row["consumer_offset"] == "-" for row in progress)


def test_consumer_progress_shows_lag_per_queue(cluster: Cluster) -> None:
    with Producer("pg-lag", cluster.namesrv) as producer:
        for i in range(12):
            producer.send(Message("LagTopic", f"m{i}".encode()))
    with PullConsumer(
        "cg-lag", cluster.namesrv, ConsumeFromWhere.FIRST_OFFSET, auto_commit=False
    ) as consumer:
        consumer.subscribe("LagTopic")
        got = []
        while len(got) < 5:
            got += consumer.poll(timeout=2.0)
        consumer.commit()
    rows = admin_json(cluster, "consumerProgress", "-g", "cg-lag", "-t", "LagTopic")
    assert isinstance(rows, list)
    assert sum(r["broker_offset"] for r in rows) == 12
    committed = sum(r["consumer_offset"] for r in rows if isinstance(r["consumer_offset"], int))
    assert committed == len(got)
    lag = sum(r["lag"] for r in rows if isinstance(r["lag"], int))
    never_read = sum(r["broker_offset"] for r in rows if r["consumer_offset"] == "-")
    assert committed + lag + never_read == 12


def test_send_rt_status_and_cluster_commands(cluster: Cluster) -> None:
    rt = admin_json(cluster, "checkMsgSendRT", "-t", "RtTopic", "-a", "20", "-s", "64")
    assert isinstance(rt, dict)
    assert rt["count"] == 20
    assert 0 < rt["p50_ms"] <= rt["max_ms"]
    status = admin_json(cluster, "brokerStatus", "-b", cluster.broker_addr)
    assert isinstance(status, dict)
    booted = int(status["bootTimestamp"])  # raw epoch ms in --json
    table = RUNNER.invoke(
        ferry_app,
        ["admin", "brokerStatus", "-b", cluster.broker_addr, "-n", cluster.namesrv],
        env={"COLUMNS": "200"},
    )
    assert table.exit_code == 0, table.output
    assert f"{show_time(booted)} UTC" in table.stdout  # readable in the table
    clusters = admin_json(cluster, "topicClusterList", "-t", "RtTopic")
    assert clusters == ["DefaultCluster"]
    made = admin(cluster, "updateSubGroup", "-g", "rt-readers")
    assert made.returncode == 0, made.stderr
    human = admin(cluster, "consumerprogress", "-g", "rt-readers", "-t", "RtTopic")
    assert human.returncode == 0, human.stderr
    assert "total lag" in human.stdout


def test_consumer_progress_of_an_unknown_group_says_so(cluster: Cluster) -> None:
    with Producer("pg-typo", cluster.namesrv) as producer:
        producer.send(Message("TypoTopic", b"x"))
    made = admin(cluster, "updateSubGroup", "-g", "orders-readers")
    assert made.returncode == 0, made.stderr
    typo = admin(cluster, "consumerProgress", "-g", "orders-reader", "-t", "TypoTopic")
    assert typo.returncode == 3  # not found, not a table of dashes
    assert typo.stdout == ""
    assert "consumer group orders-reader is unknown" in typo.stderr
    assert "did you mean orders-readers" in typo.stderr
    as_json = admin(cluster, "consumerProgress", "-g", "nosuchgroup", "-t", "TypoTopic", "--json")
    assert as_json.returncode == 3
    assert "nosuchgroup is unknown" in as_json.stderr
