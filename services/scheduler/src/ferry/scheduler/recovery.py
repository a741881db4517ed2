"""The start-up check that makes deliveries exactly once across a kill -9.

Reads the CommitLog from the snapshot's `scan_from` to its end and collects the
SCHEDULED_FROM of every delivered copy found there: those origins were delivered after the
snapshot was taken, and are skipped when the levels and the timers come to them again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ferry.protocol import record, record_layout
from ferry.protocol.messages import AnyReply, StoreReadLogReply, StoreReadLogRequest
from ferry.runtime.service import Peer, Service

log = logging.getLogger("ferry.scheduler.recovery")

READ_CHUNK_BYTES = 4 * 1024 * 1024
# a delivery the snapshot does not cover was issued before the next save would have covered it
# (schedulerFlushIntervalMs later); records stored this long after the save cannot be one, so
# a scheduler down for hours does not read everything the broker stored meanwhile
SCAN_GRACE_MS = 60_000
STORE_TIME = record_layout.fields_at("STORETIMESTAMP")
READ_TIMEOUT_S = 10.0
RETRY_S = 0.5
MARKER = f"{record.PROPERTY_SCHEDULED_FROM}{record.PROP_SEP}".encode()


def delivered_origins(chunk: Any, holding_topics: frozenset[str]) -> set[int]:
    """SCHEDULED_FROM of the delivered copies in a run of records (copies still waiting in a
    holding topic carry none that count)."""
    if MARKER not in bytes(chunk):
        return set()
    out: set[int] = set()
    for rec in record.iter_records(chunk):
        origin = rec.properties.get(record.PROPERTY_SCHEDULED_FROM)
        if origin is not None and origin.isdigit() and rec.topic not in holding_topics:
            out.add(int(origin))
    return out


class StartupScan:
    def __init__(
        self,
        service: Service,
        store: Peer,
        holding_topics: frozenset[str],
        on_done: Callable[[set[int], int], None],
        *,
        until_ms: int = 0,
    ) -> None:
        self._until_ms = until_ms  # 0: to the log's end
        self._service = service
        self._store = store
        self._holding = holding_topics
        self._on_done = on_done
        self.found: set[int] = set()
        self.scanned = 0

    def run(self, from_offset: int) -> None:
        self._read(from_offset)

    def _read(self, offset: int) -> None:
        def on_reply(body: AnyReply, frames: list[Any]) -> None:
            self._on_read(offset, body, frames)

        self._store.request(
            StoreReadLogRequest(from_offset=offset, max_bytes=READ_CHUNK_BYTES),
            on_reply,
            timeout_s=READ_TIMEOUT_S,
        )

    def _on_read(self, offset: int, body: AnyReply, frames: list[Any]) -> None:
        if not isinstance(body, StoreReadLogReply):
            log.warning("reading the log at %d failed (%s); again soon", offset, body)
            self._service.later(RETRY_S, lambda: self._read(offset))
            return
        chunk = frames[0] if frames else b""
        if self._until_ms and len(chunk) >= record.FIXED_SIZE:
            (stored_ms,) = STORE_TIME.unpack_from(chunk, record_layout.OFF_STORE_TIMESTAMP)
            if stored_ms > self._until_ms:
                log.info("start-up scan: records from %d are stored past the window", offset)
                self._on_done(self.found, body.max_offset)
                return
        try:
            self.found |= delivered_origins(chunk, self._holding)
        except record.RecordError as exc:
            log.error("records at %d do not decode (%s); scan ends there", offset, exc)
            self._on_done(self.found, body.max_offset)
            return
        self.scanned += body.next_offset - body.from_offset
        if body.next_offset < body.max_offset and body.next_offset > body.from_offset:
            self._read(body.next_offset)
            return
        log.info(
            "start-up scan: %d bytes from %d, %d deliveries already done",
            self.scanned,
            offset,
            len(self.found),
        )
        self._on_done(self.found, body.max_offset)
