"""Work items drained by as few threads as keep up: the concurrent push consumer's pool.

Items wait in one queue; worker loops on the consume pool take them in order. One loop runs
while handlers are quick: under the GIL, waking a thread per message costs more than a quick
listener. More loops start, up to `max_loops`, while items wait and the handlers are slow:
- after a call longer than SLOW_CALL_S during which the process mostly idled (the handler
  waited on I/O rather than computing: another thread can use the time);
- whenever every running loop has been inside one call for longer than STALLED_S (checked
  when items arrive and by check(), run on a timer), so that a listener that hangs does not
  hold up everything queued behind it.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

SLOW_CALL_S = 0.002
STALLED_S = 0.05
CHECK_INTERVAL_S = 0.1  # how often an owner should call check()


class WorkLoops(Generic[T]):
    def __init__(
        self,
        handle: Callable[[T], None],
        start: Callable[[Callable[[], None]], bool],
        max_loops: int,
    ) -> None:
        """handle(item) does the work; start(fn) runs fn on a pool thread (False: it will
        not, the owner is closing)."""
        self._handle = handle
        self._start = start
        self._max = max_loops
        self._items: collections.deque[T] = collections.deque()
        self._lock = threading.Lock()
        self._loops = 0
        self._busy_since: dict[int, float] = {}  # thread ident -> start of its current call
        self.closed = False

    def __len__(self) -> int:
        return len(self._items)

    @property
    def loops(self) -> int:
        return self._loops

    def put(self, item: T) -> None:
        self.put_many([item])

    def put_many(self, items: list[T]) -> None:
        self._items.extend(items)
        self._grow(only_if_stalled=True)

    def check(self) -> None:
        """Starts a loop if items wait behind loops that are all stuck in long calls."""
        if self._items:
            self._grow(only_if_stalled=True)

    def _stalled(self, now: float) -> bool:
        busy = list(self._busy_since.values())
        return len(busy) >= self._loops and all(now - at > STALLED_S for at in busy)

    def _grow(self, *, only_if_stalled: bool) -> None:
        with self._lock:
            if self.closed or not self._items or self._loops >= self._max:
                return
            if only_if_stalled and self._loops > 0 and not self._stalled(time.monotonic()):
                return
            self._loops += 1
        if not self._start(self._loop):
            with self._lock:
                self._loops -= 1

    def _loop(self) -> None:
        me = threading.get_ident()
        try:
            while not self.closed:
                try:
                    item = self._items.popleft()
                except IndexError:
                    break
                started, cpu = time.monotonic(), time.process_time()
                self._busy_since[me] = started
                try:
                    self._handle(item)
                finally:
                    del self._busy_since[me]
                took = time.monotonic() - started
                waited = time.process_time() - cpu < took / 2  # I/O rather than CPU
                if took > SLOW_CALL_S and waited and self._items:
                    self._grow(only_if_stalled=False)
        finally:
            with self._lock:
                self._loops -= 1
                orphaned = self._loops == 0 and bool(self._items)
            if orphaned:
                self._grow(only_if_stalled=True)  # an item came in while this loop was leaving
