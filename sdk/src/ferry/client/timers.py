"""One background thread per client for periodic and delayed work (heartbeats, route refresh,
auto commit, pull back-off). Tasks run one at a time; a failing task is logged, never fatal."""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("ferry.client.timers")


class Ticker:
    def __init__(self, name: str) -> None:
        self._cond = threading.Condition()
        self._tasks: list[tuple[float, int, Callable[[], None], float]] = []
        self._seq = itertools.count()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def every(
        self, interval_s: float, fn: Callable[[], None], *, first_s: float | None = None
    ) -> bool:
        return self._push(interval_s if first_s is None else first_s, fn, interval_s)

    def later(self, delay_s: float, fn: Callable[[], None]) -> bool:
        """False when the ticker is closed and fn will never run."""
        return self._push(delay_s, fn, 0.0)

    def _push(self, delay_s: float, fn: Callable[[], None], interval_s: float) -> bool:
        with self._cond:
            if self._stopping:
                return False
            heapq.heappush(
                self._tasks, (time.monotonic() + delay_s, next(self._seq), fn, interval_s)
            )
            self._cond.notify()
            return True

    def close(self, timeout_s: float = 10.0) -> None:
        with self._cond:
            self._stopping = True
            self._tasks.clear()
            self._cond.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopping:
                    now = time.monotonic()
                    if self._tasks and self._tasks[0][0] <= now:
                        break
                    wait = self._tasks[0][0] - now if self._tasks else None
                    self._cond.wait(wait)
                if self._stopping:
                    return
                _, _, fn, interval = heapq.heappop(self._tasks)
                if interval > 0:
                    heapq.heappush(
                        self._tasks, (time.monotonic() + interval, next(self._seq), fn, interval)
                    )
            try:
                fn()
            except Exception:
                log.exception("background task %s failed", getattr(fn, "__name__", fn))
