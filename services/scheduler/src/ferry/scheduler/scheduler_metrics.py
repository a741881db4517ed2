"""The scheduler's OpenTelemetry metrics (made only when metrics are on), observed at
collection from the state its loop keeps: half messages waiting for their transaction's end,
timers pending, messages delivered."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ferry.runtime import metrics

if TYPE_CHECKING:
    from ferry.scheduler.app import SchedulerApp


class SchedulerMetrics:
    def __init__(self, app: SchedulerApp) -> None:
        meter = metrics.meter("ferry.scheduler")
        observe = metrics.observe
        meter.create_observable_gauge(
            metrics.HALF_MESSAGES,
            [observe(metrics.HALF_MESSAGES, lambda: [(float(len(app.transactions.table)), {})])],
            description="half messages whose transaction has not ended (the check backlog)",
        )

        def held() -> list[tuple[float, dict[str, str]]]:
            points = [(float(app.timers.pending), {"kind": "timer"})]
            for level in app.delays.level_status():
                waiting = max(0, level.max_offset - level.offset)
                points.append((float(waiting), {"kind": "delay", "level": str(level.level)}))
            return points

        meter.create_observable_gauge(
            metrics.DELAYED_MESSAGES,
            [observe(metrics.DELAYED_MESSAGES, held)],
            description="messages held until due: timers, and per delay level (retries too)",
        )
        meter.create_observable_counter(
            "rocketmq_scheduled_delivered_messages_total",
            [observe("delivered", lambda: [(float(app.deliverer.delivered), {})])],
            description="delayed, timer and retry messages delivered to their real topic",
        )
