"""Plain state of the consumers: one QueueState per assigned queue, the batches pulled and
not yet polled (the pull consumer's sink), and which offsets still need committing. No
sockets; the consumer drives it under its own lock."""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ferry.client.message import MessageExt, MessageQueue
from ferry.client.message_decode import decode_records
from ferry.client.message_selector import Expression, MessageSelector
from ferry.client.process_queue import ProcessQueue
from ferry.protocol.messages import OffsetEntry

log = logging.getLogger("ferry.client.consumer")

ALL_TAGS = "*"


def parse_tags(expression: Expression) -> frozenset[str] | None:
    """ "*" (or empty) -> None, meaning every message; "TagA || TagB" -> {"TagA", "TagB"}.
    An SQL92 selector -> None: the broker filtered exactly, nothing to check again."""
    if isinstance(expression, MessageSelector):
        if expression.is_sql:
            return None
        expression = expression.expression
    text = expression.strip()
    if not text or text == ALL_TAGS:
        return None
    tags = frozenset(part.strip() for part in text.split("||") if part.strip())
    return tags or None


@dataclass(eq=False)
class QueueState:
    queue: MessageQueue
    expression: Expression = ALL_TAGS
    tags: frozenset[str] | None = None
    pull_offset: int = -1  # next offset to pull; -1 until the starting offset is known
    consume_offset: int = -1  # next offset after what poll() returned: what commit() sends
    committed_offset: int = -1  # what the broker is known to hold
    generation: int = 0  # bumped by seek and by revocation: older pull replies are dropped
    in_flight: bool = False
    buffered: int = 0  # messages pulled, not yet polled
    batches: int = 0
    flow_paused: bool = False
    paused: bool = False  # by the user (pause/resume)
    dropped: bool = False
    process: ProcessQueue | None = None  # the push consumer's messages of this queue

    @classmethod
    def create(cls, queue: MessageQueue, expression: Expression = ALL_TAGS) -> QueueState:
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
    """Batches in arrival order; per-queue counts live in QueueState for flow control.
    Batches of paused queues stay where they are until their queue is resumed."""

    batches: collections.deque[PulledBatch] = field(default_factory=collections.deque)

    def add(self, batch: PulledBatch) -> None:
        self.batches.append(batch)
        batch.state.buffered += batch.n_msgs
        batch.state.batches += 1

    def take(self, max_messages: int) -> list[PulledBatch]:
        """Whole batches, at least one, up to max_messages in total; stale ones are skipped."""
        taken: list[PulledBatch] = []
        held: list[PulledBatch] = []
        total = 0
        while self.batches:
            batch = self.batches[0]
            if not batch.current:
                self.batches.popleft()
                continue
            if batch.state.paused:
                held.append(self.batches.popleft())
                continue
            if taken and total + batch.n_msgs > max_messages:
                break
            self.batches.popleft()
            batch.state.buffered -= batch.n_msgs
            batch.state.batches -= 1
            taken.append(batch)
            total += batch.n_msgs
        self.batches.extendleft(reversed(held))
        return taken

    def ready(self) -> bool:
        """True when a current batch of a queue not paused waits; stale batches are dropped."""
        batches = self.batches
        while batches and not batches[0].current:
            batches.popleft()
        return any(b.current and not b.state.paused for b in batches)


class PollSink:
    """The pull consumer's sink: pulled batches wait in a PullBuffer for poll()."""

    def __init__(self, cond: threading.Condition, threshold_per_queue: int) -> None:
        self.cond = cond
        self.threshold_per_queue = threshold_per_queue
        self.buffer = PullBuffer()

    def full(self, state: QueueState) -> bool:
        return state.buffered >= self.threshold_per_queue

    def add(self, batch: PulledBatch) -> None:
        self.buffer.add(batch)
        self.cond.notify_all()

    def skip(self, state: QueueState, offset: int) -> None:
        state.skip_to(offset)

    def take(
        self, timeout: float, max_messages: int, is_closed: Callable[[], bool]
    ) -> tuple[list[PulledBatch], list[QueueState]]:
        """Waits up to `timeout` s for pulled batches and hands them over: their messages count
        as consumed from now on. Also returns the queues whose pulls flow control may resume."""
        deadline = time.monotonic() + max(0.0, timeout)
        resume: list[QueueState] = []
        with self.cond:
            while not self.buffer.ready():
                remaining = deadline - time.monotonic()
                if remaining <= 0 or is_closed():
                    return [], []
                self.cond.wait(remaining)
            batches = self.buffer.take(max_messages)
            for batch in batches:
                state = batch.state
                # All pulled data handed over: what was skipped after it counts as consumed.
                state.consume_offset = (
                    state.pull_offset if state.batches == 0 else batch.next_begin_offset
                )
                if state.flow_paused and not self.full(state):
                    resume.append(state)
        return batches, resume


def decode_batch(batch: PulledBatch) -> list[MessageExt]:
    """The batch's messages that match the queue's tags (the broker filters by tag hash only,
    so an exact check is made here)."""
    state = batch.state
    out: list[MessageExt] = []
    for frame in batch.frames:
        decode_records(frame, state.queue.broker_name, state.tags, out)
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
