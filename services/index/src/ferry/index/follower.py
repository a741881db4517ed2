"""LogFollower: keeps an IndexStore in step with the store's CommitLog.

The dispatch feed is a hint. A notice that starts exactly where the index stopped (`applied`)
is applied from its own payload; one that ends at or before it was seen already; one that
starts past it means notices were lost (a slow subscriber, a restart), and the follower reads
the log itself (StoreReadLogRequest) from `applied` until it reaches the log's end. Notices
that arrive while a read is under way are not applied, but where they end is kept: when the
read's answer stops short of it (the log grew after the store answered), the follower reads
again at once instead of waiting for a status check. Each record is applied exactly once
because the index skips records below `applied`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ferry.index.index_store import IndexStore
from ferry.protocol import record
from ferry.protocol.messages import AnyReply, ErrorReply, StoreReadLogReply, StoreReadLogRequest
from ferry.runtime.service import Peer, Service

log = logging.getLogger("ferry.index.follower")

READ_CHUNK_BYTES = 4 * 1024 * 1024
READ_TIMEOUT_S = 10.0
RETRY_S = 0.5  # after a failed read
DISK_RETRY_S = 1.0  # after records that could not be written to the index (a full disk)


def connect_store(service: Service, endpoint: str) -> Peer:
    """The store peer a follower reads from. A read the store held when it went away (killed,
    restarted) is failed at once and retried, rather than waited on until its timeout."""
    store = service.connect_peer(endpoint)
    store.fail_pending_when_lost()
    return store


class LogFollower:
    def __init__(
        self,
        service: Service,
        store: Peer,
        index: IndexStore,
        *,
        name: str = "index",
        on_caught_up: Callable[[], None] | None = None,
    ) -> None:
        self._service = service
        self._store = store
        self.index = index
        self.name = name
        self._on_caught_up = on_caught_up
        self.reading = False
        self.caught_up = False
        self.store_min = 0
        self.store_max = 0
        self.reads = 0  # StoreReadLog round trips, for the status and the logs
        self.noticed_end = 0  # the furthest end a notice named while a read was under way
        self._applied_at_check = -1
        self._generation = 0  # bumped by restart(): answers to older reads are dropped
        self.stopped = False
        self.apply_failing = False  # the last catch-up read could not be written (ENOSPC)

    # ---- the feed ----

    def on_notice(self, from_offset: int, next_offset: int, payload: Any) -> None:
        if self.stopped:
            return
        if self.reading:
            self.noticed_end = max(self.noticed_end, next_offset)
            return
        applied = self.index.applied
        if next_offset <= applied:
            return
        if from_offset > applied:
            log.info(
                "%s: feed jumped from %d to %d; reading the log", self.name, applied, from_offset
            )
            self.catch_up()
            return
        if len(payload) != next_offset - from_offset:
            log.warning(
                "%s: a notice of %d bytes announces %d; reading the log",
                self.name,
                len(payload),
                next_offset - from_offset,
            )
            self.catch_up()
            return
        try:
            self.index.apply(payload, next_offset, strict=True)
        except record.RecordError as exc:
            log.warning(
                "%s: a notice's records do not decode (%s); reading the log", self.name, exc
            )
            self.catch_up()
            return
        self.store_max = max(self.store_max, next_offset)

    # ---- reading the log ----

    def catch_up(self) -> None:
        """Reads the log from `applied` to its end (no-op while a read is under way)."""
        if self.reading or self.stopped:
            return
        self.reading = True
        self.caught_up = False
        self._read()

    def restart(self) -> None:
        """Forgets a read under way (its answer was asked for another index, or for what is
        no longer there) and catches up from `applied` again."""
        self._generation += 1
        self.reading = False
        self.catch_up()

    def _read(self) -> None:
        self.reads += 1
        generation = self._generation

        def on_reply(body: AnyReply, frames: list[Any]) -> None:
            if generation == self._generation:
                self._on_read(body, frames)

        self._store.request(
            StoreReadLogRequest(from_offset=self.index.applied, max_bytes=READ_CHUNK_BYTES),
            on_reply,
            timeout_s=READ_TIMEOUT_S,
        )

    def _on_read(self, body: AnyReply, frames: list[Any]) -> None:
        if self.stopped:
            self.reading = False
            return
        if not isinstance(body, StoreReadLogReply):
            message = body.message if isinstance(body, ErrorReply) else type(body).__name__
            log.warning(
                "%s: reading the log at %d failed: %s", self.name, self.index.applied, message
            )
            generation = self._generation
            self._service.later(RETRY_S, lambda: self._retry(generation))
            return
        self.store_min, self.store_max = body.min_offset, max(body.max_offset, body.next_offset)
        if body.next_offset > self.index.applied:
            try:
                self.index.apply(frames[0] if frames else b"", body.next_offset)
            except OSError as exc:
                # a full disk: the index rolled back to its last commit and lags the log;
                # the same range is read and applied again until space returns
                if not self.apply_failing:
                    log.error(
                        "%s: indexing at %d failed (%s): the index lags the log and catches "
                        "up once it can write",
                        self.name,
                        self.index.applied,
                        exc,
                    )
                self.apply_failing = True
                generation = self._generation
                self._service.later(DISK_RETRY_S, lambda: self._retry(generation))
                return
            if self.apply_failing:
                self.apply_failing = False
                log.warning("%s: indexing again at %d", self.name, self.index.applied)
        progressed = body.next_offset > body.from_offset
        if progressed and max(body.max_offset, self.noticed_end) > body.next_offset:
            # more to read: the answer was one chunk, or the log grew after the store answered
            self._read()
            return
        self.noticed_end = 0
        self.reading = False
        self.caught_up = True
        log.info("%s: caught up at CommitLog offset %d", self.name, self.index.applied)
        if self._on_caught_up is not None:
            self._on_caught_up()

    def _retry(self, generation: int) -> None:
        if generation == self._generation and self.reading:
            self.reading = False
            self.catch_up()

    # ---- periodic check ----

    def on_store_status(self, min_offset: int, max_offset: int) -> bool:
        """The store's log bounds, asked now and then: catches up when the log grew and no
        notice moved the index since the last check (the last notices were lost). Returns
        False when the log ends below what is indexed (the store lost data: the index must be
        rebuilt)."""
        self.store_min, self.store_max = min_offset, max_offset
        applied = self.index.applied
        if max_offset < applied:
            return False
        if self.reading:
            return True
        if max_offset > applied and applied == self._applied_at_check:
            log.info(
                "%s: the log grew to %d with no notice past %d; reading it",
                self.name,
                max_offset,
                applied,
            )
            self.catch_up()
        elif max_offset == applied:
            self.caught_up = True
        self._applied_at_check = applied
        return True
