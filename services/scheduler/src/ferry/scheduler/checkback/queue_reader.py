"""QueueReader: follows queue 0 of one transaction topic through its ConsumeQueue, with the
store's long polling (a new record wakes it; an idle queue costs one request every SUSPEND_MS),
so the checker reads transaction records only, never the rest of the log. Under transactional
traffic it reads at most one batch every BATCH_PAUSE_S."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ferry.protocol import record
from ferry.protocol.codes import PullStatus
from ferry.protocol.messages import StoreGetReply
from ferry.runtime.service import Peer, Service
from ferry.scheduler.queue_poll import RETRY_S, SUSPEND_MS, QueuePoll

log = logging.getLogger("ferry.scheduler.checkback")

HOLD_S = 0.05  # a held reader looks again this soon
# after records, the next get waits this long: records are taken in batches, not one get per
# record woken by each put (the checker needs no faster news: checks wait transactionTimeOut)
BATCH_PAUSE_S = 0.2


class QueueReader(QueuePoll):
    def __init__(
        self,
        service: Service,
        store: Peer,
        topic: str,
        offset: int,
        on_records: Callable[[list[record.Record]], None],
        hold: Callable[[], bool] | None = None,
    ) -> None:
        super().__init__(service, store)
        self.topic = topic
        self.offset = offset  # next queue offset to read
        self.max_offset = offset  # the queue's end, as last seen
        self.caught_up = False  # the last answer said nothing more is there
        self.last_phys = -1  # CommitLog offset of the last record read
        self._on_records = on_records
        self._hold = hold  # True: wait before reading on (another reader is far behind)
        self._asked = False  # the first get is answered at once: caught_up is known soon

    def _fetch(self) -> None:
        if self._fetching or self.stopped:
            return
        if self._hold is not None and self._hold():
            self._service.later(HOLD_S, self._fetch)
            return
        suspend_ms = SUSPEND_MS if self._asked else 0
        self._asked = True
        self._get(self.topic, 0, self.offset, suspend_ms)

    def _failed(self, reason: str) -> None:
        self.caught_up = False
        log.warning("%s: reading the queue failed: %s", self.topic, reason)

    def _on_reply(self, body: StoreGetReply, frames: list[Any]) -> None:
        self.max_offset = body.max_offset
        if body.status == PullStatus.FOUND and frames:
            try:
                records = [
                    r for r in record.iter_records(frames[0]) if r.queue_offset >= self.offset
                ]
            except record.RecordError as exc:
                self.caught_up = False
                log.error("%s at %d does not decode: %s", self.topic, self.offset, exc)
                self._service.later(RETRY_S, self._fetch)
                return
            if records:
                self.last_phys = records[-1].phys_offset
            self._on_records(records)
            self.offset = body.next_begin_offset
            self.caught_up = self.offset >= body.max_offset
            if self.caught_up:
                self._service.later(BATCH_PAUSE_S, self._fetch)
                return
        elif body.status == PullStatus.OFFSET_ILLEGAL:
            if self.offset < body.min_offset:
                log.error(
                    "%s: offsets %d..%d are gone from the store (retention); skipping them",
                    self.topic,
                    self.offset,
                    body.min_offset,
                )
            elif self.offset > 0:
                log.error(
                    "%s: the queue ends at %d, below %d (the store lost data)",
                    self.topic,
                    body.max_offset,
                    self.offset,
                )
            self.offset = body.next_begin_offset
        elif body.status == PullStatus.NO_MATCHED_MSG:
            self.offset = body.next_begin_offset
        else:  # NO_NEW_MSG, after the store held the request up to SUSPEND_MS
            self.caught_up = True
        self._fetch()
