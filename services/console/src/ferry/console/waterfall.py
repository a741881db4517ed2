"""Spans laid out as a waterfall: one row per span, children under their parent, bars placed
on one time axis shared by every trace shown (so a batch receive in its own trace lines up
with the sends it links to)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ferry.console.otlp import SpanRecord

KIND_NAMES = {
    0: "unspecified",
    1: "internal",
    2: "server",
    3: "client",
    4: "producer",
    5: "consumer",
}


@dataclass(frozen=True)
class LinkView:
    trace_id: str
    span_id: str
    shown: bool  # the linked span is on this page


@dataclass(frozen=True)
class Row:
    span: SpanRecord
    depth: int
    offset_pct: float
    width_pct: float
    duration_ms: float
    start_ms: float  # from the start of the window
    kind: str
    links: list[LinkView]
    linked_from: list[str]  # span ids on this page that link to this span
    error: bool


@dataclass(frozen=True)
class TraceView:
    trace_id: str
    rows: list[Row]


@dataclass(frozen=True)
class Waterfall:
    traces: list[TraceView]
    window_ms: float
    services: list[str]

    @property
    def span_count(self) -> int:
        return sum(len(t.rows) for t in self.traces)


def layout(spans: Sequence[SpanRecord]) -> Waterfall:
    if not spans:
        return Waterfall([], 0.0, [])
    start = min(s.start_ns for s in spans)
    end = max(s.end_ns for s in spans)
    window = max(end - start, 1)
    on_page = {s.span_id for s in spans}
    linked_from: dict[str, list[str]] = {}
    for s in spans:
        for lk in s.links:
            linked_from.setdefault(lk.span_id, []).append(s.span_id)
    by_trace: dict[str, list[SpanRecord]] = {}
    for s in spans:
        by_trace.setdefault(s.trace_id, []).append(s)
    views = []
    for trace_id, members in by_trace.items():
        ids = {s.span_id for s in members}
        children: dict[str, list[SpanRecord]] = {}
        roots = []
        for s in members:
            if s.parent_span_id and s.parent_span_id in ids:
                children.setdefault(s.parent_span_id, []).append(s)
            else:
                roots.append(s)  # a true root, or a child whose parent was not received
        rows: list[Row] = []
        stack = [(r, 0) for r in sorted(roots, key=_start, reverse=True)]
        seen: set[str] = set()
        while stack:
            span, depth = stack.pop()
            if span.span_id in seen:
                continue
            seen.add(span.span_id)
            rows.append(_row(span, depth, start, window, on_page, linked_from))
            kids = sorted(children.get(span.span_id, []), key=_start, reverse=True)
            stack.extend((k, depth + 1) for k in kids)
        views.append(TraceView(trace_id, rows))
    views.sort(key=lambda v: v.rows[0].span.start_ns if v.rows else 0)
    services = sorted({s.service for s in spans})
    return Waterfall(views, window / 1e6, services)


def _start(s: SpanRecord) -> int:
    return s.start_ns


def _row(
    s: SpanRecord,
    depth: int,
    start: int,
    window: int,
    on_page: set[str],
    linked_from: dict[str, list[str]],
) -> Row:
    offset = (s.start_ns - start) / window * 100
    width = max((s.end_ns - s.start_ns) / window * 100, 0.3)
    return Row(
        span=s,
        depth=min(depth, 20),
        offset_pct=round(min(offset, 99.7), 3),
        width_pct=round(min(width, 100 - min(offset, 99.7)), 3),
        duration_ms=(s.end_ns - s.start_ns) / 1e6,
        start_ms=(s.start_ns - start) / 1e6,
        kind=KIND_NAMES.get(s.kind, str(s.kind)),
        links=[LinkView(lk.trace_id, lk.span_id, lk.span_id in on_page) for lk in s.links],
        linked_from=linked_from.get(s.span_id, []),
        error=s.status_code == 2,
    )
