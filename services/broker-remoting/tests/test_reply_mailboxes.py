"""The requesters' mailboxes: a held poll takes a reply at once, unpolled replies wait until
their TTL, a newer poll replaces the held one, held polls time out."""

from __future__ import annotations

import pytest

from ferry.remoting.reply_mailboxes import ReplyMailboxes


def test_a_reply_goes_to_the_held_poll_at_once() -> None:
    boxes: ReplyMailboxes[str] = ReplyMailboxes()
    assert boxes.poll("req-a", "poll-1", hold_until=10.0, now=0.0) == ([], None)
    assert boxes.deliver("req-a", b"r1", keep_until=5.0) == "poll-1"
    assert len(boxes) == 0
    # the poll was used: the next reply waits for the next poll
    assert boxes.deliver("req-a", b"r2", keep_until=5.0) is None
    assert boxes.poll("req-a", "poll-2", hold_until=10.0, now=1.0) == ([b"r2"], None)


def test_replies_wait_for_their_own_requester_until_their_ttl() -> None:
    boxes: ReplyMailboxes[str] = ReplyMailboxes()
    boxes.deliver("req-a", b"a1", keep_until=5.0)
    boxes.deliver("req-b", b"b1", keep_until=5.0)
    boxes.deliver("req-a", b"a2", keep_until=2.0)
    assert boxes.poll("req-b", "p", hold_until=0.0, now=1.0) == ([b"b1"], None)
    assert boxes.sweep(now=3.0) == []  # a2 is past its TTL
    assert boxes.expired == 1
    assert boxes.poll("req-a", "p", hold_until=0.0, now=3.0) == ([b"a1"], None)
    assert len(boxes) == 0


def test_a_newer_poll_replaces_the_held_one_and_held_polls_time_out() -> None:
    boxes: ReplyMailboxes[str] = ReplyMailboxes()
    boxes.poll("req-a", "old", hold_until=10.0, now=0.0)
    assert boxes.poll("req-a", "new", hold_until=10.0, now=1.0) == ([], "old")
    assert boxes.sweep(now=5.0) == []
    assert boxes.sweep(now=10.0) == ["new"]
    assert boxes.deliver("req-a", b"r", keep_until=20.0) is None  # nobody holds a poll now


def test_a_full_mailbox_refuses_more() -> None:
    boxes: ReplyMailboxes[str] = ReplyMailboxes(max_per_client=2)
    boxes.deliver("req-a", b"1", keep_until=5.0)
    boxes.deliver("req-a", b"2", keep_until=5.0)
    with pytest.raises(OverflowError, match="2 replies wait for req-a"):
        boxes.deliver("req-a", b"3", keep_until=5.0)
