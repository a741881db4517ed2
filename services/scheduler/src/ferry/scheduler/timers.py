"""Timers: messages due at any time up to timerMaxDelaySec (RocketMQ 5's timer messages).

Remoting stores a timer message in the timer topic (queue 0) with its REAL_TOPIC / REAL_QID
and TIMER_DELIVER_MS. This component takes them in, in queue order (a long-polling get), and
appends each to the bucket file of its delivery time (timer_buckets.py). Buckets whose time
has come (one bucket ahead of now) are read into a heap ordered by delivery time, and each
message is delivered at its own ms, so precision does not depend on the bucket width.

A slave's scheduler only follows (`follow`): it takes the timer queue of its replicated log
into bucket files of its own and delivers nothing, and its `read_ms` is its master's, adopted
with each slave sync; a message whose bucket is before it was delivered by the master and is
not kept. Restarted as master, it delivers from those buckets.

Progress: the timer queue offset taken in, and `read_ms`: every bucket before it is
delivered (its file is deleted once that is saved). `read_ms` never passes the store time of
the next message not yet taken in: a message goes to the bucket of max(due time, store time),
always at or after `read_ms`, and the same bucket when it is taken in again after a kill -9
(where the repeat is dropped).
"""

from __future__ import annotations

import heapq
import logging
import time
from pathlib import Path
from typing import Any

from ferry.protocol import record
from ferry.protocol.codes import PullStatus
from ferry.protocol.messages import StoreGetReply
from ferry.protocol.names import TIMER_TOPIC
from ferry.runtime.service import Peer, Service
from ferry.scheduler.delivery import Deliverer
from ferry.scheduler.progress import Progress
from ferry.scheduler.queue_poll import RETRY_S, QueuePoll
from ferry.scheduler.timer_buckets import TimerBuckets, TimerEntry
from ferry.scheduler.wake_up import WakeUp

log = logging.getLogger("ferry.scheduler.timers")

WINDOW = 512  # deliveries in flight
ADVANCE_S = 0.02  # how often buckets are loaded and read_ms moved
# while taken-in is caught up, a message stored now may still be on its way to us: read_ms
# stays this far behind the clock
FRONTIER_MARGIN_MS = 2000


def now_ms() -> int:
    return int(time.time() * 1000)


class Timers(QueuePoll):
    name = "timers"

    def __init__(
        self,
        service: Service,
        store: Peer,
        deliverer: Deliverer,
        root: Path,
        width_ms: int,
        progress: Progress,
    ) -> None:
        super().__init__(service, store)
        self._deliverer = deliverer
        self.buckets = TimerBuckets(root, width_ms)
        self.width_ms = width_ms
        self.queue_offset = progress.timer_queue_offset
        self.queue_max = self.queue_offset
        self.read_ms = progress.timer_read_ms or self.buckets.bucket_of(now_ms())
        self.pending = progress.timer_pending
        self.delivered = 0
        self._frontier_ms = self.read_ms  # store time of the next message to take in
        self._caught_up = False
        self._loaded: dict[int, set[int]] = {}  # bucket -> origins read into the heap
        self._remaining: dict[int, int] = {}  # bucket -> entries in the heap or in flight
        self._issued_mark: dict[int, int] = {}  # bucket -> lowest watermark at issue
        self._heap: list[tuple[int, int, int, bytes]] = []  # (due, origin, bucket, record)
        self._in_flight = 0
        self._wake_up = WakeUp(service, self._pump)
        self.following = False

    def start(self) -> None:
        self.stopped = False
        self._service.every(ADVANCE_S, self._advance)
        self._fetch()

    def follow(self, read_ms: int) -> None:
        """A slave's: takes the timer queue in, delivers nothing; read_ms is the master's
        (0 before the first sync: everything is kept until then)."""
        self.following = True
        self.read_ms = read_ms
        self.stopped = False
        self._fetch()

    def adopt_read_ms(self, read_ms: int) -> None:
        """The master delivered every bucket before read_ms (a slave's; its files go with the
        next saved())."""
        self.read_ms = max(self.read_ms, read_ms)

    # ---- taking messages in ----

    def _fetch(self) -> None:
        if self._fetching or self.stopped:
            return
        self._get(TIMER_TOPIC, 0, self.queue_offset)

    def _failed(self, reason: str) -> None:
        log.warning("reading the timer queue failed: %s", reason)

    def _on_reply(self, body: StoreGetReply, frames: list[Any]) -> None:
        self.queue_max = body.max_offset
        if body.status == PullStatus.FOUND and frames:
            buf = bytes(frames[0])
            pos = 0
            last_store_ms = self._frontier_ms
            taken: dict[int, list[TimerEntry]] = {}
            for rec in record.iter_records(buf):
                raw = buf[pos : pos + rec.total_size]
                pos += rec.total_size
                if rec.queue_offset >= self.queue_offset:
                    bucket, entry = self._entry_of(rec, raw)
                    if bucket >= 0:
                        taken.setdefault(bucket, []).append(entry)
                    last_store_ms = rec.store_timestamp
            try:
                for bucket, entries in taken.items():
                    self._take_in(bucket, entries)
            except OSError as exc:
                # a full disk: take them in again later (repeats in a bucket are dropped)
                log.error("timer bucket write failed (%s); again in %.0f s", exc, RETRY_S)
                self._service.later(RETRY_S, self._fetch)
                return
            self.queue_offset = body.next_begin_offset
            self._caught_up = body.next_begin_offset >= body.max_offset
            self._frontier_ms = max(self._frontier_ms, last_store_ms)
            self._pump()
        elif body.status == PullStatus.OFFSET_ILLEGAL:
            log.error(
                "timer queue offset %d is outside %d..%d; moving to %d",
                self.queue_offset,
                body.min_offset,
                body.max_offset,
                body.next_begin_offset,
            )
            self.queue_offset = body.next_begin_offset
            self._service.later(RETRY_S, self._fetch)
            return
        else:
            self._caught_up = True
        self._fetch()

    def _entry_of(self, rec: record.Record, raw: bytes) -> tuple[int, TimerEntry]:
        self._deliverer.see(rec.phys_offset + rec.total_size)
        text = rec.properties.get(record.PROPERTY_TIMER_DELIVER_MS, "")
        due = int(text) if text.lstrip("-").isdigit() else rec.store_timestamp
        bucket = self.buckets.bucket_of(max(due, rec.store_timestamp))
        entry = TimerEntry(due, rec.phys_offset, raw)
        if self.following and bucket < self.read_ms:
            return -1, entry  # the master's bucket, delivered by it: not kept
        return max(bucket, self.read_ms), entry

    def _take_in(self, bucket: int, entries: list[TimerEntry]) -> None:
        self.buckets.append(bucket, *entries)
        self.pending += len(entries)
        if self.following:
            return  # delivered by the master, or by this one once restarted as master
        if bucket in self._loaded:
            for entry in entries:
                self._push(bucket, entry)
        elif bucket <= self._horizon():
            self._load(bucket)

    # ---- buckets into the heap ----

    def _horizon(self) -> int:
        return self.buckets.bucket_of(now_ms()) + self.width_ms

    def _load(self, bucket: int) -> None:
        self._loaded[bucket] = set()
        self._remaining.setdefault(bucket, 0)
        for entry in self.buckets.read(bucket):
            self._push(bucket, entry)

    def _push(self, bucket: int, entry: TimerEntry) -> None:
        origins = self._loaded[bucket]
        if entry.origin in origins:
            return  # taken in twice (after a kill -9): one delivery
        origins.add(entry.origin)
        self._remaining[bucket] = self._remaining.get(bucket, 0) + 1
        heapq.heappush(self._heap, (entry.deliver_ms, entry.origin, bucket, entry.raw))

    def _advance(self) -> None:
        if self.stopped:
            return
        for bucket in self.buckets.ids_between(self.read_ms, self._horizon()):
            if bucket not in self._loaded:
                self._load(bucket)
        frontier = now_ms() - FRONTIER_MARGIN_MS if self._caught_up else self._frontier_ms
        limit = self.buckets.bucket_of(frontier)
        busy = [b for b, n in self._remaining.items() if n > 0]
        if busy:
            limit = min(limit, *busy)
        unread = self.buckets.first_at_or_after(self.read_ms)
        while unread is not None and unread in self._loaded and unread < limit:
            unread = self.buckets.first_at_or_after(unread + 1)
        if unread is not None:
            limit = min(limit, unread)
        if limit > self.read_ms:
            self.read_ms = limit
            for bucket in [b for b in self._loaded if b < limit]:
                del self._loaded[bucket]
                self._remaining.pop(bucket, None)
                self._issued_mark.pop(bucket, None)
        self._pump()

    # ---- delivering ----

    def _pump(self) -> None:
        if self.stopped:
            return
        now = now_ms()
        while self._heap and self._in_flight < WINDOW:
            due = self._heap[0][0]
            if due > now:
                self._wake_up.after_ms(due - now)
                return
            item = heapq.heappop(self._heap)
            self._issue(item)

    def _issue(self, item: tuple[int, int, int, bytes]) -> None:
        _due, origin, bucket, raw = item
        try:
            rec = next(record.iter_records(raw))
        except (record.RecordError, StopIteration) as exc:
            log.error(
                "timer entry %d of bucket %d does not decode (%s); dropped", origin, bucket, exc
            )
            self._done(bucket)
            return
        self._in_flight += 1

        def on_done(ok: bool) -> None:
            self._in_flight -= 1
            if ok:
                self.delivered += 1
                self._done(bucket)
            elif not self.stopped:
                heapq.heappush(self._heap, item)
                self._service.later(RETRY_S, self._pump)
                return
            self._pump()

        mark = self._deliverer.deliver(rec, on_done)
        if bucket not in self._issued_mark or mark < self._issued_mark[bucket]:
            self._issued_mark[bucket] = mark

    def _done(self, bucket: int) -> None:
        self.pending = max(0, self.pending - 1)
        if bucket in self._remaining:
            self._remaining[bucket] -= 1

    # ---- progress ----

    def oldest_uncovered(self, watermark: int) -> int:
        marks = [m for b, m in self._issued_mark.items() if b >= self.read_ms]
        return min(marks, default=watermark)

    def sync(self) -> None:
        self.buckets.sync()

    def saved(self, read_ms: int) -> None:
        """The progress with read_ms is on disk: files of earlier buckets can go."""
        self.buckets.delete_below(read_ms)

    def status(self) -> dict[str, str]:
        return {}

    def close(self) -> None:
        self.buckets.close()
