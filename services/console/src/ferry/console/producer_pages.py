"""The producer view (what rocketmq-dashboard's Producer tab shows): the producer groups the
brokers know from heartbeats, each with its number of live producers, and one group's
producers with their address, language, version, last heartbeat and the brokers that know
them (mqadmin producerConnection)."""

from __future__ import annotations

from dataclasses import dataclass, field

from starlette.requests import Request
from starlette.responses import Response

from ferry.console.cluster_pages import console
from ferry.console.state import RESEND_GROUP, ConsoleState
from ferry.console.web import param
from ferry.protocol.messages import ProducerConnectionReply
from ferry.protocol.names import check_group, check_topic

MAX_GROUPS_COUNTED = 100  # groups whose producers are counted on the list (a request each)


@dataclass
class ProducerRow:
    client_id: str
    client_addr: str
    language: str
    version: str
    last_heartbeat_ms: int
    brokers: list[str] = field(default_factory=list)


def producers_of(
    replies: dict[str, ProducerConnectionReply], names: dict[str, str]
) -> list[ProducerRow]:
    """One row per client over the brokers' replies (each producer heartbeats to every one)."""
    rows: dict[str, ProducerRow] = {}
    for addr, reply in sorted(replies.items()):
        for c in reply.connections:
            row = rows.setdefault(
                c.client_id, ProducerRow(c.client_id, c.client_addr, c.language, c.version, 0)
            )
            row.last_heartbeat_ms = max(row.last_heartbeat_ms, c.last_heartbeat_ms)
            row.brokers.append(names.get(addr, addr))
    return [rows[k] for k in sorted(rows)]


def group_counts(st: ConsoleState, groups: list[str]) -> list[tuple[str, int | None]]:
    counts: list[tuple[str, int | None]] = []
    for i, group in enumerate(groups):
        if i >= MAX_GROUPS_COUNTED:
            counts.append((group, None))
            continue
        replies = st.admin.producer_connections(group)
        counts.append((group, len({c.client_id for r in replies.values() for c in r.connections})))
    return counts


def producers_page(request: Request) -> Response:
    st = console(request)
    group = param(request, "group")
    topic = param(request, "topic")
    if group:
        check_group(group)
    if topic:
        check_topic(topic)
    # every reply lists the broker's producer groups, whichever group was asked about
    replies = st.admin.producer_connections(group or RESEND_GROUP, topic or None)
    names = {addr: name for name, addr in st.admin.master_addrs().items()}
    groups = sorted({g for r in replies.values() for g in r.groups})
    return st.renderer.page(
        "producers.html",
        groups=group_counts(st, groups),
        group=group,
        topic=topic,
        producers=producers_of(replies, names) if group else [],
    )
