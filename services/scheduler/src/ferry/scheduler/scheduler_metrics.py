"""The scheduler's metrics (made only when metrics are on), read at collection from the state
its loop keeps: timers and delayed messages pending, messages delivered."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ferry.runtime import metrics
from ferry.runtime.metrics import Points

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from ferry.scheduler.app import SchedulerApp


class SchedulerMetrics:
    def __init__(self, app: SchedulerApp, registry: CollectorRegistry | None = None) -> None:
        registry = metrics.registry() if registry is None else registry

        def held() -> Points:
            points = [(float(app.timers.pending), {"kind": "timer"})]
            for level in app.delays.level_status():
                waiting = max(0, level.max_offset - level.offset)
                points.append((float(waiting), {"kind": "delay", "level": str(level.level)}))
            return points

        metrics.observe(
            registry,
            metrics.DELAYED_MESSAGES,
            "gauge",
            "messages held until due: timers, and per delay level (retries too)",
            held,
        )
        metrics.observe(
            registry,
            metrics.SCHEDULED_DELIVERED,
            "counter",
            "delayed, timer and retry messages delivered to their real topic",
            lambda: [(float(app.deliverer.delivered), {})],
        )
