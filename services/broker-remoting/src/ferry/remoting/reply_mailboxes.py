"""Replies waiting for their requesters, and the requesters' held polls (no sockets here).

One mailbox per requester (its REPLY_TO_CLIENT): replies not yet polled for, each until its
request's TTL has passed, and at most one held poll (a newer poll replaces it: the older one
is answered empty). A poll takes everything waiting; a reply meeting a held poll is handed to
it at once. Memory is bounded: a mailbox keeps at most `max_per_client` replies.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Generic, TypeVar

H = TypeVar("H")  # what a held poll is to the caller (remoting: the Call to answer)

MAX_PER_CLIENT = 10_000
MAX_KEY_LENGTH = 512


@dataclass
class _Mailbox(Generic[H]):
    replies: collections.deque[tuple[float, bytes]] = field(default_factory=collections.deque)
    held: H | None = None
    held_until: float = 0.0


class ReplyMailboxes(Generic[H]):
    def __init__(self, max_per_client: int = MAX_PER_CLIENT) -> None:
        self.max_per_client = max_per_client
        self._boxes: dict[str, _Mailbox[H]] = {}
        self.expired = 0  # replies dropped unpolled past their TTL (the requester gave up)

    def __len__(self) -> int:
        return sum(len(box.replies) for box in self._boxes.values())

    def deliver(self, reply_to: str, raw: bytes, keep_until: float) -> H | None:
        """The requester's held poll, to be answered with [raw]; or None, the reply kept until
        keep_until for the next poll. OverflowError when the mailbox is full."""
        box = self._boxes.get(reply_to)
        if box is not None and box.held is not None:
            held, box.held = box.held, None
            if not box.replies:
                del self._boxes[reply_to]
            return held
        if box is None:
            box = self._boxes[reply_to] = _Mailbox()
        if len(box.replies) >= self.max_per_client:
            raise OverflowError(f"{len(box.replies)} replies wait for {reply_to} already")
        box.replies.append((keep_until, raw))
        return None

    def poll(
        self, reply_to: str, held: H, hold_until: float, now: float
    ) -> tuple[list[bytes], H | None]:
        """(replies waiting, the poll this one replaces). With none waiting the poll is held
        until hold_until (a hold_until <= now holds nothing)."""
        box = self._boxes.get(reply_to)
        replaced: H | None = None
        if box is not None:
            replaced, box.held = box.held, None
            waiting = [raw for until, raw in box.replies if until > now]
            self.expired += len(box.replies) - len(waiting)
            box.replies.clear()
            if waiting:
                del self._boxes[reply_to]
                return waiting, replaced
        if hold_until <= now:
            if box is not None:
                del self._boxes[reply_to]
            return [], replaced
        if box is None:
            box = self._boxes[reply_to] = _Mailbox()
        box.held, box.held_until = held, hold_until
        return [], replaced

    def release(self, reply_to: str, held: H) -> None:
        """Forgets `held` (answered elsewhere) if it is still the held poll."""
        box = self._boxes.get(reply_to)
        if box is not None and box.held is held:
            box.held = None
            if not box.replies:
                del self._boxes[reply_to]

    def sweep(self, now: float) -> list[H]:
        """Drops replies past their TTL; returns the polls held past their time (to answer
        empty)."""
        due: list[H] = []
        for key in list(self._boxes):
            box = self._boxes[key]
            if box.held is not None and box.held_until <= now:
                due.append(box.held)
                box.held = None
            if any(until <= now for until, _ in box.replies):  # TTLs differ: not in order
                kept = [(until, raw) for until, raw in box.replies if until > now]
                self.expired += len(box.replies) - len(kept)
                box.replies = collections.deque(kept)
            if box.held is None and not box.replies:
                del self._boxes[key]
        return due
