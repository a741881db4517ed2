"""CopySearch: looks for committed copies after commit marks left without an end.

Remoting stores a COMMITTING op record (the mark), then the copy in the real topic, then the
final op record. A mark with no end after it means remoting stopped in between: the copy may or
may not be stored, and only the log can tell. It lies after the mark and within COPY_WINDOW_MS
of it, so the search reads the CommitLog (StoreReadLog, CHUNK_BYTES at a time) from the mark to
the first record stored after that window, or to the log's end: a bounded read, made only for
such marks (a crash in the middle of a commit), never for ordinary traffic.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ferry.protocol import record
from ferry.protocol.codes import ResponseCode
from ferry.protocol.messages import AnyReply, ErrorReply, StoreReadLogReply, StoreReadLogRequest
from ferry.runtime.service import Peer
from ferry.scheduler.checkback.log_scan import find_copies

log = logging.getLogger("ferry.scheduler.checkback")

CHUNK_BYTES = 4 * 1024 * 1024
STORE_TIMEOUT_S = 10.0

# (half offsets whose copy was found, whether the whole window was read)
Done = Callable[[set[int], bool], None]


class CopySearch:
    def __init__(
        self, store: Peer, start: int, wanted: set[int], until_ms: int, done: Done
    ) -> None:
        self._store = store
        self._pos = start
        self.wanted = set(wanted)
        self._until_ms = until_ms
        self._done = done
        self.found: set[int] = set()
        self.bytes_read = 0

    def run(self) -> None:
        self._store.request(
            StoreReadLogRequest(from_offset=self._pos, max_bytes=CHUNK_BYTES),
            self._on_read,
            timeout_s=STORE_TIMEOUT_S,
        )

    def _on_read(self, body: AnyReply, frames: list[Any]) -> None:
        if not isinstance(body, StoreReadLogReply):
            if isinstance(body, ErrorReply) and body.code == ResponseCode.INVALID_PARAMETER:
                # the log no longer holds that offset (retention, or a store that lost data):
                # no copy is left to find there
                log.warning("CommitLog at %d is gone: no copy to look for", self._pos)
                self._done(self.found, True)
            else:
                self._done(self.found, False)  # tried again at the next round
            return
        try:
            found, past = find_copies(frames[0] if frames else b"", self.wanted, self._until_ms)
        except record.RecordError as exc:
            log.error("CommitLog at %d does not decode (%s)", body.from_offset, exc)
            self._done(self.found, False)
            return
        self.found |= found
        self.bytes_read += body.next_offset - body.from_offset
        if past or self.found >= self.wanted or body.next_offset >= body.max_offset:
            self._done(self.found, True)
        elif body.next_offset <= self._pos:
            self._done(self.found, False)
        else:
            self._pos = body.next_offset
            self.run()
