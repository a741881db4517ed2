"""SYNC_MASTER waits on a master: the sends waiting for slaves' acks, and how far those acks
hold the log (any one slave's, or in controller mode with allAckInSyncStateSet every slave of
the in-sync set's). Bookkeeping only: the slaves' sessions (master_sessions.py) record the
acks, the master (master.py) answers the wait requests."""

from __future__ import annotations

import heapq
import itertools
import logging
from typing import TYPE_CHECKING

from ferry.protocol.codes import SendStatus
from ferry.protocol.messages import HaWaitAckReply
from ferry.runtime.service import Call

if TYPE_CHECKING:
    from ferry.ha.master_sessions import SlaveLink

log = logging.getLogger("ferry.ha.master")


class AckWaits:
    def __init__(self, links: dict[int, SlaveLink]) -> None:
        self.links = links  # the sessions' own dict: read here, written there
        self.waiters: list[tuple[int, int, float, Call]] = []  # (offset, seq, deadline, call)
        self._seq = itertools.count()
        # allAckInSyncStateSet: the in-sync set's slaves, every one of which must ack (None:
        # any one slave in sync will do)
        self.all_of: frozenset[int] | None = None
        self.any_one = False  # with all_of: one slave of it acking answers a wait

    def hold(self, offset: int, deadline: float, call: Call) -> None:
        heapq.heappush(self.waiters, (offset, next(self._seq), deadline, call))

    def set_members(self, all_of: frozenset[int], any_one: bool, log_end: int) -> None:
        """The in-sync set remoting handed over with a wait."""
        if all_of != self.all_of or any_one != self.any_one:
            if self.all_of is not None:
                log.info("in-sync set's slaves: %s -> %s", sorted(self.all_of), sorted(all_of))
            self.all_of, self.any_one = all_of, any_one
            self.release(log_end)  # a slave left the set: waits that only lacked it end

    def confirmed(self, log_end: int) -> int:
        """How far the log is safe: any one slave's ack, or with allAckInSyncStateSet the
        least ack of the set's slaves (a slave of the set not connected acked nothing; a set
        of the master alone holds the whole log, as RocketMQ's confirm offset)."""
        if self.all_of is None:
            return self.best_ack()
        if not self.all_of:
            return log_end
        acked = {link.broker_id: link.acked for link in self.links.values()}
        return min(acked.get(slave, 0) for slave in self.all_of)

    def answered(self, log_end: int) -> int:
        """How far a wait is answered SEND_OK: the confirm offset, or without
        allAckInSyncStateSet the best ack of any one slave of the set."""
        if self.all_of is None or not self.any_one or not self.all_of:
            return self.confirmed(log_end)
        acked = {link.broker_id: link.acked for link in self.links.values()}
        return max(acked.get(slave, 0) for slave in self.all_of)

    def best_ack(self) -> int:
        return max((link.acked for link in self.links.values()), default=0)

    def release(self, log_end: int) -> None:
        best = self.answered(log_end)
        confirmed = self.confirmed(log_end)
        while self.waiters and self.waiters[0][0] <= best:
            _, _, _, call = heapq.heappop(self.waiters)
            call.reply(HaWaitAckReply(SendStatus.SEND_OK, confirmed))

    def expire(self, now: float) -> None:
        """Waits past their deadline are answered FLUSH_SLAVE_TIMEOUT."""
        if self.waiters:
            expired = [w for w in self.waiters if w[2] <= now]
            if expired:
                self.waiters = [w for w in self.waiters if w[2] > now]
                heapq.heapify(self.waiters)
                best = self.best_ack()
                for _, _, _, call in expired:
                    call.reply(HaWaitAckReply(SendStatus.FLUSH_SLAVE_TIMEOUT, best))

    def close(self) -> None:
        for _, _, _, call in self.waiters:
            call.reply(HaWaitAckReply(SendStatus.FLUSH_SLAVE_TIMEOUT, self.best_ack()))
        self.waiters.clear()
