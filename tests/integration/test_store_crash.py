"""Crash proof of the store: kill -9 in the middle of SYNC_FLUSH traffic, round after round, and
every acknowledged message is still served, intact, exactly once. With ASYNC_FLUSH a clean stop
loses nothing. (More rounds: bench/soak_store_crash.py.)"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from itest_support import wait_for
from store_crash_support import CrashRig

pytestmark = pytest.mark.integration

CRASH_ROUNDS = 20


def waiter(what: str) -> Callable[[Callable[[], bool]], None]:
    def wait(predicate: Callable[[], bool]) -> None:
        wait_for(predicate, timeout=30, what=what)

    return wait


@pytest.fixture
def rig_factory(tmp_path: Path) -> Iterator[Callable[..., CrashRig]]:
    rigs: list[CrashRig] = []

    def make(**kwargs: object) -> CrashRig:
        rig = CrashRig(tmp_path / f"broker{len(rigs)}", **kwargs)  # type: ignore[arg-type]
        rigs.append(rig)
        rig.start()
        return rig

    yield make
    for rig in rigs:
        rig.close()


def test_acknowledged_sync_sends_survive_repeated_kill_9_of_the_store(
    rig_factory: Callable[..., CrashRig],
) -> None:
    seed = time.time_ns()
    rng = random.Random(seed)
    rig = rig_factory(flush_disk_type="SYNC_FLUSH")
    for _ in range(CRASH_ROUNDS):
        rig.crash_round(rng, waiter(f"acknowledged sends (seed {seed})"))
        stored = rig.verify()
        assert stored >= len(rig.acked)
    status = rig.store_status()
    assert status.min_offset == 0
    assert status.max_offset > 2 * 64 * 1024  # segments rolled during the rounds
    assert rig.rounds == CRASH_ROUNDS
    assert len(rig.acked) > CRASH_ROUNDS * 10


def test_with_async_flush_a_clean_stop_loses_nothing(
    rig_factory: Callable[..., CrashRig],
) -> None:
    # a flush interval far longer than the test: only the clean stop flushes
    rig = rig_factory(flush_disk_type="ASYNC_FLUSH", extra={"flushIntervalCommitLog": "600000"})
    rng = random.Random(7)
    stop, threads = rig.produce_until(300, waiter("acknowledged async sends"), rng)
    stop.set()
    for t in threads:
        t.join(10)
    before = rig.store_status()
    assert before.flushed_offset < before.max_offset  # nothing flushed yet
    rig.restart_store(kill=False)
    after = rig.store_status()
    assert after.max_offset == after.recovered_offset == before.max_offset
    assert rig.verify() >= len(rig.acked) >= 300
