"""The client's timer thread."""

from __future__ import annotations

import threading
import time

from ferry.client.timers import Ticker


def wait_for(predicate: object, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.005)  # wait-ok: polling within a deadline
    return False


def test_periodic_and_delayed_tasks_run_and_a_failure_is_not_fatal() -> None:
    ticker = Ticker("test-ticker")
    ticks: list[float] = []
    done = threading.Event()

    def boom() -> None:
        raise RuntimeError("task failure")

    try:
        ticker.later(0, boom)
        ticker.every(0.01, lambda: ticks.append(time.monotonic()))
        ticker.later(0.05, done.set)
        assert done.wait(5)
        assert wait_for(lambda: len(ticks) >= 3)
    finally:
        ticker.close()
    assert not any(t.name == "test-ticker" for t in threading.enumerate())
    assert ticker.later(0, done.set) is False


def test_tasks_run_in_due_order() -> None:
    ticker = Ticker("test-order")
    order: list[int] = []
    try:
        ticker.later(0.06, lambda: order.append(3))
        ticker.later(0.02, lambda: order.append(1))
        ticker.later(0.04, lambda: order.append(2))
        assert wait_for(lambda: len(order) == 3)
    finally:
        ticker.close()
    assert order == [1, 2, 3]
