"""RocketMQ's send retries as plain state: how many attempts, until when, which broker to
avoid next, and the error to raise in the end. The sync Producer and ferry.client.aio drive it
each with its own I/O."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

from ferry.client.publish import Publisher, Target
from ferry.protocol.errors import FerryError, RequestTimeoutError

log = logging.getLogger("ferry.client.producer")


class SendRetries:
    """Attempts of one send: `for remaining in retries:` gives each attempt's time left."""

    def __init__(self, topic: str, retry_times: int, timeout_s: float) -> None:
        self.topic = topic
        self.attempts = 1 + retry_times
        self.deadline = time.monotonic() + timeout_s
        self.avoid: str | None = None  # the broker that failed last
        self.last_error: FerryError | None = None
        self._attempt = 0

    def __iter__(self) -> Iterator[float]:
        while self._attempt < self.attempts:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                return
            self._attempt += 1
            yield remaining

    def failed(self, err: FerryError, publisher: Publisher, target: Target | None) -> bool:
        """Records a failed attempt; True when another may follow (the route is refreshed
        and the broker that failed avoided)."""
        self.last_error = err
        if not err.retriable:
            return False
        log.debug("send to %s failed (attempt %d): %s", self.topic, self._attempt, err)
        publisher.failed(self.topic)
        if target is not None:
            self.avoid = target.queue.broker_name
        return True

    def final_error(self) -> FerryError:
        return self.last_error or RequestTimeoutError(f"send to {self.topic} timed out")
