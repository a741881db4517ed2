"""The scheduler's configuration: the broker's (broker.conf is shared by the whole broker
group) plus its own keys, under RocketMQ's names where RocketMQ has them."""

from __future__ import annotations

from pathlib import Path

from ferry.protocol.errors import ConfigError
from ferry.runtime.config import BrokerConfig


class SchedulerConfig(BrokerConfig, kw_only=True):
    # width of one timer bucket file (RocketMQ's timerPrecisionMs is its wheel slot); timers
    # are still delivered at their own ms: a bucket is only the unit read from disk at once
    timer_precision_ms: int = 1000
    # how often moved progress is saved (a kill -9 re-checks at most this much of the log)
    scheduler_flush_interval_ms: int = 100

    @property
    def scheduler_dir(self) -> Path:
        return self.store_root / "scheduler"

    def listen_endpoint(self) -> str:
        """schedulerEndpoint, or an ipc socket under <store>/run (tcp on a free port when that
        path is too long for a unix socket)."""
        return self.scheduler_endpoint or self.run_endpoint("scheduler.sock")

    def check(self) -> None:
        super().check()
        if not 10 <= self.timer_precision_ms <= 3_600_000:
            raise ConfigError("timerPrecisionMs must be within 10..3600000")
        if not 1 <= self.scheduler_flush_interval_ms <= 60_000:
            raise ConfigError("schedulerFlushIntervalMs must be within 1..60000")
        if not self.store_endpoint:
            raise ConfigError(
                "storeEndpoint must name this broker's broker-store (its READY line gives "
                "endpoint=)"
            )
