"""allAckInSyncStateSet: how far the whole in-sync set holds the log, handed to a store.

The store's queue reads stop at that confirm offset, so no consumer sees a record a failover
may still cut. A master's remoting relays what its ha-replicator answers; a slave's
ha-replicator relays what its master sends with each transfer.
"""

from __future__ import annotations

import logging
from typing import Any

from ferry.protocol.messages import AnyReply, ErrorReply, StoreConfirmOffsetRequest
from ferry.runtime.service import Peer

log = logging.getLogger("ferry.runtime.confirm_relay")

TIMEOUT_S = 2.0


class ConfirmRelay:
    """Hands the store each higher confirm offset, one request in flight at a time: under
    load, many acks fold into one message."""

    def __init__(self, store: Peer) -> None:
        self._store = store
        self.sent = 0
        self._wanted = 0
        self._busy = False

    def advance(self, offset: int) -> None:
        self._wanted = max(self._wanted, offset)
        if self._busy or self._wanted <= self.sent:
            return
        self._busy = True
        before, offset = self.sent, self._wanted
        self.sent = offset

        def on_answer(body: AnyReply, _frames: list[Any]) -> None:
            self._busy = False
            if isinstance(body, ErrorReply):  # the store restarted or is busy: the next
                self.sent = before  # advance sends it again
                log.debug("store: confirm offset %d not taken: %s", offset, body.message)
                return
            self.advance(self._wanted)

        self._store.request(StoreConfirmOffsetRequest(offset), on_answer, timeout_s=TIMEOUT_S)
