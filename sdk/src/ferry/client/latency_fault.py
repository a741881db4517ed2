"""Latency fault avoidance for producers (RocketMQ's MQFaultStrategy, 5.x tables).

After each send the broker's latency L is bucketed: the largest `latency_max_ms[i]` not above L
makes the broker unavailable for `not_available_ms[i]`. A failed send counts as
`failure_latency_ms` (10 s, which isolates a broker for 10 s with the default tables). Queue
selection then prefers brokers that are available. Off by default, as in RocketMQ.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ferry.protocol.errors import InvalidParameterError

LATENCY_MAX_MS = (50, 100, 550, 1800, 3000, 5000, 15000)
NOT_AVAILABLE_MS = (0, 0, 2000, 5000, 6000, 10000, 30000)
FAILURE_LATENCY_MS = 10_000


@dataclass(frozen=True)
class FaultConfig:
    enabled: bool = False
    latency_max_ms: tuple[int, ...] = LATENCY_MAX_MS
    not_available_ms: tuple[int, ...] = NOT_AVAILABLE_MS
    failure_latency_ms: int = FAILURE_LATENCY_MS

    def __post_init__(self) -> None:
        if len(self.latency_max_ms) != len(self.not_available_ms) or not self.latency_max_ms:
            raise InvalidParameterError(
                "latency_max_ms and not_available_duration_ms need the same, non-zero length"
            )
        if list(self.latency_max_ms) != sorted(self.latency_max_ms):
            raise InvalidParameterError("latency_max_ms must be in ascending order")

    def isolation_ms(self, latency_ms: float) -> int:
        """How long a broker that answered in latency_ms is avoided."""
        for bound, duration in zip(
            reversed(self.latency_max_ms), reversed(self.not_available_ms), strict=True
        ):
            if latency_ms >= bound:
                return duration
        return 0


class LatencyFaultTolerance:
    """Brokers to avoid, and until when; thread-safe."""

    def __init__(self, config: FaultConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self._clock = clock
        self._lock = threading.Lock()
        self._until: dict[str, float] = {}  # broker name -> monotonic time it is usable again

    @property
    def enabled(self) -> bool:
        return self.config.enabled

    def update(self, broker: str, latency_ms: float, *, failed: bool = False) -> None:
        """Records one send's outcome."""
        if not self.config.enabled:
            return
        latency = self.config.failure_latency_ms if failed else latency_ms
        isolation_s = self.config.isolation_ms(latency) / 1000
        with self._lock:
            if isolation_s > 0:
                self._until[broker] = self._clock() + isolation_s
            else:
                self._until.pop(broker, None)

    def available(self, broker: str) -> bool:
        until = self._until.get(broker)
        return until is None or self._clock() >= until

    def least_bad(self, brokers: Iterable[str]) -> str | None:
        """The broker usable soonest (every broker may be isolated at once)."""
        with self._lock:
            return min(brokers, key=lambda b: self._until.get(b, 0.0), default=None)
