"""Plain state of a pull consumer: one QueueState per assigned queue, the batches pulled and
not yet polled, and which offsets still need committing. No sockets; the consumer drives it
under its own lock."""

from __future__ import annotations

import collections
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ferry.client.message import MessageExt, MessageQueue, decode_message
from ferry.protocol import record
from ferry.protocol.messages import OffsetEntry

log = logging.getLogger("ferry.client.consumer")

ALL_TAGS = "*"


def parse_tags(expression: str) -> frozenset[str] | None:
    """ "*" (or empty) -> None, meaning every message; "TagA || TagB" -> {"TagA", "TagB"}."""
    text = expression.strip()
    if not text or text == ALL_TAGS:
        return None
    tags = frozenset(part.strip() for part in text.split("||") if part.strip())
    return tags or None


@dataclass(eq=False)
class QueueState:
    queue: MessageQueue
    expression: str = ALL_TAGS
    tags: frozenset[str] | None = None
    pull_offset: int = -1  # next offset to pull; -1 until the starting offset is known
    consume_offset: int = -1  # next offset after what poll() returned: what commit() sends
    committed_offset: int = -1  # what the broker is known to hold
    generation: int = 0  # bumped by seek and by revocation: older pull replies are dropped
    in_flight: bool = False
    buffered: int = 0  # messages pulled, not yet polled
    batches: int = 0
    flow_paused: bool = False
    dropped: bool = False

    @classmethod
    def create(cls, queue: MessageQueue, expression: str = ALL_TAGS) -> QueueState:
        return cls(queue, expression, parse_tags(expression))

    def restart_at(self, offset: int) -> None:
        """A new position: what is buffered or in flight for the old one no longer counts."""
        self.generation += 1
        self.pull_offset = offset
        self.consume_offset = offset
        self.in_flight = False
        self.buffered = 0
        self.batches = 0
        self.flow_paused = False

    def skip_to(self, offset: int) -> None:
        """Nothing to deliver before `offset` (no match, no message, offset moved)."""
        self.pull_offset = offset
        if self.batches == 0:
            self.consume_offset = offset


class PulledBatch(NamedTuple):
    state: QueueState
    generation: int
    frames: list[Any]  # stored records, as the broker sent them
    n_msgs: int
    next_begin_offset: int

    @property
    def current(self) -> bool:
        return not self.state.dropped and self.generation == self.state.generation


@dataclass
class PullBuffer:
    """Batches in arrival order; per-queue counts live in QueueState for flow control."""

    batches: collections.deque[PulledBatch] = field(default_factory=collections.deque)

    def add(self, batch: PulledBatch) -> None:
        self.batches.append(batch)
        batch.state.buffered += batch.n_msgs
        batch.state.batches += 1

    def take(self, max_messages: int) -> list[PulledBatch]:
        """Whole batches, at least one, up to max_messages in total; stale ones are skipped."""
        taken: list[PulledBatch] = []
        total = 0
        while self.batches:
            batch = self.batches[0]
            if not batch.current:
                self.batches.popleft()
                continue
            if taken and total + batch.n_msgs > max_messages:
                break
            self.batches.popleft()
            batch.state.buffered -= batch.n_msgs
            batch.state.batches -= 1
            taken.append(batch)
            total += batch.n_msgs
        return taken

    def ready(self) -> bool:
        """True when a current batch waits; stale batches at the head are dropped."""
        batches = self.batches
        while batches and not batches[0].current:
            batches.popleft()
        return bool(batches)


def decode_batch(batch: PulledBatch) -> list[MessageExt]:
    """The batch's messages that match the queue's tags (the broker filters by tag hash only,
    so an exact check is made here)."""
    state = batch.state
    broker = state.queue.broker_name
    tags = state.tags
    out: list[MessageExt] = []
    for frame in batch.frames:
        for rec in record.iter_records(frame):
            msg = decode_message(rec, broker)
            if tags is None or msg.tags in tags:
                out.append(msg)
    return out


def commit_entries(states: Iterable[QueueState]) -> dict[str, list[tuple[QueueState, int]]]:
    """Offsets to commit, by broker name: queues whose consume offset moved since the last
    commit."""
    out: dict[str, list[tuple[QueueState, int]]] = {}
    for state in states:
        if state.consume_offset >= 0 and state.consume_offset != state.committed_offset:
            out.setdefault(state.queue.broker_name, []).append((state, state.consume_offset))
    return out


def offset_entries(entries: list[tuple[QueueState, int]]) -> list[OffsetEntry]:
    return [OffsetEntry(s.queue.topic, s.queue.queue_id, offset) for s, offset in entries]
