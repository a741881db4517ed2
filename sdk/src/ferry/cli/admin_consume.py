"""mqadmin's consumer commands: getConsumerConfig, brokerConsumeStats, allocateMQ,
skipAccumulatedMessage, cloneGroupOffset.

Registered on `ferry admin`'s app when imported (main.py imports it).
"""

from __future__ import annotations

from typing import Annotated

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
)
from ferry.cli.completion import complete_group
from ferry.cli.output import print_json, print_table, progress


@app.command("getConsumerConfig")
def get_consumer_config(
    group: Group, namesrv: Namesrv = DEFAULT_NAMESRV, json: Json = False
) -> None:
    """A consumer group's subscription group config on every broker master that has it."""
    import msgspec

    from ferry.admin import groups

    with admin_session(namesrv) as admin:
        found = groups.consumer_config(admin, group)
    if json:
        print_json(
            [
                {
                    "cluster": f.cluster,
                    "broker": f.broker_name,
                    "addr": f.addr,
                    "config": msgspec.to_builtins(f.config),
                }
                for f in found
            ]
        )
        return
    print_table(
        f"config of consumer group {group}",
        [
            "cluster",
            "broker",
            "address",
            "consume",
            "broadcast",
            "from min",
            "retry queues",
            "retry max times",
            "notify ids changed",
        ],
        [
            (
                f.cluster,
                f.broker_name,
                f.addr,
                f.config.consume_enable,
                f.config.consume_broadcast_enable,
                f.config.consume_from_min_enable,
                f.config.retry_queue_nums,
                f.config.retry_max_times,
                f.config.notify_consumer_ids_changed_enable,
            )
            for f in found
        ],
    )


@app.command("brokerConsumeStats")
def broker_consume_stats(
    broker: RequiredBrokerAddr,
    namesrv: Namesrv = DEFAULT_NAMESRV,
    level: Annotated[
        int, typer.Option("-l", "--level", help="only queues lagging at least this much")
    ] = 0,
    timeout_ms: Annotated[
        int | None, typer.Option("-t", "--timeoutMillis", help="accepted for mqadmin")
    ] = None,
    is_order: Annotated[
        str | None, typer.Option("-o", "--order", help="accepted for mqadmin")
    ] = None,
    json: Json = False,
) -> None:
    """Every group consuming a topic of one broker, per queue of that broker: broker offset,
    the group's committed offset and the lag (diff)."""
    del timeout_ms, is_order
    if level < 0:
        raise typer.BadParameter(f"-l {level}: a lag is never negative")
    from ferry.admin import consume_progress

    with admin_session(namesrv) as admin:
        stats = consume_progress.broker_consume_stats(admin, broker)
    rows = [
        (
            s.topic,
            s.group,
            s.progress.queue.broker_name,
            s.progress.queue.queue_id,
            s.progress.broker_offset,
            "-" if s.progress.consumer_offset is None else s.progress.consumer_offset,
            s.progress.lag or 0,
        )
        for s in stats
        if (s.progress.lag or 0) >= level
    ]
    total = sum(int(r[6]) for r in rows)
    if json:
        keys = ["topic", "group", "broker", "queue", "broker_offset", "consumer_offset", "lag"]
        print_json(
            {
                "broker": broker,
                "queues": [dict(zip(keys, r, strict=True)) for r in rows],
                "total_lag": total,
            }
        )
        return
    print_table(
        f"consume stats of broker {broker} (total lag {total})",
        ["topic", "group", "broker", "queue", "broker offset", "consumer offset", "lag"],
        rows,
    )


@app.command("allocateMQ")
def allocate_mq(
    topic: Topic,
    ip_list: Annotated[str, typer.Option("-i", "--ipList", help="client ids, comma separated")],
    namesrv: Namesrv = DEFAULT_NAMESRV,
    json: Json = False,
) -> None:
    """Which queues of a topic each client id would take with the average strategy (the
    default of a consumer group). Computed here; nothing is sent to the group."""
    from ferry.admin import groups

    ids = [i for i in ip_list.split(",") if i.strip()]
    if not ids:
        raise typer.BadParameter("-i needs at least one client id")
    with admin_session(namesrv) as admin:
        queues = admin.queues(topic)
    plan = groups.allocate_mq(queues, ids)
    if json:
        print_json(
            {
                cid: [{"broker": q.broker_name, "queue": q.queue_id} for q in qs]
                for cid, qs in plan.items()
            }
        )
        return
    print_table(
        f"{topic}: {len(queues)} queues over {len(plan)} clients (average)",
        ["client id", "broker", "queue"],
        [(cid, q.broker_name, q.queue_id) for cid, qs in plan.items() for q in qs]
        + [(cid, "-", "-") for cid, qs in plan.items() if not qs],
    )


@app.command("skipAccumulatedMessage")
def skip_accumulated_message(
    group: Group,
    topic: Topic,
    namesrv: Namesrv = DEFAULT_NAMESRV,
    cluster: Cluster = None,
    force: Annotated[bool, typer.Option("-f", "--force", help="accepted for mqadmin")] = True,
    json: Json = False,
) -> None:
    """Move a group's offsets of a topic (of -c's brokers only) to each queue's max offset:
    what is stored now is skipped. Live members go on from there without a restart."""
    del force
    from ferry.admin import offsets as offset_ops

    with admin_session(namesrv) as admin:
        offsets = offset_ops.skip_accumulated(admin, group, topic, cluster)
    rows = [(q.broker_name, q.queue_id, o) for q, o in sorted(offsets.items())]
    if json:
        keys = ("broker", "queue", "offset")
        print_json(
            {
                "group": group,
                "topic": topic,
                "offsets": [dict(zip(keys, r, strict=True)) for r in rows],
            }
        )
        return
    print_table(f"{group} on {topic} moved to the max offsets", ["broker", "queue", "offset"], rows)


@app.command("cloneGroupOffset")
def clone_group_offset(
    src: Annotated[
        str,
        typer.Option(
            "-s", "--srcGroup", metavar="GROUP", help="copy from", autocompletion=complete_group
        ),
    ],
    dest: Annotated[
        str,
        typer.Option(
            "-d", "--destGroup", metavar="GROUP", help="copy to", autocompletion=complete_group
        ),
    ],
    topic: Topic,
    namesrv: Namesrv = DEFAULT_NAMESRV,
    offline: Annotated[bool, typer.Option("-o", "--offline", help="accepted for mqadmin")] = False,
    json: Json = False,
) -> None:
    """Copy one group's committed offsets of a topic to another group (queues the source
    never committed on are left alone). Progress shows on a terminal only."""
    del offline
    from ferry.admin import offsets as offset_ops

    with admin_session(namesrv) as admin, progress() as bar:
        task = bar.add_task("copying offsets", total=None)

        def advance(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        copied = offset_ops.clone_group_offset(admin, src, dest, topic, advance)
    rows = [(q.broker_name, q.queue_id, o) for q, o in sorted(copied.items())]
    if json:
        keys = ("broker", "queue", "offset")
        print_json(
            {
                "src": src,
                "dest": dest,
                "topic": topic,
                "offsets": [dict(zip(keys, r, strict=True)) for r in rows],
            }
        )
        return
    print_table(
        f"offsets of {src} on {topic} copied to {dest}", ["broker", "queue", "offset"], rows
    )


@app.command("queryCq")
def query_cq(
    topic: Topic,
    queue_id: Annotated[int, typer.Option("-q", "--queue", help="queue id")],
    index: Annotated[int, typer.Option("-i", "--index", help="first queue offset")] = 0,
    count: Annotated[int, typer.Option("-c", "--count", help="entries, 1..1000")] = 10,
    broker: Annotated[
        str | None,
        typer.Option("-b", "--broker", help="broker name or address (when several serve it)"),
    ] = None,
    namesrv: Namesrv = DEFAULT_NAMESRV,
    json: Json = False,
) -> None:
    """Raw ConsumeQueue entries of one queue: queue offset, CommitLog offset, size, tags hash
    and the record's store time ("-" when retention deleted it)."""
    from ferry.admin import broker_ops
    from ferry.cli.output import show_time

    if index < 0:
        raise typer.BadParameter(f"-i {index} is negative")
    if not 0 < count <= 1000:
        raise typer.BadParameter(f"-c {count} is not within 1..1000")
    with admin_session(namesrv) as admin:
        addr, reply = broker_ops.query_cq(admin, topic, queue_id, index, count, broker)
    if json:
        import msgspec

        print_json(
            {
                "broker": addr,
                "min_offset": reply.min_offset,
                "max_offset": reply.max_offset,
                "entries": [msgspec.structs.asdict(e) for e in reply.entries],
            }
        )
        return
    print_table(
        f"ConsumeQueue {topic}#{queue_id} on {addr}"
        f" (offsets {reply.min_offset}..{reply.max_offset})",
        ["queue offset", "commitlog offset", "size", "tags code", "stored (UTC)"],
        [
            (
                e.queue_offset,
                e.commitlog_offset,
                e.size,
                e.tags_code,
                show_time(e.store_ms) if e.store_ms >= 0 else "-",
            )
            for e in reply.entries
        ],
    )


@app.command("haStatus")
def ha_status(
    namesrv: Namesrv = DEFAULT_NAMESRV,
    broker: BrokerAddr = None,
    cluster: Cluster = None,
    json: Json = False,
) -> None:
    """HA replication of one broker (-b) or every master (of -c): a master's slaves with
    their acknowledged offsets, a slave's master and how far it has applied."""
    from ferry.admin import broker_ops

    with admin_session(namesrv) as admin:
        replies = broker_ops.ha_status(admin, cluster, broker)
    if json:
        import msgspec

        print_json({a: msgspec.to_builtins(r) for a, r in replies.items()})
        return
    from ferry.cli.output import show_time

    rows: list[tuple[object, ...]] = []
    for addr, r in sorted(replies.items()):
        if r.role == "SLAVE":
            state = "connected" if r.connected else (r.error or "not connected")
            if r.store_refusal:  # connected to its master, but its own disk refuses the bytes
                state = f"store refuses: {r.store_refusal}"
            rows.append((addr, r.role, "master", r.master_ha_addr, r.applied_offset, state, ""))
            continue
        if not r.slaves:
            rows.append((addr, r.role, "-", "-", "-", "no slave", ""))
        for s in r.slaves:
            rows.append(
                (
                    addr,
                    r.role,
                    f"slave {s.broker_id}",
                    s.addr or "-",
                    s.acked_offset,
                    "in sync" if s.in_sync else "behind",
                    show_time(s.last_ack_ms) if s.last_ack_ms else "-",
                )
            )
    print_table(
        "HA replication",
        ["broker", "role", "peer", "peer address", "offset", "state", "last ack (UTC)"],
        rows,
    )
