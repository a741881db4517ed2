"""mqadmin consumerProgress: how far consumer groups are behind, per queue of a group's
topics or as every group's total lag.

Registered on `ferry admin`'s app when imported (main.py imports it).
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Annotated

import typer

from ferry.cli.admin import DEFAULT_NAMESRV, Json, Namesrv, admin_session, app
from ferry.cli.completion import complete_group, complete_topic
from ferry.cli.output import not_found, print_json, print_table

if TYPE_CHECKING:
    from ferry.admin import Admin


@app.command("consumerProgress")
def consumer_progress(
    group: Annotated[
        str | None,
        typer.Option(
            "-g",
            "--groupName",
            "--group",
            metavar="GROUP",
            help="this group (else every group)",
            autocompletion=complete_group,
        ),
    ] = None,
    topic: Annotated[
        str | None,
        typer.Option(
            "-t",
            "--topicName",
            "--topic",
            metavar="TOPIC",
            help="this topic (else every one)",
            autocompletion=complete_topic,
        ),
    ] = None,
    namesrv: Namesrv = DEFAULT_NAMESRV,
    json: Json = False,
) -> None:
    """With -g: per queue of the group's topics (or -t's), broker offset, the group's
    committed offset and the lag between them; for a pop group (SimpleConsumer) also the
    messages popped, acked, revived and in flight per broker. Without -g: every group
    (consuming -t, when given) with its total lag. A group no broker knows (a typo) is an error."""
    if group is None:
        _group_lags(namesrv, topic, json)
        return
    with admin_session(namesrv) as admin:
        topics = [topic] if topic else admin.group_topics(group)
        rows = [
            (
                t,
                p.queue.broker_name,
                p.queue.queue_id,
                p.broker_offset,
                "-" if p.consumer_offset is None else p.consumer_offset,
                "-" if p.lag is None else p.lag,
            )
            for t in topics
            for p in admin.consumer_progress(group, t)
        ]
        if all(r[4] == "-" for r in rows):
            _check_group_known(admin, group)

        pops = admin.pop_progress(group)  # a pop group's messages in flight
    if json:
        keys = ["topic", "broker", "queue", "broker_offset", "consumer_offset", "lag"]
        print_json([dict(zip(keys, r, strict=True)) for r in rows])
        return
    total = sum(r[5] for r in rows if isinstance(r[5], int))
    print_table(
        f"progress of {group} on {topic or f'{len(topics)} topics'} (total lag {total})",
        ["topic", "broker", "queue", "broker offset", "consumer offset", "lag"],
        rows,
    )
    if pops:
        print_table(
            f"pop consumption of {group} (offsets advance when popped)",
            ["broker", "popped", "acked", "revived", "in flight"],
            [(p.broker_name, p.popped, p.acked, p.revived, p.in_flight) for p in pops],
        )


def _group_lags(namesrv: str, topic: str | None, json: bool) -> None:
    with admin_session(namesrv) as admin:
        lags = admin.group_lags(topic)
        members = {}
        for g in lags:
            replies = admin.consumer_connections(g.group).values()
            ids = {c.client_id for r in replies for c in r.connections}
            kind = next((r for r in replies if r.connections), None)
            members[g.group] = (
                len(ids),
                kind.consume_type if kind else "",
                kind.message_model if kind else "",
            )
    rows = [(g.group, len(g.topics), *members[g.group], g.lag) for g in lags]
    if json:
        keys = ["group", "topics", "members", "consume_type", "message_model", "lag"]
        print_json(
            [
                {**dict(zip(keys, r, strict=True)), "topics": list(g.topics)}
                for r, g in zip(rows, lags, strict=True)
            ]
        )
        return
    print_table(
        f"{len(rows)} consumer groups{f' of {topic}' if topic else ''}"
        f" (total lag {sum(g.lag for g in lags)})",
        ["group", "topics", "members", "consume type", "model", "lag"],
        rows,
    )


def _check_group_known(admin: Admin, group: str) -> None:
    """Ends the command (not found) when no broker master has `group` (no subscription group:
    brokers create one when a member first heartbeats, pulls or commits). RocketMQ's mqadmin
    fails here too, with CONSUMER_NOT_ONLINE ("offset table is empty")."""
    from ferry.admin import groups

    known = groups.all_groups(admin, sorted(set(admin.master_addrs().values())))
    if group in known:
        return
    close = difflib.get_close_matches(group, known, n=3, cutoff=0.8)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    not_found(
        f"consumer group {group} is unknown: no broker has it (no member ever "
        f"subscribed, pulled or committed){hint}"
    )
