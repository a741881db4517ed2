"""MarkSearch: resolves commit marks left without an end (remoting stopped between a commit's
copy and its op record) by bounded reads of the log after them (copy_search); a copy found
has its lost op record written, so its end is in the op queue as any other."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ferry.protocol import record
from ferry.protocol.messages import AnyReply, StorePutReply, StorePutRequest
from ferry.protocol.names import TRAN_END_PROPERTY, TRANS_OP_HALF_TOPIC
from ferry.runtime.service import Peer
from ferry.scheduler.checkback.clock import now_ms
from ferry.scheduler.checkback.copy_search import STORE_TIMEOUT_S, CopySearch
from ferry.scheduler.checkback.half_table import HalfTable, Mark
from ferry.scheduler.checkback.log_scan import COPY_WINDOW_MS

log = logging.getLogger("ferry.scheduler.checkback")

CLOCK_SLACK_MS = 5000  # the store's clock (marks' store times) and ours may differ a little
OP_TAG = "d"  # as remoting's op records


class MarkSearch:
    def __init__(self, store: Peer, table: HalfTable, changed: Callable[[], None]) -> None:
        """changed: called when the table (or what the checker saves) changed."""
        self._store = store
        self.table = table
        self._changed = changed
        self._search: CopySearch | None = None  # the round's search for copies after marks
        self.searches = 0
        self.copies_found = 0

    def search_stale(self) -> None:
        """Once per round: marks old enough that no copy can still come after them are
        resolved by one bounded read of the log (copy_search)."""
        if self._search is not None:
            return
        now = now_ms()
        stale = {
            offset: mark
            for offset, mark in self.table.marks.items()
            if now - mark.store_ms >= COPY_WINDOW_MS + CLOCK_SLACK_MS
        }
        if not stale:
            return
        # the oldest mark and those within COPY_WINDOW_MS of it (one crash leaves marks that
        # close together): one read of at most twice the window; later ones at later rounds
        first = min(stale.values())
        stale = {o: m for o, m in stale.items() if m.store_ms <= first.store_ms + COPY_WINDOW_MS}
        start = min(m.op_offset for m in stale.values())
        until = max(m.store_ms for m in stale.values()) + COPY_WINDOW_MS

        def done(found: set[int], complete: bool) -> None:
            self._search = None
            for offset in found:
                self._found_copy(offset)
            if complete:
                for offset, mark in stale.items():
                    if offset not in found and self.table.marks.get(offset) == mark:
                        log.info("half message at %d: no copy after its commit mark", offset)
                        self.table.unmark(offset)  # checked as any pending one
                self._changed()

        self.searches += 1
        self._search = CopySearch(self._store, start, set(stale), until, done)
        self._search.run()

    def search_one(self, offset: int, mark: Mark, then: Callable[[], None]) -> None:
        """Looks for the copy after one half message's mark now; then() when the read ends."""

        def done(found: set[int], _complete: bool) -> None:
            if offset in found:
                self._found_copy(offset)
            then()

        self.searches += 1
        CopySearch(
            self._store, mark.op_offset, {offset}, mark.store_ms + COPY_WINDOW_MS, done
        ).run()

    def _found_copy(self, offset: int) -> None:
        """The half message's copy is stored: it ended with a commit whose op record was
        lost; that op record is written now, so the end is in the op queue as usual."""
        self.copies_found += 1
        self._changed()
        if not self.table.end(offset):
            return
        log.warning("half message at %d: committed copy found without its op record", offset)
        props = {record.PROPERTY_TAGS: OP_TAG, TRAN_END_PROPERTY: "COMMIT"}
        op = record.encode_record(
            TRANS_OP_HALF_TOPIC.encode(),
            str(offset).encode(),
            record.encode_properties(props),
            born_timestamp=now_ms(),
        )

        def on_put(body: AnyReply, _frames: list[Any]) -> None:
            if not isinstance(body, StorePutReply):  # the table knows; the op is for others
                log.warning("op record of committed half %d not stored: %s", offset, body)

        self._store.request(
            StorePutRequest(topic=TRANS_OP_HALF_TOPIC, queue_id=0, count=1),
            on_put,
            [op],
            timeout_s=STORE_TIMEOUT_S,
        )
