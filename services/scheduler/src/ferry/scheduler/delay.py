"""DelayLevels: RocketMQ's delay levels, one SCHEDULE_TOPIC_XXXX queue per level.

Level n's messages wait in queue n - 1, in the order they were stored; each is due at its
store time plus the level's delay, so a level only ever waits for its head. A level reads its
queue with a long-polling get (a new message wakes it), keeps what it read in memory (a
bounded window), delivers the due head records and sleeps until the next one is due. Its
progress is the next queue offset not yet delivered (RocketMQ's delayOffset), advanced over
the acknowledged prefix.
"""

from __future__ import annotations

import collections
import logging
import time
from typing import Any

from ferry.protocol import record
from ferry.protocol.codes import PullStatus
from ferry.protocol.messages import DelayLevelStatus, StoreGetReply
from ferry.protocol.names import SCHEDULE_TOPIC
from ferry.runtime.service import Peer, Service
from ferry.scheduler.delivery import Deliverer
from ferry.scheduler.progress import Progress
from ferry.scheduler.queue_poll import RETRY_S, QueuePoll
from ferry.scheduler.wake_up import WakeUp

log = logging.getLogger("ferry.scheduler.delay")

WINDOW = 1024  # records of a level in memory (read, not yet delivered)


def now_ms() -> int:
    return int(time.time() * 1000)


class DelayLevel(QueuePoll):
    def __init__(
        self,
        service: Service,
        store: Peer,
        deliverer: Deliverer,
        level: int,
        delay_ms: int,
        offset: int,
    ) -> None:
        super().__init__(service, store)
        self._deliverer = deliverer
        self.level = level
        self.delay_ms = delay_ms
        self.offset = offset  # next queue offset not yet delivered (saved)
        self.max_offset = offset
        self.delivered = 0
        self._fetch_offset = offset
        self._pending: collections.deque[record.Record] = collections.deque()
        # queue offset -> watermark at issue, for deliveries not yet counted in `offset`
        self._issued: dict[int, int] = {}
        self._acked: set[int] = set()
        self._wake_up = WakeUp(service, self._pump)

    @property
    def queue_id(self) -> int:
        return self.level - 1

    # ---- reading the queue ----

    def _fetch(self) -> None:
        if self._fetching or self.stopped or len(self._pending) + len(self._issued) >= WINDOW:
            return
        self._get(SCHEDULE_TOPIC, self.queue_id, self._fetch_offset)

    def _failed(self, reason: str) -> None:
        log.warning("level %d: reading its queue failed: %s", self.level, reason)

    def _on_reply(self, body: StoreGetReply, frames: list[Any]) -> None:
        self.max_offset = body.max_offset
        if body.status == PullStatus.FOUND and frames:
            for rec in record.iter_records(frames[0]):
                if rec.queue_offset >= self._fetch_offset:
                    self._pending.append(rec)
                    self._deliverer.see(rec.phys_offset + rec.total_size)
            self._fetch_offset = body.next_begin_offset
            self._pump()
        elif body.status == PullStatus.OFFSET_ILLEGAL:
            self._moved(body)
            self._service.later(RETRY_S, self._fetch)
            return
        self._fetch()

    def _moved(self, body: StoreGetReply) -> None:
        if self._pending or self._issued:
            return  # sort it out once what is in hand is delivered
        if self._fetch_offset < body.min_offset:
            log.error(
                "level %d: offsets %d..%d are gone from the store (retention); skipping them",
                self.level,
                self._fetch_offset,
                body.min_offset,
            )
        else:
            log.error(
                "level %d: the queue ends at %d, below %d (the store lost data)",
                self.level,
                body.max_offset,
                self._fetch_offset,
            )
        self.offset = self._fetch_offset = body.next_begin_offset

    # ---- delivering ----

    def _pump(self) -> None:
        if self.stopped:
            return
        now = now_ms()
        while self._pending:
            head = self._pending[0]
            due = head.store_timestamp + self.delay_ms
            if due > now:
                self._wake_up.after_ms(due - now)
                break
            self._pending.popleft()
            self._issue(head)
        self._fetch()

    def _issue(self, rec: record.Record) -> None:
        queue_offset = rec.queue_offset

        def on_done(ok: bool) -> None:
            if ok:
                self._acked.add(queue_offset)
                self.delivered += 1
                self._advance()
                self._fetch()
            elif not self.stopped:
                self._service.later(RETRY_S, lambda: self._issue(rec))

        watermark = self._deliverer.deliver(rec, on_done)
        self._issued.setdefault(queue_offset, watermark)

    def _advance(self) -> None:
        while self.offset in self._acked:
            self._acked.discard(self.offset)
            self._issued.pop(self.offset, None)
            self.offset += 1

    def oldest_uncovered(self) -> int | None:
        return min(self._issued.values()) if self._issued else None

    def status(self) -> DelayLevelStatus:
        return DelayLevelStatus(
            self.level,
            self.delay_ms,
            self.offset,
            max(self.max_offset, self.offset),
            self.delivered,
        )


class DelayLevels:
    name = "delay-levels"

    def __init__(
        self,
        service: Service,
        store: Peer,
        deliverer: Deliverer,
        delays_ms: list[int],
        progress: Progress,
    ) -> None:
        self.levels = [
            DelayLevel(service, store, deliverer, n, delay, progress.levels.get(n, 0))
            for n, delay in enumerate(delays_ms, start=1)
        ]

    def start(self) -> None:
        for level in self.levels:
            level.start()

    def stop(self) -> None:
        for level in self.levels:
            level.stopped = True

    def offsets(self) -> dict[int, int]:
        return {level.level: level.offset for level in self.levels}

    def oldest_uncovered(self, watermark: int) -> int:
        marks = [m for level in self.levels if (m := level.oldest_uncovered()) is not None]
        return min(marks, default=watermark)

    def level_status(self) -> list[DelayLevelStatus]:
        return [level.status() for level in self.levels]

    def status(self) -> dict[str, str]:
        return {}
