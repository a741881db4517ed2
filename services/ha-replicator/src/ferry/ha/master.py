"""The master side of replication (RocketMQ's HAService on a master): the slaves' sessions
(master_sessions.py: hello, transfers, the log bounds they are served from), the SYNC_MASTER
waits (master_acks.py), and here the wait requests and the timers over both.

SYNC_MASTER sends wait here (HaWaitAckRequest) until a slave acked their end offset; in
controller mode with allAckInSyncStateSet, until every slave of the group's in-sync set did
(the set remoting last handed over: a wait is answered as soon as the slaves still in the set
acked, even when the set shrank while it waited).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ferry.ha.config import HaConfig
from ferry.ha.master_acks import AckWaits
from ferry.ha.master_sessions import SlaveLink, SlaveSessions
from ferry.protocol.codes import SendStatus
from ferry.protocol.errors import InvalidParameterError
from ferry.protocol.messages import HaSlaveStatus, HaWaitAckReply, HaWaitAckRequest
from ferry.runtime.service import Call, HandlerResult, Peer, Service

MAX_REPLICAS = 64  # ids an in-sync set may name (a bound on bad input, not a design limit)


class MasterReplicator:
    def __init__(
        self,
        config: HaConfig,
        service: Service,
        store: Peer,
        follow_feed: Callable[[bool], None] = lambda _on: None,
    ) -> None:
        self.config = config
        self.service = service
        self.store = store
        links: dict[int, SlaveLink] = {}
        self.acks = AckWaits(links)
        self.sessions = SlaveSessions(config, store, links, self.acks, follow_feed)

    @property
    def log_end(self) -> int:
        return self.sessions.log_end

    @property
    def links(self) -> dict[int, SlaveLink]:
        return self.sessions.links

    def wait_ack(self, req: HaWaitAckRequest, call: Call) -> HandlerResult:
        now = time.monotonic()
        if req.all_of is not None:
            return self._wait_all(req, call, now)
        sessions, acks = self.sessions, self.acks
        # the put's end: the feed may not have told us yet (or is not followed yet); held
        # transfers can be served up to it
        sessions.grow(req.offset)
        slaves = sessions.in_sync(now)
        if not slaves:
            return HaWaitAckReply(SendStatus.SLAVE_NOT_AVAILABLE, acks.best_ack())
        best = max(link.acked for link in slaves)
        if best >= req.offset:
            return HaWaitAckReply(SendStatus.SEND_OK, best)
        acks.hold(req.offset, now + max(req.timeout_ms, 0) / 1000, call)
        return None

    def _wait_all(self, req: HaWaitAckRequest, call: Call, now: float) -> HandlerResult:
        assert req.all_of is not None
        if len(req.all_of) > MAX_REPLICAS or any(i < 1 for i in req.all_of):
            raise InvalidParameterError(
                f"all_of names {len(req.all_of)} slaves: at most {MAX_REPLICAS} ids of 1 or more"
            )
        sessions, acks = self.sessions, self.acks
        all_of = frozenset(req.all_of)
        acks.set_members(all_of, req.any_one, sessions.log_end)
        if req.offset <= 0:  # a changed set, or remoting asking how far the set holds the log
            return HaWaitAckReply(SendStatus.SEND_OK, acks.confirmed(sessions.log_end))
        sessions.grow(req.offset)
        if acks.answered(sessions.log_end) >= req.offset:
            return HaWaitAckReply(SendStatus.SEND_OK, acks.confirmed(sessions.log_end))
        live = {link.broker_id for link in sessions.in_sync(now)}
        if acks.any_one and all_of and not live & all_of:
            # no slave of the set connected and in sync: as without controller mode, at once
            return HaWaitAckReply(SendStatus.SLAVE_NOT_AVAILABLE, acks.confirmed(sessions.log_end))
        acks.hold(req.offset, now + max(req.timeout_ms, 0) / 1000, call)
        return None

    def sweep(self) -> None:
        """Expires held transfers (answered empty: the slave asks again, a heartbeat) and
        SYNC_MASTER waits (FLUSH_SLAVE_TIMEOUT); forgets slaves that went silent."""
        now = time.monotonic()
        self.sessions.expire_held(now)
        self.acks.expire(now)
        self.sessions.drop_silent(now)

    def status(self) -> list[HaSlaveStatus]:
        return self.sessions.status()

    def close(self) -> None:
        self.sessions.close()
        self.acks.close()
