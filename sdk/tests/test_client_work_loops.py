"""The concurrent consumer's elastic pool: one thread for quick work, more for waiting work."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from ferry.client.work_loops import WorkLoops


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    executor = ThreadPoolExecutor(8)
    yield executor
    executor.shutdown(wait=True)


def starter(pool: ThreadPoolExecutor) -> Callable[[Callable[[], None]], bool]:
    def start(fn: Callable[[], None]) -> bool:
        pool.submit(fn)
        return True

    return start


class Probe:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = 0
        self.peak = 0
        self.done: list[int] = []

    def enter(self) -> None:
        with self.lock:
            self.running += 1
            self.peak = max(self.peak, self.running)

    def leave(self, item: int) -> None:
        with self.lock:
            self.running -= 1
            self.done.append(item)


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)  # wait-ok: polling interval of a deadline-bounded wait
    return True


def test_quick_work_runs_on_one_thread_in_order(pool: ThreadPoolExecutor) -> None:
    probe = Probe()

    def handle(item: int) -> None:
        probe.enter()
        probe.leave(item)

    work: WorkLoops[int] = WorkLoops(handle, starter(pool), max_loops=8)
    work.put_many(list(range(500)))
    assert wait_until(lambda: len(probe.done) == 500)
    assert probe.peak == 1
    assert probe.done == list(range(500))
    assert wait_until(lambda: work.loops == 0)


def test_work_waiting_on_io_spreads_over_the_threads(pool: ThreadPoolExecutor) -> None:
    probe = Probe()

    def handle(item: int) -> None:
        probe.enter()
        threading.Event().wait(0.02)
        probe.leave(item)

    work: WorkLoops[int] = WorkLoops(handle, starter(pool), max_loops=6)
    work.put_many(list(range(60)))
    assert wait_until(lambda: len(probe.done) == 60)
    assert 4 <= probe.peak <= 6


def test_a_hung_handler_does_not_hold_up_the_items_behind_it(pool: ThreadPoolExecutor) -> None:
    release = threading.Event()
    done: list[int] = []

    def handle(item: int) -> None:
        if item == 0:
            release.wait(10)
        done.append(item)

    work: WorkLoops[int] = WorkLoops(handle, starter(pool), max_loops=4)
    work.put(0)
    assert wait_until(lambda: work.loops == 1)
    work.put_many([1, 2, 3])
    for _ in range(100):  # the owner's timer
        work.check()
        if done == [1, 2, 3]:
            break
        time.sleep(0.02)  # wait-ok: the timer's period
    assert done == [1, 2, 3]
    release.set()
    assert wait_until(lambda: done == [1, 2, 3, 0])
