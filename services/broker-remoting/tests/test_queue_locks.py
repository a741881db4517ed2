"""Orderly consumers' queue locks (plain state)."""

from __future__ import annotations

from ferry.remoting.queue_locks import QueueLockTable

QS = [("T", 0), ("T", 1)]


def test_a_queue_locked_by_one_client_is_refused_to_another_until_it_lapses() -> None:
    table = QueueLockTable(expire_ms=30_000)
    assert table.try_lock("g", "a", QS, now_ms=0) == QS
    assert table.try_lock("g", "b", QS, now_ms=10_000) == []
    assert table.try_lock("g", "a", QS[:1], now_ms=20_000) == QS[:1]  # renewal
    # queue 1 was last renewed at 0, queue 0 at 20 s
    assert table.try_lock("g", "b", QS, now_ms=30_001) == [("T", 1)]
    assert table.holder("g", "T", 0, now_ms=30_001) == "a"
    assert table.holder("g", "T", 1, now_ms=30_001) == "b"


def test_locks_are_per_group() -> None:
    table = QueueLockTable()
    assert table.try_lock("g1", "a", QS, now_ms=0) == QS
    assert table.try_lock("g2", "b", QS, now_ms=0) == QS


def test_unlock_releases_only_the_holders_own_locks() -> None:
    table = QueueLockTable()
    table.try_lock("g", "a", QS, now_ms=0)
    table.unlock("g", "b", QS)
    assert table.holder("g", "T", 0, now_ms=1) == "a"
    table.unlock("g", "a", QS[:1])
    assert table.try_lock("g", "b", QS, now_ms=2) == QS[:1]


def test_a_departed_clients_locks_go_with_it() -> None:
    table = QueueLockTable()
    table.try_lock("g1", "a", QS, now_ms=0)
    table.try_lock("g2", "a", QS, now_ms=0)
    assert table.release_client("a", ["g1"]) == 2
    assert table.holder("g1", "T", 0, now_ms=1) is None
    assert table.holder("g2", "T", 0, now_ms=1) == "a"
    assert table.release_client("a") == 2
    assert len(table) == 0
