"""What every driver shares: the body, the stamp for latency, pacing and percentiles."""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

BODY = b"x" * 1024
PIPELINE = 1000  # Redis commands per round trip, NATS pending publishes, RabbitMQ confirm window
STAMP = struct.Struct(">q")  # perf_counter_ns at send, the first 8 bytes of a latency body


class Latency(NamedTuple):
    p50: float
    p99: float
    sent_rate: float = 0.0  # end to end: the rate the sender kept (0: not known)


def percentiles(samples_us: Sequence[float]) -> Latency:
    if not samples_us:
        raise RuntimeError("no latency samples (nothing was delivered)")
    ordered = sorted(samples_us)

    def at(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(len(ordered) * p))]

    return Latency(at(0.5), at(0.99))


def stamped() -> bytes:
    return STAMP.pack(time.perf_counter_ns()) + BODY[STAMP.size :]


class Pacer:
    """Iterates `total` stamped bodies at `rate` per second (each stamped when it is due);
    afterwards `sent_rate` tells whether the sender kept up (a loaded machine may not)."""

    def __init__(self, total: int, rate: int) -> None:
        self.total = total
        self.rate = rate
        self.sent_rate = 0.0

    def __iter__(self) -> Iterator[bytes]:
        interval = 1.0 / self.rate
        start = time.perf_counter()
        for i in range(self.total):
            ahead = start + i * interval - time.perf_counter()
            if ahead > 0:
                time.sleep(ahead)  # pacing the load; sleeping lets the consumer thread run
            yield stamped()
        self.sent_rate = self.total / max(time.perf_counter() - start, 1e-9)

    def result(self, samples_us: Sequence[float]) -> Latency:
        p50, p99, _ = percentiles(samples_us)
        return Latency(p50, p99, self.sent_rate)


def cpu_busy() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine since boot (/proc/stat)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def settle(busy_below: float = 0.15, window_s: float = 0.5, limit_s: float = 60.0) -> float:
    """Writes every dirty page to disk, then waits until the machine is idle (under 15 %
    busy over half a second), at most a minute; returns the seconds waited. Every system
    gets this before every measurement, so that work left from the previous one (Ferry's
    index catching up, a peer's background flush, the kernel writing back what the last
    system wrote) is not charged to the next system measured."""
    started = time.monotonic()
    os.sync()
    while time.monotonic() - started < limit_s:
        busy0, total0 = cpu_busy()
        time.sleep(window_s)  # the sampling window of the idle check
        busy1, total1 = cpu_busy()
        if (busy1 - busy0) < busy_below * max(total1 - total0, 1):
            break
    return time.monotonic() - started
