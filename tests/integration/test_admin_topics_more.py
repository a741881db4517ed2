"""mqadmin's updateTopicList, cleanUnusedTopic and clusterRT through a pipe, against a real
cluster; each command's effect is checked on the cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from admin_pipe_support import admin_piped as piped
from admin_pipe_support import admin_run as run
from admin_pipe_support import lines_with
from itest_support import (
    Cluster,
    module_cluster,  # noqa: F401 - the cluster fixture
)

from ferry.admin import Admin
from ferry.client import Message, MessageQueue, Producer

pytestmark = pytest.mark.integration

LONG = "_of_the_north_warehouse" * 3  # a table that folds cells breaks such names


def topic_configs(cluster: Cluster) -> dict[str, tuple[int, int, int]]:
    with Admin(cluster.namesrv) as admin:
        return {
            c.topic_name: (c.read_queue_nums, c.write_queue_nums, c.perm)
            for c in admin.topic_configs(cluster.broker_addr)
        }


def test_update_topic_list_creates_every_topic_of_the_file(
    cluster: Cluster, tmp_path: Path
) -> None:
    first, second = "ListA" + LONG, "ListB" + LONG
    file = tmp_path / "topics.json"
    file.write_text(
        json.dumps(
            [
                {"topicName": first, "readQueueNums": 2, "writeQueueNums": 2, "perm": 6},
                {
                    "topicName": second,
                    "readQueueNums": 3,
                    "writeQueueNums": 3,
                    "perm": 4,
                    "order": False,
                    "topicFilterType": "SINGLE_TAG",
                },
            ]
        )
    )
    out = piped(cluster, "updateTopicList", "-f", str(file))
    lines_with(out, first, cluster.broker_addr)
    lines_with(out, second, cluster.broker_addr)
    configs = topic_configs(cluster)
    assert configs[first] == (2, 2, 6) and configs[second] == (3, 3, 4)
    # a bad file changes nothing: every name is checked before any topic is made
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"topicName": "Fine" + LONG}, {"topicName": "bad name!"}]))
    refused = run(cluster, "updateTopicList", "-f", str(bad))
    assert refused.returncode == 2 and "bad name!" in refused.stderr
    assert "Fine" + LONG not in topic_configs(cluster)
    for text in ("{}", "[]", "not json"):
        bad.write_text(text)
        assert run(cluster, "updateTopicList", "-f", str(bad)).returncode == 2
    missing = run(cluster, "updateTopicList", "-f", str(tmp_path / "none.json"))
    assert missing.returncode == 2 and "none.json" in missing.stderr


def test_clean_unused_topic_deletes_only_topics_without_messages_or_groups(
    cluster: Cluster,
) -> None:
    unused, stored, consumed = "Unused" + LONG, "Stored" + LONG, "Consumed" + LONG
    for topic in (unused, stored, consumed):
        piped(cluster, "updateTopic", "-t", topic, "-r", "2", "-w", "2")
    with Producer("CleanProducer", cluster.namesrv) as producer:
        producer.send(Message(stored, b"kept"))
    with Admin(cluster.namesrv) as admin:
        admin.update_consumer_offset("CleanGroup", MessageQueue(consumed, "broker-a", 0), 0)
    listed = piped(cluster, "cleanUnusedTopic", "--dryRun")
    lines_with(listed, unused)
    assert stored not in listed and consumed not in listed
    assert unused in topic_configs(cluster)  # a dry run deletes nothing
    out = piped(cluster, "cleanUnusedTopic")
    lines_with(out, unused, cluster.broker_addr)
    configs = topic_configs(cluster)
    assert unused not in configs and stored in configs and consumed in configs
    names = json.loads(piped(cluster, "topicList", "--json"))
    assert unused not in names and stored in names
    assert run(cluster, "cleanUnusedTopic", "--dryRun", "-x").returncode == 2


def test_cluster_rt_sends_to_every_master_each_round(cluster: Cluster) -> None:
    topic = "RT" + LONG
    piped(cluster, "updateTopic", "-t", topic, "-r", "1", "-w", "1")
    with Admin(cluster.namesrv) as admin:
        queue = MessageQueue(topic, "broker-a", 0)
        before = admin.max_offset(queue)
    out = piped(cluster, "clusterRT", "-t", topic, "-a", "5", "-r", "2")
    rows = lines_with(out, "DefaultCluster", "broker-a", cluster.broker_addr)
    assert [r.split()[3] for r in rows] == ["1", "2"]  # one row a round
    got = json.loads(piped(cluster, "clusterRT", "-t", topic, "-a", "3", "-r", "1", "--json"))
    assert [(g["ok"], g["failed"]) for g in got] == [(3, 0)]
    assert got[0]["avg_ms"] > 0 and got[0]["max_ms"] >= got[0]["avg_ms"]
    with Admin(cluster.namesrv) as admin:
        assert admin.max_offset(queue) - before == 5 * 2 + 3  # every send was stored
    no_topic = run(cluster, "clusterRT")
    assert no_topic.returncode == 2 and "-t" in no_topic.stderr
    assert run(cluster, "clusterRT", "-t", topic, "-a", "0").returncode == 2
    other = run(cluster, "clusterRT", "-t", topic, "-c", "NoSuchCluster")
    assert other.returncode == 3 and "NoSuchCluster" in other.stderr


def test_update_sub_group_list_creates_every_group_of_the_file(
    cluster: Cluster, tmp_path: Path
) -> None:
    first, second = "GroupA" + LONG, "GroupB" + LONG
    file = tmp_path / "groups.json"
    file.write_text(
        json.dumps(
            [
                {"groupName": first, "retryMaxTimes": 3, "consumeEnable": False},
                {"groupName": second, "retryQueueNums": 2, "groupRetryPolicy": {"type": "x"}},
            ]
        )
    )
    out = piped(cluster, "updateSubGroupList", "-f", str(file))
    lines_with(out, first, cluster.broker_addr)
    lines_with(out, second, cluster.broker_addr)
    with Admin(cluster.namesrv) as admin:
        groups = {g.group_name: g for g in admin.sub_groups(cluster.broker_addr)}
    assert (groups[first].retry_max_times, groups[first].consume_enable) == (3, False)
    assert (groups[second].retry_queue_nums, groups[second].retry_max_times) == (2, 16)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"groupName": "Fine" + LONG}, {"groupName": "bad group!"}]))
    refused = run(cluster, "updateSubGroupList", "-f", str(bad))
    assert refused.returncode == 2 and "bad group!" in refused.stderr
    with Admin(cluster.namesrv) as admin:
        assert "Fine" + LONG not in {g.group_name for g in admin.sub_groups(cluster.broker_addr)}
    bad.write_text('[{"retryMaxTimes": 1}]')  # no groupName
    assert run(cluster, "updateSubGroupList", "-f", str(bad)).returncode == 2
