"""The store's metrics (made only when metrics are on): flush latency, a prometheus_client
Histogram the flusher feeds on the loop, and the CommitLog's size and unflushed bytes, read at
collection (plain int reads of loop state)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ferry.runtime import metrics
from ferry.store.flush import Flusher, FlushPlan
from ferry.store.store import MessageStore

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry


class StoreMetrics:
    def __init__(
        self, store: MessageStore, flusher: Flusher, registry: CollectorRegistry | None = None
    ) -> None:
        registry = metrics.registry() if registry is None else registry
        from prometheus_client import Histogram  # only once metrics are on (metrics.py)

        latency = Histogram(
            metrics.FLUSH_LATENCY,
            "time of one flush (fdatasync of the CommitLog, and for full flushes "
            "the ConsumeQueues and checkpoint)",
            ("flush",),
            registry=registry,
            buckets=metrics.FLUSH_BUCKETS_MS,
        )
        by_kind: dict[str, Any] = {}  # made at a kind's first flush: no series before

        def flushed(plan: FlushPlan) -> None:
            kind = "full" if plan.write_checkpoint else "log"
            child = by_kind.get(kind)
            if child is None:
                child = by_kind[kind] = latency.labels(kind)
            child.observe((plan.done_at - plan.started_at) * 1000)

        flusher.on_flushed = flushed
        metrics.observe(
            registry,
            metrics.COMMITLOG_MAX_OFFSET,
            "gauge",
            "end of the CommitLog (bytes ever written)",
            lambda: [(float(store.log.end), {})],
        )
        metrics.observe(
            registry,
            metrics.UNFLUSHED_BYTES,
            "gauge",
            "CommitLog bytes written and not yet known to be on disk",
            lambda: [(float(store.unflushed_bytes()), {})],
        )
