"""The messages of one queue a push consumer has pulled and not finished (RocketMQ's
ProcessQueue). Plain state, used under the consumer's lock; no sockets, no threads.

The offset committed for a queue is the lowest offset not yet consumed: a message still in the
listener holds the queue's offset back, however many later ones are done, so a crash or a
rebalance redelivers it rather than skipping it.
"""

from __future__ import annotations

import collections
import threading

from ferry.client.message import MessageExt


class ProcessQueue:
    def __init__(self) -> None:
        # waiting or being consumed, by queue offset, in offset order
        self.msgs: collections.OrderedDict[int, MessageExt] = collections.OrderedDict()
        self.size_bytes = 0
        # offset after the last one pulled: the commit offset once nothing is left
        self.next_offset = -1
        # concurrent mode: offset -> monotonic time its consumption started
        self.started: dict[int, float] = {}
        # orderly mode: the batch in the listener, in order; put back on SUSPEND
        self.taken: list[MessageExt] = []
        # orderly mode: held while a batch of this queue is consumed, so that a rebalance
        # releases the queue only between batches
        self.consume_lock = threading.Lock()
        self.running = False  # orderly mode: a task for this queue is submitted or running

    # ---- both modes ----

    @property
    def count(self) -> int:
        return len(self.msgs) + len(self.taken)

    def span(self) -> int:
        """Offsets between the first and the last message waiting (flow control)."""
        if len(self.msgs) < 2:
            return 0
        return next(reversed(self.msgs)) - next(iter(self.msgs))

    def add(self, msgs: list[MessageExt], next_offset: int) -> None:
        for msg in msgs:
            if msg.queue_offset not in self.msgs:
                self.msgs[msg.queue_offset] = msg
                self.size_bytes += len(msg.body)
        self.next_offset = max(self.next_offset, next_offset)

    def skip_to(self, offset: int) -> None:
        """Nothing to consume before `offset`."""
        self.next_offset = offset

    def commit_offset(self) -> int:
        if self.taken:
            return self.taken[0].queue_offset
        if self.msgs:
            return next(iter(self.msgs))
        return self.next_offset

    def contains(self, msg: MessageExt) -> bool:
        return msg.queue_offset in self.msgs

    # ---- concurrent mode ----

    def start(self, msgs: list[MessageExt], now: float) -> None:
        for msg in msgs:
            if msg.queue_offset in self.msgs:
                self.started[msg.queue_offset] = now

    def remove(self, msgs: list[MessageExt]) -> int:
        """Consumed (or handed back to the broker): returns the new commit offset."""
        for msg in msgs:
            if self.msgs.pop(msg.queue_offset, None) is not None:
                self.size_bytes -= len(msg.body)
            self.started.pop(msg.queue_offset, None)
        return self.commit_offset()

    def expired(self, now: float, timeout_s: float) -> list[MessageExt]:
        """Messages in a listener for longer than timeout_s."""
        limit = now - timeout_s
        return [self.msgs[off] for off, at in self.started.items() if at <= limit]

    # ---- orderly mode ----

    def take(self, count: int) -> list[MessageExt]:
        """The next `count` messages in order, moved to `taken`."""
        while self.msgs and len(self.taken) < count:
            _, msg = self.msgs.popitem(last=False)
            self.taken.append(msg)
        return list(self.taken)

    def commit_taken(self) -> int:
        """The batch is consumed: returns the new commit offset."""
        for msg in self.taken:
            self.size_bytes -= len(msg.body)
        self.taken = []
        return self.commit_offset()

    def rollback_taken(self, keep: list[MessageExt]) -> int:
        """The batch goes back in front, except what is not in `keep` (e.g. sent to the DLQ);
        returns the commit offset."""
        kept = {m.queue_offset for m in keep}
        back = collections.OrderedDict(
            (m.queue_offset, m) for m in self.taken if m.queue_offset in kept
        )
        for msg in self.taken:
            if msg.queue_offset not in kept:
                self.size_bytes -= len(msg.body)
        back.update(self.msgs)
        self.msgs = back
        self.taken = []
        return self.commit_offset()
