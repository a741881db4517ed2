"""mqadmin's consumer and producer group commands: updateSubGroup, updateSubGroupList,
deleteSubGroup, consumerConnection, producerConnection, producer, resetOffsetByTime.

Registered on `ferry admin`'s app when imported (main.py imports it).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ferry.cli.admin import (
    DEFAULT_NAMESRV,
    BrokerAddr,
    Cluster,
    Group,
    Json,
    Namesrv,
    RequiredBrokerAddr,
    Topic,
    admin_session,
    app,
    read_list_file,
)
from ferry.cli.output import not_found, print_json, print_table, progress, show_time
from ferry.cli.query import parse_time

if TYPE_CHECKING:
    from ferry.protocol.messages import ClientConnection, SubscriptionGroupConfig


def _bool(name: str, text: str | None) -> bool | None:
    if text is None:
        return None
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise typer.BadParameter(f"{name} must be true or false, not {text!r}")
    return value == "true"


@app.command("updateSubGroup")
def update_sub_group(
    group: Group,
    namesrv: Namesrv = DEFAULT_NAMESRV,
    broker: BrokerAddr = None,
    cluster: Cluster = None,
    consume_enable: Annotated[str | None, typer.Option("-s", "--consumeEnable")] = None,
    from_min: Annotated[str | None, typer.Option("-m", "--consumeFromMinEnable")] = None,
    broadcast: Annotated[str | None, typer.Option("-d", "--consumeBroadcastEnable")] = None,
    orderly: Annotated[str | None, typer.Option("-o", "--consumeMessageOrderly")] = None,
    retry_queues: Annotated[int | None, typer.Option("-q", "--retryQueueNums")] = None,
    retry_max: Annotated[int | None, typer.Option("-r", "--retryMaxTimes")] = None,
    notify: Annotated[
        str | None,
        typer.Option("-a", "--notifyConsumerIdsChangedEnable", "--notifyConsumerIdsChanged"),
    ] = None,
    json: Json = False,
) -> None:
    """Create or update a subscription group (what is not given keeps its value)."""
    changes = {
        "consume_enable": _bool("consumeEnable", consume_enable),
        "consume_from_min_enable": _bool("consumeFromMinEnable", from_min),
        "consume_broadcast_enable": _bool("consumeBroadcastEnable", broadcast),
        "consume_message_orderly": _bool("consumeMessageOrderly", orderly),
        "retry_queue_nums": retry_queues,
        "retry_max_times": retry_max,
        "notify_consumer_ids_changed_enable": _bool("notifyConsumerIdsChangedEnable", notify),
    }
    given = {k: v for k, v in changes.items() if v is not None}
    import msgspec

    from ferry.protocol.messages import SubscriptionGroupConfig

    with admin_session(namesrv) as admin:
        addrs = [broker] if broker else sorted(set(admin.master_addrs(cluster).values()))
        done: dict[str, SubscriptionGroupConfig] = {}
        for addr in addrs:
            current = next((g for g in admin.sub_groups(addr) if g.group_name == group), None)
            config = msgspec.structs.replace(
                current or SubscriptionGroupConfig(group_name=group), **given
            )
            admin.update_sub_group(config, broker_addr=addr)
            done[addr] = config
    if json:
        print_json({addr: msgspec.to_builtins(c) for addr, c in done.items()})
        return
    print_table(
        f"subscription group {group}",
        [
            "broker",
            "consume",
            "broadcast",
            "from min",
            "orderly",
            "retry queues",
            "retry max times",
        ],
        [
            (
                a,
                c.consume_enable,
                c.consume_broadcast_enable,
                c.consume_from_min_enable,
                c.consume_message_orderly,
                c.retry_queue_nums,
                c.retry_max_times,
            )
            for a, c in done.items()
        ],
    )


@app.command("updateSubGroupList")
def update_sub_group_list(
    file: Annotated[
        Path,
        typer.Option(
            "-f",
            "--filename",
            help='JSON: [{"groupName": "G", "retryMaxTimes": 16, "consumeEnable": true}]',
        ),
    ],
    namesrv: Namesrv = DEFAULT_NAMESRV,
    broker: BrokerAddr = None,
    cluster: Cluster = None,
    json: Json = False,
) -> None:
    """Create or update every subscription group of a JSON file on a broker (-b) or the
    masters of a cluster (-c; every cluster when neither). Keys a group's entry leaves out
    take their defaults. The whole file is checked before any change."""

    from ferry.admin import groups

    configs = read_list_file(file, groups.read_sub_group_list)
    rows = []
    with admin_session(namesrv) as admin:
        for c in configs:
            for addr in admin.update_sub_group(c, cluster=cluster, broker_addr=broker):
                rows.append((c.group_name, addr, c.consume_enable, c.retry_max_times))
    if json:
        keys = ("group", "broker", "consume_enable", "retry_max_times")
        print_json([dict(zip(keys, r, strict=True)) for r in rows])
        return
    print_table(
        f"{len(configs)} subscription groups created or updated",
        ["group", "broker", "consume", "retry max times"],
        rows,
    )


@app.command("deleteSubGroup")
def delete_sub_group(
    group: Group,
    namesrv: Namesrv = DEFAULT_NAMESRV,
    broker: BrokerAddr = None,
    cluster: Cluster = None,
    remove_offset: Annotated[
        bool, typer.Option("-r", "--removeOffset", help="drop its committed offsets too")
    ] = False,
    json: Json = False,
) -> None:
    """Delete a subscription group from one broker (-b) or the masters of a cluster (-c)."""
    with admin_session(namesrv) as admin:
        done = admin.delete_sub_group(
            group, cluster=cluster, broker_addr=broker, clean_offset=remove_offset
        )
    if json:
        print_json({"group": group, "brokers": done, "offsets_removed": remove_offset})
        return
    print_table(f"subscription group {group} deleted", ["broker"], [(a,) for a in done])


def _connection_rows(by_broker: dict[str, list[ClientConnection]]) -> list[tuple[object, ...]]:
    return [
        (c.client_id, c.client_addr, c.language, c.version, broker)
        for broker, conns in sorted(by_broker.items())
        for c in conns
    ]


CONNECTION_COLUMNS = ["client id", "client addr", "language", "version", "broker"]


@app.command("consumerConnection")
def consumer_connection(
    group: Group,
    namesrv: Namesrv = DEFAULT_NAMESRV,
    broker: BrokerAddr = None,
    json: Json = False,
) -> None:
    """The live members of a consumer group (those one broker -b knows) and what they
    subscribe to."""
    with admin_session(namesrv) as admin:
        replies = admin.consumer_connections(group)
    if broker is not None:
        replies = {a: r for a, r in replies.items() if a == broker}
    by_broker = {a: list(r.connections) for a, r in replies.items() if r.connections}
    if not by_broker:
        not_found(f"consumer group {group} has no live member (CONSUMER_NOT_ONLINE)")
    first = next(r for r in replies.values() if r.connections)
    if json:
        import msgspec

        print_json(
            {
                "group": group,
                "connections": [
                    {**msgspec.to_builtins(c), "broker": a}
                    for a, conns in sorted(by_broker.items())
                    for c in conns
                ],
                "consume_type": first.consume_type,
                "message_model": first.message_model,
                "consume_from": first.consume_from,
                "subscriptions": msgspec.to_builtins(first.subscriptions),
            }
        )
        return
    print_table(f"members of {group}", CONNECTION_COLUMNS, _connection_rows(by_broker))
    print_table(
        f"{first.consume_type} / {first.message_model} / {first.consume_from}",
        ["topic", "type", "expression"],  # type: TAG or SQL92
        [(s.topic, s.expression_type, s.expression) for s in first.subscriptions],
    )


@app.command("producerConnection")
def producer_connection(
    group: Annotated[str, typer.Option("-g", "--producerGroup", help="producer group")],
    topic: Annotated[str | None, typer.Option("-t", "--topic", help="its brokers only")] = None,
    namesrv: Namesrv = DEFAULT_NAMESRV,
    json: Json = False,
) -> None:
    """The live producers of a producer group (they heartbeat with their group)."""
    with admin_session(namesrv) as admin:
        replies = admin.producer_connections(group, topic)
    by_broker = {a: list(r.connections) for a, r in replies.items() if r.connections}
    if not by_broker:
        not_found(f"producer group {group} has no live producer")
    if json:
        import msgspec

        print_json(
            [
                {**msgspec.to_builtins(c), "broker": a}
                for a, conns in sorted(by_broker.items())
                for c in conns
            ]
        )
        return
    print_table(f"producers of {group}", CONNECTION_COLUMNS, _connection_rows(by_broker))


@app.command("producer")
def producer(
    broker: RequiredBrokerAddr,
    namesrv: Namesrv = DEFAULT_NAMESRV,
    json: Json = False,
) -> None:
    """Every live producer on a broker, by producer group."""
    from ferry.admin import groups

    with admin_session(namesrv) as admin:
        by_group = groups.all_producers(admin, broker)
    if json:
        import msgspec

        print_json({g: msgspec.to_builtins(conns) for g, conns in by_group.items()})
        return
    print_table(
        f"producers on {broker}",
        ["producer group", "client id", "client addr", "language", "version"],
        [
            (g, c.client_id, c.client_addr, c.language, c.version)
            for g, conns in by_group.items()
            for c in conns
        ],
    )


@app.command("resetOffsetByTime")
def reset_offset_by_time(
    group: Group,
    topic: Topic,
    timestamp: Annotated[
        str | None,
        typer.Option("-s", "--timestamp", help="'now', ms, ISO 8601 or yyyy-MM-dd#HH:mm:ss:SSS"),
    ] = None,
    namesrv: Namesrv = DEFAULT_NAMESRV,
    force: Annotated[
        bool, typer.Option("-f", "--force", help="accepted for mqadmin; always applied")
    ] = True,
    broker: Annotated[
        str | None, typer.Option("-b", "--broker", help="this broker's queues (name or address)")
    ] = None,
    queue_id: Annotated[int | None, typer.Option("-q", "--queue", help="this queue id")] = None,
    offset: Annotated[
        int | None, typer.Option("-o", "--offset", help="to this offset, not a time")
    ] = None,
    json: Json = False,
) -> None:
    """Move a group's offsets of a topic (of one broker -b, one queue -q) to the first
    message stored at or after a time (-s), or to an offset (-o); live members go on from
    there without a restart."""
    del force
    if (timestamp is None) == (offset is None):
        raise typer.BadParameter("give a time (-s) or an offset (-o)")
    when = 0
    if timestamp is not None:
        now = timestamp.strip().lower() == "now"
        when = int(time.time() * 1000) if now else parse_time(timestamp, 0)
    with admin_session(namesrv) as admin, progress() as bar:
        masters = admin.master_addrs() if broker else {}
        queues = [
            q
            for q in admin.queues(topic)
            if (queue_id is None or q.queue_id == queue_id)
            and (broker is None or broker in (q.broker_name, masters.get(q.broker_name)))
        ]
        if not queues:
            which = f"{broker or '*'}#{'*' if queue_id is None else queue_id}"
            not_found(f"{topic} has no queue {which}")
        if offset is not None:
            offsets = dict.fromkeys(queues, offset)
            admin.reset_offsets(group, topic, offsets)
        else:
            task = bar.add_task("finding offsets", total=None)

            def advance(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            offsets = admin.reset_offset_by_time(group, topic, when, advance, queues)
    rows = [(q.broker_name, q.queue_id, o) for q, o in sorted(offsets.items())]
    if json:
        print_json(
            {
                "group": group,
                "topic": topic,
                "timestamp_ms": when,
                "offsets": [dict(zip(("broker", "queue", "offset"), r, strict=True)) for r in rows],
            }
        )
        return
    print_table(
        f"offsets of {group} on {topic} reset to "
        + (f"offset {offset}" if offset is not None else f"{show_time(when)} UTC"),
        ["broker", "queue", "offset"],
        rows,
    )
