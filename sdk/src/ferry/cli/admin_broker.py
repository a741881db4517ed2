"""mqadmin's broker and name server commands: brokerStatus, getBrokerConfig,
updateBrokerConfig, statsAll, cleanExpiredCQ, deleteExpiredCommitLog, wipeWritePerm,
addWritePerm, clusterRT.

Registered on `ferry admin`'s app when imported (main.py imports it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from ferry.cli.admin import (
    DEFAULT_NAMESRV,
    BrokerAddr,
    Cluster,
    Json,
    Namesrv,
    admin_session,
    app,
)
from ferry.cli.completion import complete_broker_name
from ferry.cli.output import die, print_json, print_table, show_time
from ferry.protocol.errors import FerryError

if TYPE_CHECKING:
    from ferry.admin import Admin

BrokerName = Annotated[
    str,
    typer.Option("-b", "--brokerName", help="broker name", autocompletion=complete_broker_name),
]


def _addrs(admin: Admin, broker: str | None, cluster: str | None) -> list[str]:

    return admin.targets(cluster, broker)


@app.command("getBrokerConfig")
def get_broker_config(
    namesrv: Namesrv = DEFAULT_NAMESRV,
    broker: BrokerAddr = None,
    cluster: Cluster = None,
    json: Json = False,
) -> None:
    """The broker.conf keys in force on one broker (-b) or every master (of -c); `live`
    marks the keys updateBrokerConfig changes without a restart."""
    with admin_session(namesrv) as admin:
        replies = {a: admin.broker_config(a) for a in _addrs(admin, broker, cluster)}
    if json:
        print_json({a: r.config for a, r in replies.items()})
        return
    for addr, reply in replies.items():
        live = set(reply.live_keys)
        rows = [(k, v, "live" if k in live else "") for k, v in sorted(reply.config.items())]
        print_table(f"config of broker {addr}", ["key", "value", "changes"], rows)


@app.command("updateBrokerConfig")
def update_broker_config(
    key: Annotated[str, typer.Option("-k", "--key", help="broker.conf key")],
    value: Annotated[str, typer.Option("-v", "--value")],
    namesrv: Namesrv = DEFAULT_NAMESRV,
    broker: BrokerAddr = None,
    cluster: Cluster = None,
    slaves_too: Annotated[
        bool,
        typer.Option(
            "-a", "--updateAllBroker", help="slaves too: with -c, or alone for every cluster"
        ),
    ] = False,
    json: Json = False,
) -> None:
    """Change a broker.conf key on running brokers (kept over restarts in
    <storePathRootDir>/config/broker-overlay.conf). Keys that need a restart are refused.
    On one broker (-b), the masters of a cluster (-c) or of every cluster (neither), and
    their slaves with -a, as mqadmin's updateAllBroker."""
    if slaves_too and broker:
        raise typer.BadParameter("-a (slaves too) goes with -c or alone, not with -b")
    with admin_session(namesrv) as admin:
        done = admin.update_broker_config(
            {key: value}, cluster=cluster, broker_addr=broker, include_slaves=slaves_too
        )
    if json:
        print_json({"key": key, "value": value, "brokers": done})
        return
    print_table(f"{key}={value}", ["broker"], [(a,) for a in done])


@app.command("statsAll")
def stats_all(
    namesrv: Namesrv = DEFAULT_NAMESRV,
    topic: Annotated[str | None, typer.Option("-t", "--topic", help="this topic only")] = None,
    active: Annotated[
        bool, typer.Option("-a", "--activeTopic", help="only topics with traffic now")
    ] = False,
    json: Json = False,
) -> None:
    """Messages in and out per topic and consumer group, with TPS over the last minute, on
    every broker master, and the totals."""
    with admin_session(namesrv) as admin:
        stats = {a: admin.broker_stats(a) for a in _addrs(admin, None, None)}
    # (topic, group) -> [in tps, out tps, in total, out total]
    table: dict[tuple[str, str], list[float]] = {}
    for reply in stats.values():
        for t in reply.put:
            row = table.setdefault((t.topic, ""), [0.0, 0.0, 0, 0])
            row[0] += t.tps
            row[2] += t.total
        for t in reply.get:
            row = table.setdefault((t.topic, t.group), [0.0, 0.0, 0, 0])
            row[1] += t.tps
            row[3] += t.total
    rows = [
        (tp, grp, round(v[0], 2), round(v[1], 2), int(v[2]), int(v[3]))
        for (tp, grp), v in sorted(table.items())
        if (topic is None or tp == topic) and (not active or v[0] or v[1])
    ]
    totals = {
        "in_tps": round(sum(r[2] for r in rows), 2),
        "out_tps": round(sum(r[3] for r in rows), 2),
        "in_total": sum(r[4] for r in rows),
        "out_total": sum(r[5] for r in rows),
    }
    if json:
        columns = ("topic", "group", "in_tps", "out_tps", "in_total", "out_total")
        print_json({"rows": [dict(zip(columns, r, strict=True)) for r in rows], "totals": totals})
        return
    print_table(
        "traffic (TPS over the last minute; totals since each broker started)",
        ["topic", "consumer group", "in TPS", "out TPS", "in msgs", "out msgs"],
        [*rows, ("TOTAL", "", *totals.values())],
    )


@app.command("cleanExpiredCQ")
def clean_expired_cq(
    namesrv: Namesrv = DEFAULT_NAMESRV,
    broker: BrokerAddr = None,
    cluster: Cluster = None,
    json: Json = False,
) -> None:
    """Drop ConsumeQueue entries and files below each store's CommitLog min offset, and the
    queues left with nothing readable."""
    with admin_session(namesrv) as admin:
        done = admin.clean_expired_cq(cluster=cluster, broker_addr=broker)
    rows = [(a, r.queues, r.files, r.entries) for a, r in sorted(done.items())]
    if json:
        columns = ("broker", "queues_removed", "files_deleted", "entries_dropped")
        print_json([dict(zip(columns, r, strict=True)) for r in rows])
        return
    print_table(
        "expired ConsumeQueues cleaned",
        ["broker", "queues removed", "files deleted", "entries dropped"],
        rows,
    )


@app.command("deleteExpiredCommitLog")
def delete_expired_commit_log(
    namesrv: Namesrv = DEFAULT_NAMESRV,
    broker: BrokerAddr = None,
    cluster: Cluster = None,
    json: Json = False,
) -> None:
    """Run retention now: CommitLog segments older than fileReservedTime go, whatever the
    hour (deleteWhen)."""
    from ferry.protocol.messages import DeleteExpiredCommitLogRequest, OkReply

    with admin_session(namesrv) as admin:
        done = {}
        for addr in _addrs(admin, broker, cluster):
            admin.broker_request(addr, DeleteExpiredCommitLogRequest(), OkReply)
            done[addr] = admin.broker_runtime_info(addr).get("commitLogMinOffset", "")
    if json:
        print_json([{"broker": a, "commitlog_min_offset": int(o or 0)} for a, o in done.items()])
        return
    print_table("retention ran", ["broker", "CommitLog min offset"], sorted(done.items()))


def _write_perm(namesrv: str, broker_name: str, writable: bool, json: bool) -> None:
    from ferry.admin import broker_ops

    with admin_session(namesrv) as admin:
        done = broker_ops.set_write_perm(admin, broker_name, writable)
    if json:
        print_json({"broker": broker_name, "writable": writable, "topics": done})
        return
    what = "restored" if writable else "wiped"
    print_table(
        f"write permission of {broker_name} {what}",
        ["name server", "topics changed"],
        sorted(done.items()),
    )


@app.command("wipeWritePerm")
def wipe_write_perm(
    broker_name: BrokerName, namesrv: Namesrv = DEFAULT_NAMESRV, json: Json = False
) -> None:
    """Stop offering a broker's queues for writing on every name server (drain it);
    producers send elsewhere once their routes refresh. Lasts until addWritePerm."""
    _write_perm(namesrv, broker_name, False, json)


@app.command("addWritePerm")
def add_write_perm(
    broker_name: BrokerName, namesrv: Namesrv = DEFAULT_NAMESRV, json: Json = False
) -> None:
    """Offer a broker's queues for writing again on every name server."""
    _write_perm(namesrv, broker_name, True, json)


@app.command("clusterRT")
def cluster_rt(
    topic: Annotated[
        str | None,
        typer.Option(
            "-t", "--topic", help="a topic every broker serves (Ferry has no per-broker topic)"
        ),
    ] = None,
    namesrv: Namesrv = DEFAULT_NAMESRV,
    cluster: Cluster = None,
    amount: Annotated[
        int, typer.Option("-a", "--amount", help="messages per broker a round")
    ] = 100,
    size: Annotated[int, typer.Option("-s", "--size", help="body bytes")] = 128,
    rounds: Annotated[int, typer.Option("-r", "--rounds", help="rounds")] = 3,
    interval: Annotated[
        float, typer.Option("-i", "--interval", help="seconds between rounds")
    ] = 0.0,
    json: Json = False,
) -> None:
    """Send messages to each broker master (of -c) in turn, a queue of -t on it, and print
    each broker's round-trip times per round (RocketMQ sends to a topic named after each
    broker; Ferry's brokers have none, so -t names one they all serve)."""
    if topic is None:
        raise typer.BadParameter("give -t TOPIC, a topic every broker master serves")
    for name, value in (("-a", amount), ("-s", size), ("-r", rounds)):
        if value <= 0:
            raise typer.BadParameter(f"{name} {value} must be positive")
    if interval < 0:
        raise typer.BadParameter(f"-i {interval} is negative")
    from ferry.admin import probe as admin_probe
    from ferry.cli.credentials import client_options

    try:
        with admin_session(namesrv) as admin:
            targets = admin_probe.rt_targets(admin, topic, cluster)
        samples = admin_probe.cluster_rt(
            namesrv, targets, amount, size, rounds, interval, **client_options()
        )
    except FerryError as err:
        die(err)
    rows = [
        (t.cluster, t.queue.broker_name, t.addr, r.round, r.avg_ms, r.max_ms, r.ok, r.failed)
        for t, r in samples
    ]
    if json:
        keys = ("cluster", "broker", "addr", "round", "avg_ms", "max_ms", "ok", "failed")
        print_json([dict(zip(keys, row, strict=True)) for row in rows])
        return
    print_table(
        f"send RT to {topic}, {amount} x {size} B per broker a round",
        ["cluster", "broker", "address", "round", "avg ms", "max ms", "ok", "failed"],
        rows,
    )


@app.command("brokerStatus")
def broker_status(
    broker_addr: BrokerAddr = None,
    cluster: Cluster = None,
    namesrv: Namesrv = DEFAULT_NAMESRV,
    json: Json = False,
) -> None:
    """A broker's runtime figures (-b), or those of every master (of -c)."""

    with admin_session(namesrv) as admin:
        addrs = admin.targets(cluster, broker_addr)
        infos = {a: admin.broker_runtime_info(a) for a in addrs}
    if json:  # one broker asked for: its figures alone, as before
        print_json(infos[broker_addr] if broker_addr else infos)
        return
    for addr, info in infos.items():
        rows = [(k, _readable(k, v)) for k, v in sorted(info.items())]
        print_table(f"broker {addr}", ["key", "value"], rows, fields=True)


def _readable(key: str, value: str) -> str:
    """A runtime value as the table shows it: epoch-ms times (bootTimestamp, …) in UTC."""
    if key.lower().endswith("timestamp") and value.isdigit() and int(value) > 0:
        return f"{show_time(int(value))} UTC"
    return value
