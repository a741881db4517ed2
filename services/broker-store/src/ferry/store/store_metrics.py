"""The store's OpenTelemetry metrics (made only when metrics are on): flush latency, told by
the flusher on the loop, and the CommitLog's size and unflushed bytes, observed at collection
(plain int reads of loop state)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ferry.runtime import metrics
from ferry.store.flush import Flusher, FlushPlan
from ferry.store.store import MessageStore

Points = Iterable[tuple[float, Mapping[str, str]]]


class StoreMetrics:
    def __init__(self, store: MessageStore, flusher: Flusher) -> None:
        meter = metrics.meter("ferry.store")
        latency = meter.create_histogram(
            metrics.FLUSH_LATENCY,
            unit="ms",
            description="time of one flush (fdatasync of the CommitLog, and for full flushes "
            "the ConsumeQueues and checkpoint)",
        )

        def flushed(plan: FlushPlan) -> None:
            kind = "full" if plan.write_checkpoint else "log"
            latency.record((plan.done_at - plan.started_at) * 1000, {"flush": kind})

        flusher.on_flushed = flushed
        meter.create_observable_gauge(
            "rocketmq_storage_commitlog_max_offset",
            [metrics.observe("commitlog", lambda: [(float(store.log.end), {})])],
            unit="By",
            description="end of the CommitLog (bytes ever written)",
        )
        meter.create_observable_gauge(
            "rocketmq_storage_unflushed_bytes",
            [metrics.observe("unflushed", lambda: [(float(store.unflushed_bytes()), {})])],
            unit="By",
            description="CommitLog bytes written and not yet known to be on disk",
        )
