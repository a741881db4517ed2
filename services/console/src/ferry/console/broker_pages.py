"""The cluster page: name servers and every broker with its rates, totals, uptime, CommitLog
and disk use (from each broker's runtime info), a messages-in chart per broker, and in
controller mode each group's master, epoch and in-sync set (controller_view.py)."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response

from ferry.console.charts import line_chart
from ferry.console.cluster_pages import console
from ferry.console.controller_view import group_views
from ferry.console.state import ConsoleState
from ferry.console.web import fmt_duration
from ferry.protocol.errors import FerryError


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
    uptime: str
    commit_log_bytes: int | None  # held in the CommitLog: max offset - min offset
    disk_ratio: float | None  # of the file system holding the store
    disk_total: int | None
    disk_free: int | None
    error: str


_RUNTIME = re.compile(r"(\d+) days, (\d+) hours, (\d+) minutes, (\d+) seconds")


def uptime(rt: dict[str, str], now_ms: int) -> str:
    """How long the broker has run, readably ("2m 5s", "3d 4h"): from bootTimestamp, else
    from RocketMQ's "[ 0 days, 0 hours, 2 minutes, 5 seconds ]"."""
    boot = rt.get("bootTimestamp", "")
    if boot.isdigit():
        return fmt_duration(now_ms - int(boot))
    found = _RUNTIME.search(rt.get("runtime", ""))
    if found is None:
        return "-"
    days, hours, minutes, secs = (int(g) for g in found.groups())
    return fmt_duration((((days * 24 + hours) * 60 + minutes) * 60 + secs) * 1000)


def _number(rt: dict[str, str], key: str) -> int | None:
    value = rt.get(key, "")
    return int(value) if value.isdigit() else None


def broker_row(
    st: ConsoleState, cluster: str, name: str, bid: int, addr: str, now_ms: int
) -> BrokerRow:
    try:
        rt, error = st.admin.broker_runtime_info(addr), ""
    except FerryError as exc:
        rt, error = {}, str(exc)
    low, high = _number(rt, "commitLogMinOffset"), _number(rt, "commitLogMaxOffset")
    total = _number(rt, "commitLogDiskTotalBytes")
    try:
        ratio: float | None = float(rt["commitLogDiskRatio"]) if total else None
    except (KeyError, ValueError):
        ratio = None
    return BrokerRow(
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
        uptime(rt, now_ms) if rt else "-",
        high - low if low is not None and high is not None else None,
        ratio,
        total or None,
        _number(rt, "commitLogDiskFreeBytes") if total else None,
        error,
    )


def cluster_page(request: Request) -> Response:
    st = console(request)
    info = st.admin.cluster_info()
    now_ms = int(time.time() * 1000)
    rows: list[BrokerRow] = []
    charts: list[str] = []
    for cluster, names in sorted(info.clusters.items()):
        for name in sorted(names):
            data = info.brokers.get(name)
            for bid, addr in sorted((data.broker_addrs if data else {}).items()):
                rows.append(broker_row(st, cluster, name, bid, addr, now_ms))
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
        controlled=group_views(st.admin, st.controllers, st.config.controller_addr, info),
        charts=charts,
        namesrvs=namesrvs,
        rounds=rounds,
        sample_error=sample_error,
    )
