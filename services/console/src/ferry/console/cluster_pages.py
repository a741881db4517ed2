"""The topics and consumer group pages."""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ferry.client import MessageQueue
from ferry.client.allocate import allocate
from ferry.console.charts import line_chart
from ferry.console.login import scoped
from ferry.console.state import ConsoleState
from ferry.console.web import BadRequest, form, int_value, param, parse_time, same_origin
from ferry.protocol.codes import Perm
from ferry.protocol.errors import FerryError
from ferry.protocol.messages import TopicConfig
from ferry.protocol.names import DLQ_PREFIX, RETRY_PREFIX, check_group, check_topic, is_system_topic

MAX_TOPICS_LISTED = 500
MAX_LIVE_TOTALS = 32  # topics the sampler skips (system, DLQ) counted at page time
ASSIGNMENT_STRATEGY = "averagely"


def console(request: Request) -> ConsoleState:
    """The console's state as this request's login sees it (its own clients)."""
    state: ConsoleState = request.app.state.console
    return scoped(request, state)


def console_wide(request: Request) -> ConsoleState:
    """console() for a page of what the console gathered itself, with its own credentials
    (the sampler's group list, the trace store): a logged-in user sees it only when allowed
    to list the cluster (Cluster List, which getAllTopicList needs); else NoPermission."""
    st = console(request)
    if st.user:
        st.admin.topic_list()
    return st


def topic_kind(topic: str) -> str:
    if topic.startswith(RETRY_PREFIX):
        return "retry"
    if topic.startswith(DLQ_PREFIX):
        return "dlq"
    return "system" if is_system_topic(topic) else "normal"


# ---- topics ----


@dataclass(frozen=True)
class TopicRow:
    topic: str
    kind: str
    brokers: list[str]  # broker groups holding it
    read_queues: int  # over those brokers
    write_queues: int
    perm: str  # RW, R, W or - (per broker, when they differ)
    status: str  # ok, read-only, write-only, no access, partial (brokers differ), no route
    messages: int | None  # stored (max offset - min offset over the queues)
    tps: float | None


def _perm_text(perm: int) -> str:
    text = ("R" if perm & Perm.READ else "") + ("W" if perm & Perm.WRITE else "")
    return text or "-"


def topic_status(perms: Sequence[int]) -> str:
    """ok, read-only, write-only, no access, partial (brokers differ) or no route."""
    if not perms:
        return "no route"
    readable = {bool(p & Perm.READ) for p in perms}
    writable = {bool(p & Perm.WRITE) for p in perms}
    if len(readable) > 1 or len(writable) > 1:
        return "partial"
    names = {(True, True): "ok", (True, False): "read-only", (False, True): "write-only"}
    return names.get((readable.pop(), writable.pop()), "no access")


def topic_configs(st: ConsoleState) -> dict[str, list[tuple[str, TopicConfig]]]:
    """topic -> (broker name, its config there), one request per master."""
    out: dict[str, list[tuple[str, TopicConfig]]] = {}
    for name, addr in st.admin.master_addrs().items():
        try:
            configs = st.admin.topic_configs(addr)
        except FerryError:
            continue
        for config in configs:
            out.setdefault(config.topic_name, []).append((name, config))
    return out


def topic_row(
    st: ConsoleState, topic: str, configs: list[tuple[str, TopicConfig]], messages: int | None
) -> TopicRow:
    perms = [c.perm for _, c in configs]
    return TopicRow(
        topic,
        topic_kind(topic),
        [name for name, _ in configs],
        sum(c.read_queue_nums for _, c in configs),
        sum(c.write_queue_nums for _, c in configs),
        "/".join(dict.fromkeys(_perm_text(p) for p in perms)) or "-",
        topic_status(perms),
        messages,
        st.sampler.latest(f"topic-in:{topic}"),
    )


def _stored(st: ConsoleState, topic: str) -> int | None:
    try:
        stats = st.admin.topic_stats(topic)
    except FerryError:
        return None
    return sum(q.max_offset - q.min_offset for qs in stats.values() for q in qs)


def topics_page(request: Request) -> Response:
    st = console(request)
    show = param(request, "show", "normal")
    topics = [t for t in sorted(st.admin.topic_list()) if show == "all" or topic_kind(t) == show]
    configs = topic_configs(st)
    totals = st.sampler.topic_totals()
    rows: list[TopicRow] = []
    live = 0
    for topic in topics[:MAX_TOPICS_LISTED]:
        messages = totals.get(topic)
        if messages is None and live < MAX_LIVE_TOTALS:  # not sampled: asked now, a few
            live += 1
            messages = _stored(st, topic)
        rows.append(topic_row(st, topic, configs.get(topic, []), messages))
    return st.renderer.page("topics.html", topics=rows, total=len(topics), show=show, message="")


def topic_page(request: Request) -> Response:
    st = console(request)
    topic = request.path_params["topic"]
    check_topic(topic)
    route = st.admin.topic_route(topic)
    stats = st.admin.topic_stats(topic)
    try:
        groups = st.admin.consumer_groups(topic)
    except FerryError:
        groups = []
    queue_data = route.queue_datas[0] if route.queue_datas else None
    return st.renderer.page(
        "topic.html",
        topic=topic,
        kind=topic_kind(topic),
        route=route,
        stats=sorted(stats.items()),
        total=sum(q.max_offset - q.min_offset for qs in stats.values() for q in qs),
        groups=groups,
        queue_data=queue_data,
        chart=line_chart(
            f"{topic}: messages in per second", st.sampler.series(f"topic-in:{topic}"), "msg/s"
        ),
    )


async def update_topic(request: Request) -> Response:
    """Creates or updates a topic on every master of the cluster (mqadmin updateTopic -c)."""
    st = console(request)
    if not same_origin(request):
        raise BadRequest("cross-site form refused")
    fields = await form(request)
    topic = fields.get("topic", "")
    check_topic(topic)
    read = int_value("read queues", fields.get("read", "8"), 1, 1024)
    write = int_value("write queues", fields.get("write", "8"), 1, 1024)
    perm = int_value("perm", fields.get("perm", "6"), 0, 7)
    cluster = fields.get("cluster") or None
    await run_in_threadpool(st.admin.create_topic, topic, read, write, perm, cluster=cluster)
    return RedirectResponse(f"/topic/{urllib.parse.quote(topic, safe='')}", status_code=303)


# ---- consumer groups ----


def groups_page(request: Request) -> Response:
    st = console_wide(request)
    rounds, sample_error = st.sampler.status()
    return st.renderer.page(
        "groups.html", groups=st.sampler.groups(), rounds=rounds, sample_error=sample_error
    )


def group_lookup(request: Request) -> Response:
    group = param(request, "group")
    check_group(group)
    topic = param(request, "topic")
    query = f"?topic={urllib.parse.quote(topic, safe='')}" if topic else ""
    return RedirectResponse(f"/group/{urllib.parse.quote(group, safe='')}{query}", 303)


@dataclass(frozen=True)
class QueueProgress:
    queue: MessageQueue
    broker_offset: int
    consumer_offset: int | None
    lag: int | None
    owner: str


def group_page(request: Request) -> Response:
    st = console(request)
    group = request.path_params["group"]
    check_group(group)
    extra = param(request, "topic")
    topics = next((g.topics for g in st.sampler.groups() if g.group == group), [])
    topics = sorted(set(topics) | ({extra} if extra else set()))
    for t in topics:
        check_topic(t)
    members: set[str] = set()
    for addr in st.admin.master_addrs().values():
        try:
            members.update(st.admin.consumer_ids(group, addr))
        except FerryError:
            continue
    member_list = sorted(members)
    progress: dict[str, list[QueueProgress]] = {}
    for topic in topics:
        queues = st.admin.queues(topic)
        owners: dict[MessageQueue, str] = {}
        for member in member_list:
            for q in allocate(ASSIGNMENT_STRATEGY, member, member_list, queues):
                owners[q] = member
        rows = []
        for q in queues:
            top = st.admin.max_offset(q)
            committed = st.admin.consumer_offset(group, q)
            lag = max(0, top - committed) if committed is not None else None
            rows.append(QueueProgress(q, top, committed, lag, owners.get(q, "")))
        progress[topic] = rows
    total = sum(r.lag or 0 for rows in progress.values() for r in rows)
    return st.renderer.page(
        "group.html",
        pops=st.admin.pop_progress(group),  # a pop group's messages in flight
        group=group,
        members=member_list,
        progress=progress,
        total=total,
        topics=topics,
        selected=extra,
        strategy=ASSIGNMENT_STRATEGY,
        chart=line_chart(f"{group}: lag", st.sampler.series(f"group-lag:{group}"), "messages"),
        reset=None,
    )


async def reset_offset(request: Request) -> Response:
    """Moves the group's committed offsets of a topic to a time (mqadmin resetOffsetByTime)."""
    st = console(request)
    if not same_origin(request):
        raise BadRequest("cross-site form refused")
    group = request.path_params["group"]
    check_group(group)
    fields = await form(request)
    topic = fields.get("topic", "")
    check_topic(topic)
    at_ms = parse_time("time", fields.get("time", ""))
    done = await run_in_threadpool(st.admin.reset_offset_by_time, group, topic, at_ms)
    return st.renderer.page(
        "reset_done.html", group=group, topic=topic, at_ms=at_ms, offsets=sorted(done.items())
    )
