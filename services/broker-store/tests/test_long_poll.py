"""The held-request table behind long polling."""

from __future__ import annotations

from ferry.store.long_poll import MAX_SUSPEND_MS, LongPollTable


def test_a_put_takes_every_request_held_for_its_queue_only() -> None:
    table: LongPollTable[str] = LongPollTable()
    table.hold("T", 0, "a", now=100.0, suspend_ms=5000)
    table.hold("T", 0, "b", now=100.0, suspend_ms=5000)
    table.hold("T", 1, "c", now=100.0, suspend_ms=5000)
    assert len(table) == 3
    assert table.take("T", 0) == ["a", "b"]
    assert table.take("T", 0) == []
    assert len(table) == 1


def test_expired_takes_only_requests_past_their_deadline() -> None:
    table: LongPollTable[str] = LongPollTable()
    table.hold("T", 0, "short", now=100.0, suspend_ms=100)
    table.hold("T", 0, "long", now=100.0, suspend_ms=10_000)
    assert table.expired(100.05) == []
    assert table.expired(100.2) == ["short"]
    assert table.take("T", 0) == ["long"]
    assert len(table) == 0


def test_suspend_is_capped() -> None:
    table: LongPollTable[str] = LongPollTable()
    table.hold("T", 0, "forever", now=0.0, suspend_ms=10**9)
    assert table.expired(MAX_SUSPEND_MS / 1000 - 0.01) == []
    assert table.expired(MAX_SUSPEND_MS / 1000 + 0.01) == ["forever"]


def test_take_all_empties_the_table() -> None:
    table: LongPollTable[int] = LongPollTable()
    for i in range(3):
        table.hold("T", i, i, now=0.0, suspend_ms=1000)
    assert sorted(table.take_all()) == [0, 1, 2]
    assert len(table) == 0
