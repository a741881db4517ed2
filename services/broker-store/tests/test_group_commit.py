"""GroupCommitQueue: which waiting puts a flush releases, and which ran out of time."""

from __future__ import annotations

from ferry.store.group_commit import GroupCommitQueue


def test_a_flush_releases_exactly_the_puts_ending_at_or_below_its_offset() -> None:
    q: GroupCommitQueue[str] = GroupCommitQueue()
    q.add(100, 10.0, "a")
    q.add(250, 10.0, "b")
    q.add(400, 10.0, "c")
    first = q.release(250, 1.0)
    assert (first.on_time, first.late) == (["a", "b"], [])
    assert len(q) == 1
    assert q.highest_end == 400
    assert q.release(399, 1.0).on_time == []
    assert q.release(1000, 1.0).on_time == ["c"]
    assert len(q) == 0


def test_puts_whose_flush_finished_after_their_deadline_are_late() -> None:
    q: GroupCommitQueue[str] = GroupCommitQueue()
    q.add(10, 1.0, "early")
    q.add(20, 2.0, "later")
    q.add(30, 3.0, "last")
    done = q.release(30, 2.0)
    assert done.on_time == ["later", "last"]
    assert done.late == ["early"]


def test_expired_takes_out_only_the_puts_whose_time_is_up() -> None:
    q: GroupCommitQueue[int] = GroupCommitQueue()
    for i in range(5):
        q.add(i * 10 + 10, float(i), i)
    assert q.expired(2.5) == [0, 1, 2]
    assert q.expired(2.5) == []
    assert [w.item for w in q.take_all()] == [3, 4]
    assert len(q) == 0


def test_a_zero_timeout_makes_every_put_late() -> None:
    q: GroupCommitQueue[str] = GroupCommitQueue()
    q.add(10, 5.0, "x")  # deadline == the time it arrived
    assert q.release(10, 5.000001).late == ["x"]
