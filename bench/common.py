"""Shared by the benchmarks: statistics, result tables, a cluster to run against."""

from __future__ import annotations

import contextlib
import json
import platform
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


@dataclass
class Figure:
    name: str
    unit: str
    runs: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.runs)

    @property
    def spread(self) -> str:
        return f"{shown(min(self.runs))}-{shown(max(self.runs))}"


def shown(value: float) -> str:
    """A figure as the tables print it: whole numbers, small ones (µs per message) to 0.1."""
    return f"{value:,.1f}" if abs(value) < 100 else f"{value:,.0f}"


def repeat(times: int, fn: Callable[[], float]) -> list[float]:
    return [fn() for _ in range(times)]


def percentile(values: Sequence[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


def timed(fn: Callable[[], int]) -> float:
    """Runs fn (which returns how many messages it moved); returns messages per second."""
    started = time.perf_counter()
    moved = fn()
    return moved / (time.perf_counter() - started)


def schedule(rate: int, seconds: float) -> Iterator[float]:
    """For each of `rate` x `seconds` calls on a steady schedule, the seconds to wait before
    it (0 when late: a late call is not made up by a burst of sleeps). Sync and asyncio
    senders pace themselves with it alike."""
    interval = 1.0 / rate
    start = time.perf_counter()
    for i in range(int(rate * seconds)):
        yield max(0.0, start + i * interval - time.perf_counter())


def paced(rate: int, seconds: float, send: Callable[[], None]) -> int:
    """Calls send() `rate` times a second for `seconds`; returns how many calls it made."""
    total = 0
    for ahead in schedule(rate, seconds):
        if ahead > 0:
            time.sleep(ahead)  # wait-ok: pacing the load (sleeping lets other threads run)
        send()
        total += 1
    return total


def report(title: str, figures: list[Figure]) -> None:
    width = max(len(f.name) for f in figures)
    print(
        f"\n{title}  ({platform.python_implementation()} {platform.python_version()}, "
        f"{platform.machine()})"
    )
    print(f"{'benchmark':<{width}}  {'median':>12}  {'spread (min-max)':>22}  unit")
    for f in figures:
        print(f"{f.name:<{width}}  {shown(f.median):>12}  {f.spread:>22}  {f.unit}")
    RESULTS.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = RESULTS / f"{title.replace(' ', '_')}-{stamp}.json"
    out.write_text(json.dumps([asdict(f) | {"median": f.median} for f in figures], indent=2))
    print(f"(saved {out})")


HALT_POLL = Path("/sys/module/haltpoll/parameters/guest_halt_poll_ns")


@contextlib.contextmanager
def halt_poll(ns: int | None) -> Iterator[str]:
    """The guest's haltpoll cpuidle polling set to `ns` for the block (None: left alone), the
    old value put back after; yields the value in force ("n/a" where the machine has none).
    How long an idle vCPU polls before it halts decides what waking a thread costs on a VM."""
    if not HALT_POLL.exists():
        if ns is not None:
            raise SystemExit(f"--halt-poll-ns: {HALT_POLL} does not exist here")
        yield "n/a"
        return
    old = HALT_POLL.read_text().strip()
    if ns is None:
        yield old
        return
    HALT_POLL.write_text(str(ns))
    try:
        yield HALT_POLL.read_text().strip()
    finally:
        HALT_POLL.write_text(old)
