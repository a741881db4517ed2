"""Counters the broker reports in its runtime info and in statsAll.

Per topic (messages put) and per group and topic (messages pulled), totals since start; TPS
is the growth over the last minute, from samples taken every few seconds (RocketMQ's stats
keep minute windows too).
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from dataclasses import dataclass, field

SAMPLE_INTERVAL_S = 5.0
WINDOW_SAMPLES = 12  # a minute of samples

Key = tuple[str, str]  # (topic, group); group "" for puts


def now_ms() -> int:
    return int(time.time() * 1000)


def elapsed_ms(started: float) -> float:
    """Milliseconds since a time.monotonic() reading."""
    return (time.monotonic() - started) * 1000


@dataclass
class Traffic:
    key: Key
    total: int
    tps: float


@dataclass
class BrokerStats:
    started_ms: int = field(default_factory=now_ms)
    put_messages: int = 0
    put_requests: int = 0
    pulled_messages: int = 0
    pull_requests: int = 0
    # pulls whose records remoting read from the CommitLog files, and reads that failed
    # (those pulls went through the store)
    pull_log_reads: int = 0
    pull_log_read_misses: int = 0
    puts: dict[Key, int] = field(default_factory=dict)
    gets: dict[Key, int] = field(default_factory=dict)
    # bytes of records put / pulled by the same keys (rocketmq_throughput_*)
    put_bytes: dict[Key, int] = field(default_factory=dict)
    get_bytes: dict[Key, int] = field(default_factory=dict)
    # messages moved to a DLQ, by (DLQ topic, group); transactions ended, by resolution
    dlq: dict[Key, int] = field(default_factory=dict)
    transactions: dict[str, int] = field(default_factory=dict)
    # set when metrics are on (broker_metrics.py): (request, outcome, ms)
    on_latency: Callable[[str, str, float], None] | None = None
    # (monotonic time, copy of puts, copy of gets), oldest first
    samples: collections.deque[tuple[float, dict[Key, int], dict[Key, int]]] = field(
        default_factory=lambda: collections.deque(maxlen=WINDOW_SAMPLES)
    )

    def count_put(self, topic: str, messages: int, size: int = 0) -> None:
        key = (topic, "")
        self.puts[key] = self.puts.get(key, 0) + messages
        if size:
            self.put_bytes[key] = self.put_bytes.get(key, 0) + size

    def count_get(self, group: str, topic: str, messages: int, size: int = 0) -> None:
        key = (topic, group)
        self.gets[key] = self.gets.get(key, 0) + messages
        if size:
            self.get_bytes[key] = self.get_bytes.get(key, 0) + size

    def count_dlq(self, group: str, dlq_topic: str) -> None:
        key = (dlq_topic, group)
        self.dlq[key] = self.dlq.get(key, 0) + 1

    def count_transaction(self, resolution: str) -> None:
        """resolution: COMMIT or ROLLBACK."""
        self.transactions[resolution] = self.transactions.get(resolution, 0) + 1

    def sample(self, at: float | None = None) -> None:
        """Called every SAMPLE_INTERVAL_S; the oldest sample kept starts the TPS window."""
        self.samples.append(
            (time.monotonic() if at is None else at, dict(self.puts), dict(self.gets))
        )

    def traffic(self, at: float | None = None) -> tuple[list[Traffic], list[Traffic], int]:
        """(puts, gets, window in ms): totals and TPS over the window, by key."""
        now = time.monotonic() if at is None else at
        if self.samples:
            since, old_puts, old_gets = self.samples[0]
        else:
            since, old_puts, old_gets = now, {}, {}
        seconds = max(now - since, 1e-3)

        def rows(current: dict[Key, int], old: dict[Key, int]) -> list[Traffic]:
            return [
                Traffic(key, total, round((total - old.get(key, 0)) / seconds, 2))
                for key, total in sorted(current.items())
            ]

        return rows(self.puts, old_puts), rows(self.gets, old_gets), int(seconds * 1000)

    def uptime_text(self, at_ms: int) -> str:
        """RocketMQ's runtime format: "[ 0 days, 1 hours, 2 minutes, 3 seconds ]"."""
        seconds = max(0, at_ms - self.started_ms) // 1000
        days, rest = divmod(seconds, 86_400)
        hours, rest = divmod(rest, 3600)
        minutes, secs = divmod(rest, 60)
        return f"[ {days} days, {hours} hours, {minutes} minutes, {secs} seconds ]"
