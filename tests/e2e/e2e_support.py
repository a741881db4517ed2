"""What the end-to-end tests share: a steady producer and a reader that waits for bodies."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from itest_support import wait_for

from ferry.client import (
    ConsumeFromWhere,
    FerryError,
    Message,
    MessageExt,
    Producer,
    PullConsumer,
    SendStatus,
)


def consume_all(
    namesrv: str,
    group: str,
    topic: str,
    want: set[bytes],
    timeout: float = 60.0,
    **options: Any,
) -> list[MessageExt]:
    """Polls a new group from the first offset until every body in `want` has arrived."""
    got: list[MessageExt] = []
    first = ConsumeFromWhere.FIRST_OFFSET
    with PullConsumer(group, namesrv, consume_from=first, **options) as consumer:
        consumer.subscribe(topic, "*")

        def arrived() -> bool:
            got.extend(consumer.poll(timeout=1.0))
            return want <= {m.body for m in got}

        try:
            wait_for(arrived, timeout=timeout, what=f"{len(want)} messages of {topic}")
        except pytest.fail.Exception:
            missing = sorted(want - {m.body for m in got})
            pytest.fail(f"{len(missing)} of {len(want)} not read from {topic}: {missing[:5]}")
        consumer.commit()
    return got


class SteadyLoad:
    """One producer sending numbered messages back to back, noting which were acknowledged."""

    def __init__(self, namesrv: str, topic: str) -> None:
        self.namesrv = namesrv
        self.topic = topic
        self.acked: list[bytes] = []
        self.failures = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="steady-load", daemon=True)

    def _run(self) -> None:
        with Producer("e2e-load", self.namesrv, send_timeout_ms=2000, retry_times=0) as producer:
            seq = 0
            while not self.stop.is_set():
                body = f"load-{seq}".encode()
                seq += 1
                try:
                    result = producer.send(Message(self.topic, body))
                except FerryError:
                    self.failures += 1
                    self.stop.wait(0.05)  # back off while the broker is down
                    continue
                if result.status is SendStatus.SEND_OK:
                    self.acked.append(body)

    def __enter__(self) -> SteadyLoad:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop.set()
        self.thread.join(30)
