"""Held reads (long polling): gets that found nothing wait for a put to their queue.

RocketMQ's PullRequestHoldService without the thread: a get that would answer NO_NEW_MSG and
asks to be suspended is kept here by (topic, queue id); a put to that queue takes them out to be
answered, and a periodic sweep takes out those whose time is up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

MAX_SUSPEND_MS = 60_000


@dataclass(slots=True)
class Held(Generic[T]):
    item: T
    deadline: float  # time.monotonic() seconds


class LongPollTable(Generic[T]):
    def __init__(self) -> None:
        self._held: dict[tuple[str, int], list[Held[T]]] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def hold(self, topic: str, queue_id: int, item: T, now: float, suspend_ms: int) -> None:
        self.hold_until(topic, queue_id, item, now + min(suspend_ms, MAX_SUSPEND_MS) / 1000)

    def hold_until(self, topic: str, queue_id: int, item: T, deadline: float) -> None:
        self._held.setdefault((topic, queue_id), []).append(Held(item, deadline))
        self._count += 1

    def take(self, topic: str, queue_id: int) -> list[T]:
        """Everything held for the queue (a put arrived)."""
        held = self._held.pop((topic, queue_id), None)
        if not held:
            return []
        self._count -= len(held)
        return [h.item for h in held]

    def expired(self, now: float) -> list[T]:
        """Takes out everything whose deadline has passed."""
        out: list[T] = []
        for key in list(self._held):
            held = self._held[key]
            keep = [h for h in held if h.deadline > now]
            if len(keep) == len(held):
                continue
            out.extend(h.item for h in held if h.deadline <= now)
            if keep:
                self._held[key] = keep
            else:
                del self._held[key]
        self._count -= len(out)
        return out

    def take_all(self) -> list[T]:
        return [h.item for h in self.take_all_held()]

    def take_all_held(self) -> list[Held[T]]:
        out = [h for held in self._held.values() for h in held]
        self._held.clear()
        self._count = 0
        return out
