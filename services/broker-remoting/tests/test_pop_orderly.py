"""ferry.remoting.pop_orderly: a FIFO group's queue is blocked while its popped batch is in
flight; acks move the offset past the acked head; a batch past its invisible time is popped
again with one more delivery; a changed handle replaces the old one."""

from __future__ import annotations

import pytest

from ferry.protocol.errors import InvalidReceiptHandleError
from ferry.remoting.pop_orderly import OrderlyLeases, is_orderly, parse

KEY = ("cg", "T", 2)


def test_a_queue_is_blocked_until_its_batch_is_acked_then_committed_past_it() -> None:
    leases = OrderlyLeases()
    handles, before = leases.lease(KEY, [5, 6, 7], 9, now_ms=1000, invisible_ms=500)
    assert all(is_orderly(h) for h in handles) and before == [0, 0, 0]
    assert parse(handles[1]) == (2, 6, 1000)
    assert leases.blocked(KEY, 1100)
    assert leases.ack(handles[1], "cg", "T", 1100) == (KEY, None)  # the head (5) is open
    assert leases.ack(handles[0], "cg", "T", 1100) == (KEY, 7)  # past the acked head
    assert leases.blocked(KEY, 1100)
    assert leases.ack(handles[2], "cg", "T", 1100) == (KEY, 9)  # past what the filter skipped
    assert not leases.blocked(KEY, 1100) and len(leases) == 0


def test_a_batch_past_its_invisible_time_comes_again_with_one_more_delivery() -> None:
    leases = OrderlyLeases()
    old, _ = leases.lease(KEY, [5], 6, now_ms=1000, invisible_ms=500)
    assert not leases.blocked(KEY, 1500)  # its time is up: popped again from the offset
    handles, before = leases.lease(KEY, [5], 6, now_ms=1600, invisible_ms=500)
    assert before == [1]
    with pytest.raises(InvalidReceiptHandleError):
        leases.ack(old[0], "cg", "T", 1700)  # the first pop's handle is stale
    assert leases.ack(handles[0], "cg", "T", 1700) == (KEY, 6)
    _, before = leases.lease(KEY, [6], 7, now_ms=1800, invisible_ms=500)
    assert before == [0]  # a new message: its count starts over


def test_a_change_of_invisible_time_keeps_the_queue_blocked_and_replaces_the_handle() -> None:
    leases = OrderlyLeases()
    [handle], _ = leases.lease(KEY, [5], 6, now_ms=1000, invisible_ms=500)
    renewed = leases.change(handle, "cg", "T", 1400, 2000)
    assert renewed != handle
    assert leases.blocked(KEY, 3000)
    with pytest.raises(InvalidReceiptHandleError):
        leases.ack(handle, "cg", "T", 1500)
    assert leases.ack(renewed, "cg", "T", 3000) == (KEY, 6)


@pytest.mark.parametrize(
    ("handle", "group", "topic"),
    [
        ("o.2.5", "cg", "T"),  # malformed
        ("o.2.x.1000", "cg", "T"),
        ("o.2.5.1000", "other", "T"),  # another group's
        ("o.2.5.1000", "cg", "U"),  # another topic's
        ("o.3.5.1000", "cg", "T"),  # another queue's
        ("o.2.8.1000", "cg", "T"),  # not popped
    ],
)
def test_a_handle_not_in_flight_is_refused(handle: str, group: str, topic: str) -> None:
    leases = OrderlyLeases()
    leases.lease(KEY, [5], 6, now_ms=1000, invisible_ms=500)
    with pytest.raises(InvalidReceiptHandleError):
        leases.ack(handle, group, topic, 1100)
    assert leases.blocked(KEY, 1100)


def test_an_acked_or_expired_handle_is_refused() -> None:
    leases = OrderlyLeases()
    handles, _ = leases.lease(KEY, [5, 6], 7, now_ms=1000, invisible_ms=500)
    leases.ack(handles[0], "cg", "T", 1100)
    with pytest.raises(InvalidReceiptHandleError):
        leases.ack(handles[0], "cg", "T", 1100)
    with pytest.raises(InvalidReceiptHandleError):
        leases.change(handles[1], "cg", "T", 1500, 1000)  # its time is up
