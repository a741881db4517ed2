"""mqadmin's topic commands beyond create/list/route/status: deleteTopic, updateTopicPerm.

Registered on `ferry admin`'s app when imported (main.py imports it).
"""

from __future__ import annotations

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
