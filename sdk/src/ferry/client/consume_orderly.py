"""Orderly consumption (RocketMQ's ConsumeMessageOrderlyService): the messages of a queue are
consumed one batch at a time, in queue order, by one thread at a time, and only while this
client holds the queue's lock on the broker (taken before the queue is pulled, renewed every
`lock_renew_interval`, considered lost `lock_max_live_s` after the last successful lock).

SUSPEND (or an exception) puts the batch back in front and offers it again after `suspend_s`,
its reconsume times incremented; a message out of reconsume times goes to %DLQ%group instead
(send-back with delay level -1). A thread yields after MAX_CONTINUOUS_S on one queue.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from ferry.client.consume_service import ConsumeService
from ferry.client.consume_state import QueueState
from ferry.client.message import ConsumeResult, MessageExt, MessageQueue

log = logging.getLogger("ferry.client.consumer")

MAX_CONTINUOUS_S = 60.0  # maxTimeConsumeContinuously
DLQ_DELAY_LEVEL = -1


class OrderlyConsumeService(ConsumeService):
    orderly = True

    def _setup(self) -> None:
        self._locked_at: dict[MessageQueue, float] = {}  # queue -> monotonic time locked

    # ---- locks (the rebalance and the renewal tell us) ----

    def lock_valid(self, queue: MessageQueue) -> bool:
        if not self.config.clustering:
            return True  # every broadcasting member reads every queue: nothing to share
        at = self._locked_at.get(queue)
        return at is not None and time.monotonic() - at < self.config.lock_max_live_s

    def locked(self, queues: Iterable[MessageQueue]) -> None:
        now = time.monotonic()
        with self.cond:
            for queue in queues:
                self._locked_at[queue] = now

    def unlocked(self, queues: Iterable[MessageQueue]) -> None:
        with self.cond:
            for queue in queues:
                self._locked_at.pop(queue, None)

    # ---- consuming ----

    def dispatch(self, state: QueueState, msgs: list[MessageExt]) -> None:
        self.schedule(state)

    def schedule(self, state: QueueState, delay_s: float = 0.0) -> None:
        """Starts the queue's task unless it runs already."""
        with self.cond:
            pq = self.process(state)
            if pq.running or state.dropped or not pq.msgs:
                return
            pq.running = True
        if delay_s > 0:
            started = self.inst.ticker.later(delay_s, lambda: self._restart(state))
        else:
            started = self.submit(lambda: self._consume(state))
        if not started:
            with self.cond:
                pq.running = False

    def _restart(self, state: QueueState) -> None:
        if not self.submit(lambda: self._consume(state)):
            with self.cond:
                self.process(state).running = False

    def _consume(self, state: QueueState) -> None:
        pq = self.process(state)
        deadline = time.monotonic() + MAX_CONTINUOUS_S
        while True:
            with pq.consume_lock:
                with self.cond:
                    if state.dropped or self.closing or not self.lock_valid(state.queue):
                        pq.running = False  # the lock renewal schedules the queue again
                        return
                    msgs = pq.take(self.config.batch_max_size)
                    if not msgs:
                        pq.running = False
                        return
                result = self.call_listener(msgs, ConsumeResult.SUSPEND)
                if result is ConsumeResult.SUCCESS:
                    keep: list[MessageExt] = []
                    with self.cond:
                        state.consume_offset = pq.commit_taken()
                else:
                    keep = self._to_retry(state, msgs)
                    with self.cond:
                        state.consume_offset = pq.rollback_taken(keep)
            self.resume_flow(state)
            if keep:
                if not self.inst.ticker.later(self.config.suspend_s, lambda: self._restart(state)):
                    with self.cond:
                        pq.running = False
                return
            if time.monotonic() > deadline:
                self._restart(state)  # let other queues have the thread
                return

    def _to_retry(self, state: QueueState, msgs: list[MessageExt]) -> list[MessageExt]:
        """The batch's messages to offer again; the others went to the DLQ."""
        limit = self.max_reconsume_times()
        keep: list[MessageExt] = []
        for msg in msgs:
            if msg.reconsume_times >= limit:
                if not self.config.clustering:
                    log.warning("%s: %s out of reconsume times; dropped", state.queue, msg.msg_id)
                    continue
                if self.send_back(msg, DLQ_DELAY_LEVEL):
                    log.warning(
                        "%s: %s out of reconsume times; sent to the DLQ", state.queue, msg.msg_id
                    )
                    continue
            msg.reconsume_times += 1
            keep.append(msg)
        return keep
