"""`ferry admin <command>` (and `mqadmin`): mqadmin's command names and short flags.

The command modules import the client (zmq, msgspec, OpenTelemetry) inside the commands, not
at the top: `--help` and a mistyped flag never pay for it (issue 24.6)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from ferry.cli.completion import (
    complete_broker_addr,
    complete_cluster,
    complete_group,
    complete_topic,
)
from ferry.cli.credentials import client_options
from ferry.cli.groups import CaseInsensitiveGroup
from ferry.cli.output import die, print_json, print_table, show_time
from ferry.protocol.errors import FerryError

if TYPE_CHECKING:
    from ferry.admin import Admin

app = typer.Typer(
    cls=CaseInsensitiveGroup,
    no_args_is_help=True,
    help=(
        "Administer topics, groups and brokers (mqadmin's commands; names ignore case). "
        "With authentication on: --access-key KEY --secret-key SECRET anywhere on the line, "
        "or FERRY_ACCESS_KEY / FERRY_SECRET_KEY; with tlsEnable, --tls-server-key FILE "
        "(the cluster's server.key) or FERRY_TLS_SERVER_KEY."
    ),
    rich_markup_mode=None,
)

Namesrv = Annotated[
    str,
    typer.Option(
        "-n",
        "--namesrv",
        envvar="NAMESRV_ADDR",
        metavar="HOST:PORT",
        help="name server(s), host:port;...",
    ),
]
Json = Annotated[bool, typer.Option("--json", help="machine-readable output")]
Topic = Annotated[
    str,
    typer.Option(
        "-t", "--topic", metavar="TOPIC", help="topic name", autocompletion=complete_topic
    ),
]
Group = Annotated[
    str,
    typer.Option(
        "-g",
        "--group",
        "--groupName",
        "--consumerGroup",
        metavar="GROUP",
        help="consumer group",
        autocompletion=complete_group,
    ),
]
Cluster = Annotated[
    str | None,
    typer.Option(
        "-c",
        "--cluster",
        "--clusterName",
        metavar="CLUSTER",
        help="every master of it",
        autocompletion=complete_cluster,
    ),
]
BrokerAddr = Annotated[
    str | None,
    typer.Option(
        "-b",
        "--brokerAddr",
        metavar="HOST:PORT",
        help="one broker, host:port",
        autocompletion=complete_broker_addr,
    ),
]
RequiredBrokerAddr = Annotated[
    str,
    typer.Option(
        "-b",
        "--brokerAddr",
        metavar="HOST:PORT",
        help="the broker, host:port",
        autocompletion=complete_broker_addr,
    ),
]
DEFAULT_NAMESRV = "127.0.0.1:9876"

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


@contextmanager
def admin_session(namesrv: str) -> Iterator[Admin]:
    """A started Admin; a FerryError inside ends the command with its exit code."""
    from ferry.admin import Admin

    try:
        with Admin(namesrv, **client_options()) as admin:
            yield admin
    except FerryError as err:
        die(err)


def read_list_file(file: Path, parse: Callable[[bytes], T]) -> T:
    """An updateTopicList / updateSubGroupList file, parsed whole; any fault is a usage error
    (exit code 2) naming the file."""
    try:
        return parse(file.read_bytes())
    except OSError as exc:
        raise typer.BadParameter(f"cannot read {file}: {exc.strerror}") from None
    except FerryError as err:
        raise typer.BadParameter(f"{file}: {err.message}") from None


@app.command("updateTopic")
def update_topic(
    topic: Topic,
    namesrv: Namesrv = DEFAULT_NAMESRV,
    cluster: Annotated[
        str | None, typer.Option("-c", "--cluster", "--clusterName", help="every broker of it")
    ] = None,
    broker: Annotated[
        str | None, typer.Option("-b", "--broker-addr", "--brokerAddr", help="one broker")
    ] = None,
    read_queues: Annotated[int, typer.Option("-r", "--read-queue-nums", "--readQueueNums")] = 8,
    write_queues: Annotated[int, typer.Option("-w", "--write-queue-nums", "--writeQueueNums")] = 8,
    perm: Annotated[int, typer.Option("-p", "--perm", help="2 W, 4 R, 6 RW")] = 6,
    json: Json = False,
) -> None:
    """Create or update a topic on a broker (-b) or on every broker of a cluster (-c)."""
    if not cluster and not broker:
        cluster = "DefaultCluster"
    with admin_session(namesrv) as admin:
        done = admin.create_topic(
            topic, read_queues, write_queues, perm, cluster=cluster, broker_addr=broker
        )
    if json:
        print_json({"topic": topic, "brokers": done})
        return
    print_table(
        f"topic {topic} created or updated",
        ["broker", "read", "write", "perm"],
        [(b, read_queues, write_queues, perm) for b in done],
    )


@app.command("topicList")
def topic_list(
    namesrv: Namesrv = DEFAULT_NAMESRV,
    with_clusters: Annotated[
        bool,
        typer.Option("-c", "--clusterModel", help="each topic's clusters and consumer groups"),
    ] = False,
    json: Json = False,
) -> None:
    """List every topic the name servers know (-c: with their clusters and groups)."""
    with admin_session(namesrv) as admin:
        topics = sorted(admin.topic_list())
        if with_clusters:
            rows = _topic_clusters(admin, topics)
    if not with_clusters:
        if json:
            print_json(topics)
            return
        print_table(f"{len(topics)} topics", ["topic"], [(t,) for t in topics])
        return
    if json:
        print_json([{"cluster": c, "topic": t, "groups": g} for c, t, g in rows])
        return
    table = [(c, t, g) for c, t, groups in rows for g in (groups or [""])]
    print_table(f"{len(topics)} topics", ["cluster", "topic", "consumer group"], table)


def _topic_clusters(admin: Admin, topics: list[str]) -> list[tuple[str, str, list[str]]]:
    """(cluster, topic, groups consuming it) for each topic a broker still serves."""
    from ferry.protocol.errors import TopicNotExistError

    rows: list[tuple[str, str, list[str]]] = []
    for topic in topics:
        try:
            clusters = sorted({b.cluster for b in admin.topic_route(topic).broker_datas})
            groups = admin.consumer_groups(topic)
        except TopicNotExistError:
            continue  # deleted meanwhile
        rows.extend((c, topic, groups) for c in clusters)
    return rows


@app.command("topicRoute")
def topic_route(
    topic: Topic,
    namesrv: Namesrv = DEFAULT_NAMESRV,
    as_list: Annotated[
        bool, typer.Option("-l", "--list", help="accepted for mqadmin: tables are the default")
    ] = False,
    json: Json = False,
) -> None:
    """Show a topic's brokers and queues."""
    del as_list
    with admin_session(namesrv) as admin:
        route = admin.topic_route(topic)
    if json:
        print_json(route)
        return
    addrs = {b.broker_name: b for b in route.broker_datas}
    rows = []
    for q in sorted(route.queue_datas, key=lambda q: q.broker_name):
        b = addrs.get(q.broker_name)
        rows.append(
            (
                q.broker_name,
                b.cluster if b else "",
                ", ".join(f"{i}={a}" for i, a in sorted((b.broker_addrs if b else {}).items())),
                q.read_queue_nums,
                q.write_queue_nums,
                q.perm,
            )
        )
    order = f" (order conf {route.order_topic_conf})" if route.order_topic_conf else ""
    print_table(
        f"route of {topic}{order}",
        ["broker", "cluster", "addresses (id=addr)", "read", "write", "perm"],
        rows,
    )


@app.command("topicStatus")
def topic_status(topic: Topic, namesrv: Namesrv = DEFAULT_NAMESRV, json: Json = False) -> None:
    """Min and max offset of each queue of a topic."""
    with admin_session(namesrv) as admin:
        stats = admin.topic_stats(topic)
    if json:
        print_json(stats)
        return
    rows = [
        (broker, q.queue_id, q.min_offset, q.max_offset, show_time(q.last_store_ms))
        for broker, queues in sorted(stats.items())
        for q in queues
    ]
    print_table(
        f"status of {topic}",
        ["broker", "queue", "min offset", "max offset", "last store (UTC)"],
        rows,
    )


@app.command("clusterList")
def cluster_list(
    namesrv: Namesrv = DEFAULT_NAMESRV,
    only: Annotated[
        str | None,
        typer.Option(
            "-c",
            "--clusterName",
            "--cluster",
            metavar="CLUSTER",
            help="this cluster only",
            autocompletion=complete_cluster,
        ),
    ] = None,
    json: Json = False,
) -> None:
    """Clusters, their broker groups and addresses."""
    with admin_session(namesrv) as admin:
        info = admin.cluster_info()
    if only is not None:
        if only not in info.clusters:
            from ferry.cli.output import not_found

            not_found(f"cluster {only} is unknown to the name server")
        import msgspec

        kept = set(info.clusters[only])
        info = msgspec.structs.replace(
            info,
            clusters={only: info.clusters[only]},
            brokers={n: d for n, d in info.brokers.items() if n in kept},
        )
    if json:
        print_json(info)
        return
    rows = []
    for cluster, names in sorted(info.clusters.items()):
        for name in sorted(names):
            data = info.brokers.get(name)
            for bid, addr in sorted((data.broker_addrs if data else {}).items()):
                rows.append((cluster, name, bid, "master" if bid == 0 else "slave", addr))
    print_table("clusters", ["cluster", "broker", "id", "role", "address"], rows)
