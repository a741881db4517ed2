"""Counters the broker reports in its runtime info."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class BrokerStats:
    started_ms: int = field(default_factory=now_ms)
    put_messages: int = 0
    put_requests: int = 0
    pulled_messages: int = 0
    pull_requests: int = 0

    def uptime_text(self, at_ms: int) -> str:
        """RocketMQ's runtime format: "[ 0 days, 1 hours, 2 minutes, 3 seconds ]"."""
        seconds = max(0, at_ms - self.started_ms) // 1000
        days, rest = divmod(seconds, 86_400)
        hours, rest = divmod(rest, 3600)
        minutes, secs = divmod(rest, 60)
        return f"[ {days} days, {hours} hours, {minutes} minutes, {secs} seconds ]"
