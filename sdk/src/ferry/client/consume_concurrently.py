"""Concurrent consumption (RocketMQ's ConsumeMessageConcurrentlyService): batches of up to
`batch_max_size` messages run on the consume pool in any order.

Batches run on as few threads as keep up with the listener (work_loops.py): one while it is
quick, up to `thread_nums` while it waits on I/O or hangs.

A batch the listener fails (RECONSUME_LATER or an exception) is given back to the broker,
which stores it in %RETRY%group to come back later, or in %DLQ%group once out of reconsume
times; a message whose send-back fails is consumed again here after `retry_later_s`.
BROADCASTING consumers do not retry. A message still in the listener after
`consume_timeout_s` is given back too and its queue moves on (the late verdict is ignored).
"""

from __future__ import annotations

import logging
import time

from ferry.client.consume_service import ConsumeService
from ferry.client.consume_state import QueueState
from ferry.client.message import ConsumeResult, MessageExt
from ferry.client.work_loops import WorkLoops

log = logging.getLogger("ferry.client.consumer")

# delay level of messages given back for taking too long (RocketMQ's cleanExpireMsg uses 3)
EXPIRED_DELAY_LEVEL = 3

Batch = tuple[QueueState, list[MessageExt]]


class ConcurrentConsumeService(ConsumeService):
    orderly = False

    def _setup(self) -> None:
        self._work: WorkLoops[Batch] = WorkLoops(
            lambda batch: self._consume(*batch), self.submit, self.config.thread_nums
        )

    def dispatch(self, state: QueueState, msgs: list[MessageExt]) -> None:
        size = self.config.batch_max_size
        self._work.put_many([(state, msgs[i : i + size]) for i in range(0, len(msgs), size)])

    def _submit(self, state: QueueState, msgs: list[MessageExt]) -> None:
        self._work.put((state, msgs))

    def check_stalled(self) -> None:
        """Adds a thread if every running one is stuck in a long listener call."""
        self._work.check()

    def shutdown(self, timeout_s: float) -> bool:
        self._work.closed = True
        return super().shutdown(timeout_s)

    def _consume(self, state: QueueState, msgs: list[MessageExt]) -> None:
        if self.gone(state):
            return
        pq = self.process(state)
        with self.cond:
            pq.start(msgs, time.monotonic())
        result = self.call_listener(msgs, ConsumeResult.RECONSUME_LATER)
        if self.gone(state):
            return
        later: list[MessageExt] = []
        if result is not ConsumeResult.SUCCESS:
            if not self.config.clustering:
                log.warning(
                    "%s: %d message(s) failed; broadcasting consumers do not retry",
                    state.queue,
                    len(msgs),
                )
            else:
                with self.cond:
                    # a message the timeout scan gave back already is not given back twice
                    pending = [m for m in msgs if pq.contains(m)]
                later = [m for m in pending if not self.send_back(m, 0)]
        retried = {id(m) for m in later}
        done = [m for m in msgs if id(m) not in retried]
        with self.cond:
            state.consume_offset = pq.remove(done)
            for msg in later:
                pq.started.pop(msg.queue_offset, None)
        if state.flow_paused:  # read without the lock: resume_flow() checks again under it
            self.resume_flow(state)
        if later:
            for msg in later:
                msg.reconsume_times += 1
            self.inst.ticker.later(self.config.retry_later_s, lambda: self._submit(state, later))

    def clean_expired(self) -> None:
        """Gives back messages in a listener for longer than the consume timeout."""
        puller = self.puller
        if puller is None or self.closing:
            return
        now = time.monotonic()
        with self.cond:
            expired = [
                (state, msg)
                for state in puller.states()
                if state.process is not None
                for msg in state.process.expired(now, self.config.consume_timeout_s)
            ]
        for state, msg in expired:
            log.warning(
                "%s: %s consumed for more than %.0f s; given back",
                state.queue,
                msg.msg_id,
                self.config.consume_timeout_s,
            )
            if self.config.clustering and not self.send_back(msg, EXPIRED_DELAY_LEVEL):
                continue  # still counted as in the listener; tried again at the next scan
            pq = self.process(state)
            with self.cond:
                state.consume_offset = pq.remove([msg])
            self.resume_flow(state)
