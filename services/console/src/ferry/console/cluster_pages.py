"""The cluster, topics and consumer group pages."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ferry.client import MessageQueue
from ferry.client.allocate import allocate
from ferry.console.charts import line_chart
from ferry.console.state import ConsoleState
from ferry.console.web import BadRequest, form, int_value, param, parse_time, same_origin
from ferry.protocol.errors import FerryError
from ferry.protocol.names import DLQ_PREFIX, RETRY_PREFIX, check_group, check_topic, is_system_topic

MAX_TOPICS_LISTED = 500
ASSIGNMENT_STRATEGY = "averagely"


def console(request: Request) -> ConsoleState:
    state: ConsoleState = request.app.state.console
    return state


def topic_kind(topic: str) -> str:
    if topic.startswith(RETRY_PREFIX):
        return "retry"
    if topic.startswith(DLQ_PREFIX):
        return "dlq"
    return "system" if is_system_topic(topic) else "normal"


# ---- cluster ----


@dataclass(frozen=True)
class BrokerRow:
    cluster: str
    broker_name: str
    broker_id: int
    addr: str
    role: str
    version: str
    tps_in: float | None
    tps_out: float | None
    put_total: str
    get_total: str
    runtime: str
    error: str


def cluster_page(request: Request) -> Response:
    st = console(request)
    info = st.admin.cluster_info()
    rows: list[BrokerRow] = []
    charts: list[str] = []
    for cluster, names in sorted(info.clusters.items()):
        for name in sorted(names):
            data = info.brokers.get(name)
            for bid, addr in sorted((data.broker_addrs if data else {}).items()):
                try:
                    rt, error = st.admin.broker_runtime_info(addr), ""
                except FerryError as exc:
                    rt, error = {}, str(exc)
                rows.append(
                    BrokerRow(
                        cluster,
                        name,
                        bid,
                        addr,
                        rt.get("brokerRole", "MASTER" if bid == 0 else "SLAVE"),
                        rt.get("brokerVersion", "?"),
                        st.sampler.latest(f"broker-in:{addr}"),
                        st.sampler.latest(f"broker-out:{addr}"),
                        rt.get("putMessageTotal", "-"),
                        rt.get("getMessageTotal", "-"),
                        rt.get("runtime", "-"),
                        error,
                    )
                )
                charts.append(
                    line_chart(
                        f"{name} #{bid} messages in per second",
                        st.sampler.series(f"broker-in:{addr}"),
                        "msg/s in",
                    )
                )
    namesrvs = [a for a in st.config.namesrv_addr.split(";") if a]
    rounds, sample_error = st.sampler.status()
    return st.renderer.page(
        "cluster.html",
        brokers=rows,
        charts=charts,
        namesrvs=namesrvs,
        rounds=rounds,
        sample_error=sample_error,
    )


# ---- topics ----


def topics_page(request: Request) -> Response:
    st = console(request)
    show = param(request, "show", "normal")
    topics = sorted(st.admin.topic_list())
    listed = [
        (t, topic_kind(t), st.sampler.latest(f"topic-in:{t}"))
        for t in topics
        if show == "all" or topic_kind(t) == show
    ]
    return st.renderer.page(
        "topics.html",
        topics=listed[:MAX_TOPICS_LISTED],
        total=len(listed),
        show=show,
        message="",
    )


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
    st = console(request)
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
