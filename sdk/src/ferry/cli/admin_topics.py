"""mqadmin's topic commands beyond create/list/route/status: deleteTopic, updateTopicPerm,
updateTopicList, cleanUnusedTopic, topicClusterList.

Registered on `ferry admin`'s app when imported (main.py imports it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ferry.cli.admin import (
    DEFAULT_NAMESRV,
    BrokerAddr,
    Cluster,
    Json,
    Namesrv,
    Topic,
    admin_session,
    app,
    read_list_file,
)
from ferry.cli.output import print_json, print_table


@app.command("deleteTopic")
def delete_topic(
    topic: Topic,
    namesrv: Namesrv = DEFAULT_NAMESRV,
    cluster: Cluster = None,
    json: Json = False,
) -> None:
    """Delete a topic from its brokers (of -c only) and every name server. Its config,
    offsets and ConsumeQueues go at once; its records stay in the CommitLog until retention
    deletes their segments."""
    with admin_session(namesrv) as admin:
        done = admin.delete_topic(topic, cluster)
    rows = [(addr, r.queues, r.files) for addr, r in sorted(done.items())]
    if json:
        print_json(
            {
                "topic": topic,
                "brokers": [dict(zip(("broker", "queues", "files"), r, strict=True)) for r in rows],
            }
        )
        return
    print_table(f"topic {topic} deleted", ["broker", "queues removed", "files deleted"], rows)


@app.command("updateTopicPerm")
def update_topic_perm(
    topic: Topic,
    perm: Annotated[int, typer.Option("-p", "--perm", help="2 W, 4 R, 6 RW")],
    namesrv: Namesrv = DEFAULT_NAMESRV,
    broker: BrokerAddr = None,
    cluster: Cluster = None,
    json: Json = False,
) -> None:
    """Change a topic's permission on one broker (-b) or the masters of a cluster (-c)."""
    with admin_session(namesrv) as admin:
        done = admin.update_topic_perm(topic, perm, cluster=cluster, broker_addr=broker)
    if json:
        print_json({"topic": topic, "perm": perm, "brokers": done})
        return
    print_table(f"perm of {topic} set to {perm}", ["broker"], [(a,) for a in done])


@app.command("updateTopicList")
def update_topic_list(
    file: Annotated[
        Path,
        typer.Option(
            "-f",
            "--filename",
            help='JSON: [{"topicName": "T", "readQueueNums": 8, "writeQueueNums": 8, "perm": 6}]',
        ),
    ],
    namesrv: Namesrv = DEFAULT_NAMESRV,
    broker: BrokerAddr = None,
    cluster: Cluster = None,
    json: Json = False,
) -> None:
    """Create or update every topic of a JSON file on a broker (-b) or on the masters of a
    cluster (-c; every cluster when neither). The whole file is checked before any change."""

    from ferry.admin import topics

    specs = read_list_file(file, topics.read_topic_list)
    rows = []
    with admin_session(namesrv) as admin:
        for s in specs:
            done = admin.create_topic(
                s.topic_name,
                s.read_queue_nums,
                s.write_queue_nums,
                s.perm,
                cluster=cluster,
                broker_addr=broker,
            )
            rows += [(s.topic_name, a, s.read_queue_nums, s.write_queue_nums, s.perm) for a in done]
    if json:
        keys = ("topic", "broker", "read", "write", "perm")
        print_json([dict(zip(keys, r, strict=True)) for r in rows])
        return
    print_table(
        f"{len(specs)} topics created or updated",
        ["topic", "broker", "read", "write", "perm"],
        rows,
    )


@app.command("cleanUnusedTopic")
def clean_unused_topic(
    namesrv: Namesrv = DEFAULT_NAMESRV,
    cluster: Cluster = None,
    dry_run: Annotated[
        bool, typer.Option("--dryRun", "--dry-run", help="list them, delete nothing")
    ] = False,
    json: Json = False,
) -> None:
    """Delete topics that never stored a message and that no group consumes (from the
    brokers of -c only, when given, and the name servers). --dryRun lists them only."""
    from ferry.admin import topics

    with admin_session(namesrv) as admin:
        unused = topics.unused_topics(admin)
        done: dict[str, list[str]] = {}
        if not dry_run:
            from ferry.protocol.errors import TopicNotExistError

            for topic in unused:
                try:
                    done[topic] = sorted(admin.delete_topic(topic, cluster))
                except TopicNotExistError:
                    continue  # not on -c's brokers, or deleted meanwhile
    if json:
        print_json({"unused": unused, "deleted": done, "dry_run": dry_run})
        return
    if dry_run:
        print_table(f"{len(unused)} unused topics (dry run)", ["topic"], [(t,) for t in unused])
        return
    rows = [(t, a) for t, addrs in done.items() for a in addrs]
    print_table(f"{len(done)} unused topics deleted", ["topic", "broker"], rows)


@app.command("topicClusterList")
def topic_cluster_list(
    topic: Topic, namesrv: Namesrv = DEFAULT_NAMESRV, json: Json = False
) -> None:
    """The clusters that host a topic."""
    with admin_session(namesrv) as admin:
        route = admin.topic_route(topic)
    clusters = sorted({b.cluster for b in route.broker_datas})
    if json:
        print_json(clusters)
        return
    print_table(f"clusters hosting {topic}", ["cluster"], [(c,) for c in clusters])
