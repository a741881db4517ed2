"""The tables of a run: per workload, each system's median and spread, the Ferry/peer ratio
(the median of the per-round ratios: each round measures every system back to back) and the
issue's target for that pair, met or not. Also the run's JSON and a Markdown copy for the docs."""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

FERRY_ASYNC = "Ferry ASYNC_FLUSH"
FERRY_SYNC = "Ferry SYNC_FLUSH"
REDIS = "Redis everysec"
REDIS_ALWAYS = "Redis always"
NATS = "NATS JetStream"
RABBIT = "RabbitMQ classic"
RABBIT_QUORUM = "RabbitMQ quorum"
FERRY_SINGLES = "Ferry send_async, single messages"


@dataclass
class Cell:
    """One system in one workload: a figure per round (p50 for latency), p99s for latency."""

    runs: list[float] = field(default_factory=list)
    p99s: list[float] = field(default_factory=list)
    error: str | None = None
    sent_rates: list[float] = field(default_factory=list)  # end to end: the pace kept


@dataclass(frozen=True)
class Target:
    ferry: str
    peer: str  # a row label, or "" for an absolute bound on Ferry's p99
    op: str  # ">=" (throughput ratio), "<=" / "<" (latency ratio), "p99<=" (absolute µs)
    value: float

    def text(self) -> str:
        if self.op == "p99<=":
            return f"p99 ≤ {self.value:,.0f} µs"
        if self.op == "<" and self.value == 1:
            return "below"
        return f"{self.op.replace('>=', '≥').replace('<=', '≤')} {self.value:g}x"

    def met(self, ratio: float) -> bool:
        if self.op == ">=":
            return ratio >= self.value
        if self.op == "<":
            return ratio < self.value
        return ratio <= self.value


@dataclass(frozen=True)
class Table:
    key: str
    title: str
    unit: str  # "msg/s" or "µs"
    rows: tuple[tuple[str, str], ...]  # (row label, the Ferry row it is compared with)
    targets: tuple[Target, ...] = ()

    @property
    def latency(self) -> bool:
        return self.unit == "µs"


TABLES = (
    Table(
        "produce",
        "Batched produce, 1 KB (Ferry: send_batch 256 x 4 threads; Redis: XADD pipelined "
        "1,000; NATS: publish_async 1,000 pending; RabbitMQ: confirms, window 1,000)",
        "msg/s",
        (
            (FERRY_ASYNC, ""),
            (FERRY_SYNC, ""),
            (FERRY_SINGLES, ""),
            (REDIS, FERRY_ASYNC),
            (REDIS_ALWAYS, FERRY_SYNC),
            (NATS, FERRY_ASYNC),
            (RABBIT, FERRY_ASYNC),
            (RABBIT_QUORUM, FERRY_ASYNC),
        ),
        (
            Target(FERRY_ASYNC, REDIS, ">=", 3),
            Target(FERRY_SYNC, REDIS_ALWAYS, ">=", 3),
            Target(FERRY_ASYNC, NATS, ">=", 5),
            Target(FERRY_ASYNC, RABBIT, ">=", 10),
        ),
    ),
    Table(
        "consume",
        "Consume with committed offsets / acks, 1 KB (Ferry: PullConsumer, pulls of 512, "
        "commit at the end; Redis: XREADGROUP COUNT 1000 + pipelined XACK; NATS: fetch 500 + "
        "ack each; RabbitMQ: prefetch 256, ack each)",
        "msg/s",
        (
            (FERRY_ASYNC, ""),
            (REDIS, FERRY_ASYNC),
            (NATS, FERRY_ASYNC),
            (RABBIT, FERRY_ASYNC),
            (RABBIT_QUORUM, FERRY_ASYNC),
        ),
        (
            Target(FERRY_ASYNC, REDIS, ">=", 3),
            Target(FERRY_ASYNC, NATS, ">=", 5),
            Target(FERRY_ASYNC, RABBIT, ">=", 10),
        ),
    ),
    Table(
        "send_async",
        "Single-message sends, 1 KB (Ferry: 100k send_async calls, SDK auto-batching; peers: "
        "their pipelined produce, the same per-message calls; all from the first table's rounds)",
        "msg/s",
        (
            (FERRY_SINGLES, ""),
            (REDIS, FERRY_SINGLES),
            (NATS, FERRY_SINGLES),
            (RABBIT, FERRY_SINGLES),
        ),
        (Target(FERRY_SINGLES, REDIS, ">=", 1.5),),
    ),
    Table(
        "sync_latency",
        "Sync single send, one in flight, 1 KB: latency p50 (p99)",
        "µs",
        (
            (FERRY_ASYNC, ""),
            (FERRY_SYNC, ""),
            (REDIS, FERRY_ASYNC),
            (REDIS_ALWAYS, FERRY_SYNC),
            (NATS, FERRY_ASYNC),
            (RABBIT, FERRY_ASYNC),
            (RABBIT_QUORUM, FERRY_ASYNC),
        ),
        (Target(FERRY_ASYNC, REDIS, "<=", 2.5), Target(FERRY_ASYNC, NATS, "<", 1)),
    ),
    Table(
        "end_to_end",
        "End-to-end latency at a steady 2,000 msg/s, 1 KB: p50 (p99) (Ferry: send_async → "
        "PushConsumer; Redis: XADD → XREADGROUP BLOCK; NATS: publish → push consumer; "
        "RabbitMQ: confirmed publish → consumer)",
        "µs",
        ((FERRY_ASYNC, ""), (REDIS, FERRY_ASYNC), (NATS, FERRY_ASYNC), (RABBIT, FERRY_ASYNC)),
        (Target(FERRY_ASYNC, REDIS, "<=", 2), Target(FERRY_ASYNC, "", "p99<=", 2000)),
    ),
    Table(
        "topics",
        "Ferry batched produce over 1 vs 1,000 topics (4 queues each), ASYNC_FLUSH",
        "msg/s",
        (("Ferry, 1,000 topics", ""), ("Ferry, 1 topic", "Ferry, 1,000 topics")),
        (Target("Ferry, 1,000 topics", "Ferry, 1 topic", ">=", 0.9),),
    ),
)


def _ratio(ferry: Cell, peer: Cell) -> list[float]:
    return [f / p for f, p in zip(ferry.runs, peer.runs, strict=False) if p > 0]


def _figure(cell: Cell, latency: bool) -> str:
    if not cell.runs:
        return f"not measured: {cell.error or 'interrupted'}"
    med = statistics.median(cell.runs)
    text = f"{med:,.0f} ({min(cell.runs):,.0f}-{max(cell.runs):,.0f})"
    if latency and cell.p99s:
        p99 = statistics.median(cell.p99s)
        text += f", p99 {p99:,.0f} ({min(cell.p99s):,.0f}-{max(cell.p99s):,.0f})"
    known = [r for r in cell.sent_rates if r > 0]
    if known:
        text += f"; sent at {min(known):,.0f}-{max(known):,.0f} msg/s"
    return text


def rows_of(table: Table, cells: dict[str, Cell]) -> list[list[str]]:
    """[system, figure, Ferry/this, target, verdict] per row."""
    out = []
    for label, ferry_label in table.rows:
        cell = cells.get(label, Cell(error="not run"))
        ratio_text, target_text, verdict = "", "", ""
        ferry = cells.get(ferry_label) if ferry_label else None
        if ferry is not None and ferry.runs and cell.runs:
            ratios = _ratio(ferry, cell)
            ratio_text = f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"
        for target in table.targets:
            if target.peer == label and target.op != "p99<=":
                target_text = target.text()
                source = cells.get(target.ferry)
                if source is None or not source.runs or not cell.runs:
                    verdict = "not measured"
                else:
                    met = target.met(statistics.median(_ratio(source, cell)))
                    verdict = "met" if met else "NOT met"
            elif target.op == "p99<=" and target.ferry == label:
                target_text = target.text()
                if cell.p99s:
                    verdict = "met" if target.met(statistics.median(cell.p99s)) else "NOT met"
                    verdict += " (absolute)"
                else:
                    verdict = "not measured"
        out.append([label, _figure(cell, table.latency), ratio_text, target_text, verdict])
    return out


HEADER = ["system", "median (min-max)", "Ferry/this", "target", ""]


def text_tables(results: dict[str, dict[str, Cell]]) -> str:
    parts = []
    for table in TABLES:
        if table.key not in results:
            continue
        rows = [HEADER, *rows_of(table, results[table.key])]
        widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
        parts.append(f"\n{table.title} [{table.unit}]")
        parts.extend("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)
    return "\n".join(parts)


def markdown_tables(results: dict[str, dict[str, Cell]]) -> str:
    parts = []
    for table in TABLES:
        if table.key not in results:
            continue
        parts.append(f"\n**{table.title}**, {table.unit}\n")
        head = [*HEADER[:-1], "met?"]
        parts.append("| " + " | ".join(head) + " |")
        parts.append("|" + "---|" * len(head))
        parts.extend("| " + " | ".join(r) + " |" for r in rows_of(table, results[table.key]))
    return "\n".join(parts) + "\n"


def load(path: Path) -> tuple[dict[str, object], dict[str, dict[str, Cell]]]:
    data = json.loads(path.read_text())
    results = {
        key: {label: Cell(**cell) for label, cell in cells.items()}
        for key, cells in data["results"].items()
    }
    return data["run"], results


def save(path: Path, header: dict[str, object], results: dict[str, dict[str, Cell]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "run": header,
        "results": {k: {label: asdict(c) for label, c in v.items()} for k, v in results.items()},
    }
    path.write_text(json.dumps(data, indent=2))
    path.with_suffix(".md").write_text(markdown_tables(results))
