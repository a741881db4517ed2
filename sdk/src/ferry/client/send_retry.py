"""RocketMQ's send retries as plain state: how many attempts, until when, which broker to
avoid next, and the error to raise in the end. The sync Producer and ferry.client.aio drive it
each with its own I/O."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

from ferry.client.publish import Publisher, Target
from ferry.protocol.errors import ConnectionFailedError, FerryError, RequestTimeoutError

log = logging.getLogger("ferry.client.producer")

# once the attempts are used up on brokers that are down (a restart of remoting takes about
# 0.6 s), a send tries again this often until its timeout: such a request never left, so
# trying again cannot store it twice
RECONNECT_PAUSE_S = 0.1


def rides_out(err: FerryError, attempts_left: int, deadline: float) -> bool:
    """Whether a send out of attempts waits for a broker that refused the connection and
    tries again (the sync producer, ferry.client.aio and send_async alike)."""
    return (
        isinstance(err, ConnectionFailedError)
        and attempts_left <= 0
        and deadline - time.monotonic() > RECONNECT_PAUSE_S
    )


class SendRetries:
    """Attempts of one send: `for remaining in retries:` gives each attempt's time left."""

    def __init__(self, topic: str, retry_times: int, timeout_s: float) -> None:
        self.topic = topic
        self.attempts = 1 + retry_times
        self.deadline = time.monotonic() + timeout_s
        self.avoid: str | None = None  # the broker that failed last
        self.last_error: FerryError | None = None
        self.pause_s = 0.0  # what the driver waits before the next attempt
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
        self.pause_s = 0.0
        if rides_out(err, self.attempts - self._attempt, self.deadline):
            self.attempts += 1
            self.pause_s = RECONNECT_PAUSE_S
        return True

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def final_error(self) -> FerryError:
        return self.last_error or RequestTimeoutError(f"send to {self.topic} timed out")
