"""Spans received over OTLP, kept in SQLite with bounded size and age.

Rows are appended in arrival order (the row id), so both limits delete a prefix: spans older
than the retention, then the oldest ones while the stored bytes exceed the maximum. Two side
tables make a message's trace quick to find: message id -> trace, and link -> linked trace.
One connection serves every thread, behind a lock (SQLite serialises writers anyway).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ferry.console.otlp import IncomingSpan, SpanRecord, span_from_blob

log = logging.getLogger("ferry.console.traces")

SCHEMA = """
CREATE TABLE IF NOT EXISTS spans (
    id INTEGER PRIMARY KEY,
    trace_id TEXT NOT NULL,
    span_id TEXT NOT NULL,
    parent_span_id TEXT NOT NULL,
    name TEXT NOT NULL,
    service TEXT NOT NULL,
    scope TEXT NOT NULL,
    start_ns INTEGER NOT NULL,
    end_ns INTEGER NOT NULL,
    received_ms INTEGER NOT NULL,
    size INTEGER NOT NULL,
    span BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS spans_by_trace ON spans (trace_id);
CREATE INDEX IF NOT EXISTS spans_by_arrival ON spans (received_ms);
CREATE TABLE IF NOT EXISTS message_spans (msg_id TEXT NOT NULL, trace_id TEXT NOT NULL,
    span_row INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS message_spans_by_id ON message_spans (msg_id);
CREATE INDEX IF NOT EXISTS message_spans_by_row ON message_spans (span_row);
CREATE TABLE IF NOT EXISTS span_links (trace_id TEXT NOT NULL, linked_trace_id TEXT NOT NULL,
    span_row INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS span_links_by_linked ON span_links (linked_trace_id);
CREATE INDEX IF NOT EXISTS span_links_by_trace ON span_links (trace_id);
CREATE INDEX IF NOT EXISTS span_links_by_row ON span_links (span_row);
"""
ROW_OVERHEAD = 160  # bytes counted per span besides its protobuf (ids, names, index entries)
MAX_TRACES_PER_LOOKUP = 64
MAX_SPANS_PER_LOOKUP = 5000
RETENTION_CHECK_S = 30.0
TRIM_TO = 0.9  # above the size limit, delete down to this share of it


@dataclass(frozen=True)
class TraceSummary:
    trace_id: str
    start_ns: int
    end_ns: int
    spans: int
    services: list[str]
    root: str


@dataclass(frozen=True)
class StoreStats:
    spans: int
    bytes: int
    oldest_ms: int
    file_bytes: int


class TraceStore:
    def __init__(self, path: Path, *, max_bytes: int, retention_ms: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.max_bytes = max_bytes
        self.retention_ms = retention_ms
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA auto_vacuum=INCREMENTAL")  # only takes effect on a new file
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(SCHEMA)
        row = self._db.execute("SELECT COALESCE(SUM(size), 0), COALESCE(MAX(id), 0) FROM spans")
        total, last_id = row.fetchone()
        self._bytes = int(total)
        self._next_id = int(last_id) + 1  # rows are numbered in arrival order
        self._last_retention = 0.0
        self.expire()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # ---- writing ----

    def add(self, spans: Sequence[IncomingSpan], now_ms: int | None = None) -> int:
        """Stores the spans in one transaction; returns how many."""
        received = int(time.time() * 1000) if now_ms is None else now_ms
        with self._lock:
            first = self._next_id
            rows: list[tuple[object, ...]] = []
            messages: list[tuple[str, str, int]] = []
            links: list[tuple[str, str, int]] = []
            added = 0
            for i, sp in enumerate(spans, first):
                size = ROW_OVERHEAD + len(sp.blob)
                added += size
                rows.append(
                    (
                        i,
                        sp.trace_id,
                        sp.span_id,
                        sp.parent_span_id,
                        sp.name,
                        sp.service,
                        sp.scope,
                        sp.start_ns,
                        sp.end_ns,
                        received,
                        size,
                        sp.blob,
                    )
                )
                messages.extend((m, sp.trace_id, i) for m in sp.message_ids)
                links.extend((sp.trace_id, t, i) for t in sp.linked_traces)
            cur = self._db.cursor()
            cur.execute("BEGIN")
            try:
                cur.executemany("INSERT INTO spans VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", rows)
                cur.executemany("INSERT INTO message_spans VALUES (?,?,?)", messages)
                cur.executemany("INSERT INTO span_links VALUES (?,?,?)", links)
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            self._next_id = first + len(rows)
            self._bytes += added
            if self._bytes > self.max_bytes:
                self._trim_locked()
        if time.monotonic() - self._last_retention > RETENTION_CHECK_S:
            self.expire()
        return len(rows)

    def expire(self, now_ms: int | None = None) -> int:
        """Deletes spans received before the retention; returns how many."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        self._last_retention = time.monotonic()
        with self._lock:
            row = self._db.execute(
                "SELECT MAX(id) FROM spans WHERE received_ms < ?", (now - self.retention_ms,)
            ).fetchone()
            if row[0] is None:
                return 0
            return self._delete_through_locked(int(row[0]))

    def _trim_locked(self) -> None:
        target = self.max_bytes * TRIM_TO
        excess = self._bytes - target
        cut = 0
        freed = 0
        for rowid, size in self._db.execute("SELECT id, size FROM spans ORDER BY id"):
            cut, freed = rowid, freed + size
            if freed >= excess:
                break
        if cut:
            deleted = self._delete_through_locked(cut)
            log.info(
                "trace store above %d bytes: deleted the %d oldest spans", self.max_bytes, deleted
            )

    def _delete_through_locked(self, last_id: int) -> int:
        cur = self._db.cursor()
        cur.execute("BEGIN")
        try:
            freed = cur.execute(
                "SELECT COALESCE(SUM(size), 0), COUNT(*) FROM spans WHERE id <= ?", (last_id,)
            ).fetchone()
            cur.execute("DELETE FROM spans WHERE id <= ?", (last_id,))
            cur.execute("DELETE FROM message_spans WHERE span_row <= ?", (last_id,))
            cur.execute("DELETE FROM span_links WHERE span_row <= ?", (last_id,))
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        self._bytes -= int(freed[0])
        self._db.execute("PRAGMA incremental_vacuum")
        return int(freed[1])

    # ---- reading ----

    def traces_of_message(self, msg_id: str, extra_trace_ids: Iterable[str] = ()) -> list[str]:
        """The traces that carry `msg_id` (or are given), and the traces linked to or from
        them (a batch receive or process span sits in its own trace and links to each
        message's creation context)."""
        with self._lock:
            found = {
                r[0]
                for r in self._db.execute(
                    "SELECT DISTINCT trace_id FROM message_spans WHERE msg_id = ? LIMIT ?",
                    (msg_id, MAX_TRACES_PER_LOOKUP),
                )
            }
            found.update(extra_trace_ids)
            return self._with_linked_locked(found)

    def linked_traces(self, trace_id: str) -> list[str]:
        with self._lock:
            return self._with_linked_locked({trace_id})

    def _with_linked_locked(self, found: set[str]) -> list[str]:
        seeds = sorted(found)[:MAX_TRACES_PER_LOOKUP]
        if not seeds:
            return []
        marks = ",".join("?" * len(seeds))  # placeholders only: values are bound
        linked = self._db.execute(
            f"SELECT DISTINCT trace_id FROM span_links WHERE linked_trace_id IN ({marks}) "  # noqa: S608
            f"UNION SELECT DISTINCT linked_trace_id FROM span_links WHERE trace_id IN ({marks}) "
            "LIMIT ?",
            (*seeds, *seeds, MAX_TRACES_PER_LOOKUP),
        )
        out = set(seeds) | {r[0] for r in linked}
        return sorted(out)[:MAX_TRACES_PER_LOOKUP]

    def spans(self, trace_ids: Sequence[str]) -> list[SpanRecord]:
        """The stored spans of these traces, oldest first, at most MAX_SPANS_PER_LOOKUP."""
        ids = list(trace_ids)[:MAX_TRACES_PER_LOOKUP]
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        with self._lock:
            rows = self._db.execute(
                f"SELECT span, service, scope FROM spans WHERE trace_id IN ({marks}) "  # noqa: S608
                "ORDER BY start_ns LIMIT ?",
                (*ids, MAX_SPANS_PER_LOOKUP),
            ).fetchall()
        return [span_from_blob(blob, service, scope) for blob, service, scope in rows]

    def recent_traces(self, limit: int = 50, window: int = 20_000) -> list[TraceSummary]:
        """The traces of the last `window` spans received, newest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT trace_id, MIN(start_ns), MAX(end_ns), COUNT(*), "
                "GROUP_CONCAT(DISTINCT service), "
                "MAX(CASE WHEN parent_span_id = '' THEN name END) "
                "FROM spans WHERE id > (SELECT COALESCE(MAX(id), 0) FROM spans) - ? "
                "GROUP BY trace_id ORDER BY MIN(start_ns) DESC LIMIT ?",
                (window, limit),
            ).fetchall()
        return [
            TraceSummary(r[0], r[1], r[2], r[3], sorted((r[4] or "").split(",")), r[5] or "")
            for r in rows
        ]

    def stats(self) -> StoreStats:
        with self._lock:
            count, oldest = self._db.execute(
                "SELECT COUNT(*), COALESCE(MIN(received_ms), 0) FROM spans"
            ).fetchone()
            pages = self._db.execute("PRAGMA page_count").fetchone()[0]
            page_size = self._db.execute("PRAGMA page_size").fetchone()[0]
        return StoreStats(int(count), self._bytes, int(oldest), int(pages) * int(page_size))
