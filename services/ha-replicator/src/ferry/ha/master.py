"""The master side of replication (RocketMQ's HAService on a master).

Slaves say hello with where their log ends and a CRC32 of their last bytes; the master checks
those bytes against its own log and refuses a slave whose log diverged (HA_LOG_DIVERGED). A
slave then asks for the log from its end, again and again (HaTransferRequest); each request
acks what lies below its offset. A request for bytes the master does not have yet is held
until the store's dispatch feed announces them, and answered from the feed's own payload
when it starts there (no store round trip), else with a raw read from the store.

SYNC_MASTER sends wait here (HaWaitAckRequest) until a slave acked their end offset; in
controller mode with allAckInSyncStateSet, until every slave of the group's in-sync set did
(the set remoting last handed over: a wait is answered as soon as the slaves still in the set
acked, even when the set shrank while it waited).
"""

from __future__ import annotations

import collections
import heapq
import itertools
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ferry.ha.config import HaConfig
from ferry.protocol.codes import SendStatus
from ferry.protocol.errors import HaLogDivergedError, IllegalStateError, InvalidParameterError
from ferry.protocol.messages import (
    AnyReply,
    ErrorReply,
    HaHelloReply,
    HaHelloRequest,
    HaSlaveStatus,
    HaTransferReply,
    HaTransferRequest,
    HaWaitAckReply,
    HaWaitAckRequest,
    StoreLogDigestReply,
    StoreLogDigestRequest,
    StoreReadRawReply,
    StoreReadRawRequest,
    StoreStatusReply,
    StoreStatusRequest,
)
from ferry.runtime.service import Call, HandlerResult, Peer, Service
from ferry.runtime.service import error_reply as to_error_reply
from ferry.runtime.throttled_log import ThrottledLog

log = logging.getLogger("ferry.ha.master")

CACHE_BYTES = 16 * 1024 * 1024  # recent feed payloads kept to answer slaves without a read
STORE_TIMEOUT_S = 10.0
MAX_SUSPEND_MS = 60_000
MAX_REPLICAS = 64  # ids an in-sync set may name (a bound on bad input, not a design limit)


@dataclass
class SlaveLink:
    session: int
    broker_id: int
    addr: str
    acked: int
    last_seen: float
    last_ack_ms: int = 0
    held: Call | None = None
    held_until: float = 0.0
    reading: bool = False  # a store read for this slave is under way


class FeedCache:
    """Contiguous recent log bytes from the dispatch feed, as (from, next, bytes) chunks."""

    def __init__(self, limit: int = CACHE_BYTES) -> None:
        self.chunks: collections.deque[tuple[int, int, bytes]] = collections.deque()
        self.size = 0
        self.limit = limit

    @property
    def end(self) -> int:
        return self.chunks[-1][1] if self.chunks else -1

    def clear(self) -> None:
        self.chunks.clear()
        self.size = 0

    def add(self, start: int, stop: int, data: bytes) -> None:
        if len(data) != stop - start:
            return
        if self.chunks and start != self.end:
            self.clear()  # a gap (lost notices): start over from here
        self.chunks.append((start, stop, data))
        self.size += len(data)
        while self.size > self.limit and len(self.chunks) > 1:
            self.size -= len(self.chunks.popleft()[2])

    def take(self, start: int, max_bytes: int) -> tuple[int, bytes] | None:
        """(next offset, bytes) of whole chunks from start, when a chunk starts there."""
        if not self.chunks or not self.chunks[0][0] <= start < self.end:
            return None
        parts: list[bytes] = []
        total = 0
        nxt = start
        for lo, hi, data in self.chunks:
            if hi <= start:
                continue
            if lo != nxt:
                return None  # start falls inside a chunk: read the store
            if parts and total + len(data) > max_bytes:
                break
            parts.append(data)
            total += len(data)
            nxt = hi
        if not parts:
            return None
        return nxt, parts[0] if len(parts) == 1 else b"".join(parts)


class MasterReplicator:
    def __init__(
        self,
        config: HaConfig,
        service: Service,
        store: Peer,
        follow_feed: Callable[[bool], None] = lambda _on: None,
    ) -> None:
        self.config = config
        # the store's feed costs both processes CPU per message: followed only while a
        # slave is attached (the PUB then filters it out at the store)
        self._follow_feed = follow_feed
        self.service = service
        self.store = store
        self.log_min = 0
        self.log_end = 0
        self.links: dict[int, SlaveLink] = {}
        self.cache = FeedCache()
        self._sessions = itertools.count(random.randrange(1, 1 << 30))
        self._waiters: list[tuple[int, int, float, Call]] = []  # (offset, seq, deadline, call)
        self._seq = itertools.count()
        self._max_gap = config.ha_max_gap_not_in_sync
        # allAckInSyncStateSet: the in-sync set's slaves, every one of which must ack (None:
        # any one slave in sync will do)
        self._all_of: frozenset[int] | None = None
        self._any_one = False  # with _all_of: one slave of it acking answers a wait
        # a slave asks again at least every heartbeat interval; twice that is silence
        self._alive_s = 2 * config.ha_send_heartbeat_interval / 1000 + 1.0
        self._refusals = ThrottledLog(log)

    # ---- the store's log bounds ----

    def refresh(self) -> None:
        self.store.request(StoreStatusRequest(), self._on_status, timeout_s=STORE_TIMEOUT_S)

    def _on_status(self, body: AnyReply, _frames: list[Any]) -> None:
        if isinstance(body, StoreStatusReply):
            self.log_min = body.min_offset
            self._grow(body.max_offset)

    def on_feed(self, start: int, stop: int, data: bytes) -> None:
        self.cache.add(start, stop, data)
        self.log_end = max(self.log_end, stop)

    def feed_drained(self) -> None:
        self._serve_held()

    def _grow(self, end: int) -> None:
        if end > self.log_end:
            self.log_end = end
            self._serve_held()

    # ---- hello ----

    def hello(self, req: HaHelloRequest, call: Call) -> HandlerResult:
        if req.broker_id <= 0 or req.max_offset < 0:
            raise HaLogDivergedError(f"broker id {req.broker_id} is not a slave's")
        if req.broker_name != self.config.broker_name:
            raise HaLogDivergedError(
                f"this is the master of {self.config.broker_name}, not of {req.broker_name}"
            )

        def accept(start: int, master_end: int) -> None:
            old = [s for s, link in self.links.items() if link.broker_id == req.broker_id]
            for session in old:
                self._drop(session, "a new session of the same slave replaced it")
            session = next(self._sessions)
            if not self.links:
                self._follow_feed(True)
            self.links[session] = SlaveLink(
                session, req.broker_id, req.slave_addr, start, time.monotonic()
            )
            log.info(
                "slave %d (%s) connected at offset %d; master log ends at %d",
                req.broker_id,
                req.slave_addr or "?",
                start,
                master_end,
            )
            call.reply(HaHelloReply(session, start, master_end))

        def refuse(why: str) -> None:
            # throttled: anyone who reaches the port can send hellos as fast as they like
            self._refusals.warning("slave %d refused: %s", req.broker_id, why)
            call.fail(HaLogDivergedError(why))

        def on_status(body: AnyReply, _frames: list[Any]) -> None:
            if not isinstance(body, StoreStatusReply):
                call.reply(_as_error(body))
                return
            self.log_min = body.min_offset
            self._grow(body.max_offset)
            if req.max_offset == 0:
                # an empty slave starts where the master's log starts now
                accept(body.min_offset, body.max_offset)
            elif req.max_offset > body.max_offset:
                refuse(
                    f"the slave's log ends at {req.max_offset}, past this master's end "
                    f"{body.max_offset}: the master was replaced or lost data; rebuild the slave"
                )
            elif req.max_offset < body.min_offset or req.digest_from < body.min_offset:
                refuse(
                    f"the slave's log ends at {req.max_offset} but this master's log starts at "
                    f"{body.min_offset}: rebuild the slave"
                )
            else:
                self.store.request(
                    StoreLogDigestRequest(req.digest_from, req.max_offset),
                    on_digest,
                    timeout_s=STORE_TIMEOUT_S,
                )

        def on_digest(body: AnyReply, _frames: list[Any]) -> None:
            if not isinstance(body, StoreLogDigestReply):
                call.reply(_as_error(body))
            elif body.crc != req.digest_crc:
                refuse(
                    f"the slave's bytes [{req.digest_from}, {req.max_offset}) differ from this "
                    "master's (CRC32 mismatch): the logs diverged; rebuild the slave"
                )
            else:
                accept(req.max_offset, body.max_offset)

        self.store.request(StoreStatusRequest(), on_status, timeout_s=STORE_TIMEOUT_S)
        return None

    def _drop(self, session: int, why: str) -> None:
        link = self.links.pop(session, None)
        if link is not None and link.held is not None:
            link.held.fail(IllegalStateError(f"session {session} ended: {why}"))
        if link is not None and not self.links:
            self._follow_feed(False)
            self.cache.clear()

    # ---- transfers ----

    def transfer(self, req: HaTransferRequest, call: Call) -> HandlerResult:
        link = self.links.get(req.session)
        if link is None:
            raise IllegalStateError(f"no session {req.session} here; say hello again")
        if link.held is not None:  # an older request the slave gave up on
            link.held.reply(self._transfer_reply(link.acked, link.acked))
            link.held = None
        now = time.monotonic()
        link.last_seen = now
        if req.from_offset > link.acked:
            link.acked = req.from_offset
            link.last_ack_ms = time.time_ns() // 1_000_000
            self._release_waiters()
        elif req.from_offset < link.acked:
            raise IllegalStateError(
                f"slave {link.broker_id} went back from {link.acked} to {req.from_offset}"
            )
        if req.from_offset < self.log_end:
            self._serve(link, call, req)
            return None
        if req.suspend_ms <= 0:
            return self._transfer_reply(req.from_offset, req.from_offset)
        link.held = call
        link.held_until = now + min(req.suspend_ms, MAX_SUSPEND_MS) / 1000
        return None

    def _serve(self, link: SlaveLink, call: Call, req: HaTransferRequest) -> None:
        max_bytes = min(max(req.max_bytes, 1), self.config.ha_transfer_batch_size)
        cached = self.cache.take(req.from_offset, max_bytes)
        if cached is not None:
            nxt, data = cached
            call.reply(self._transfer_reply(req.from_offset, nxt), [data])
            return
        link.reading = True

        def on_read(body: AnyReply, frames: list[Any]) -> None:
            link.reading = False
            if isinstance(body, StoreReadRawReply):
                self.log_min = body.min_offset
                self.log_end = max(self.log_end, body.max_offset)
                data = frames[0] if frames else b""
                call.reply(self._transfer_reply(body.from_offset, body.next_offset), [data])
            else:
                call.reply(_as_error(body))

        self.store.request(
            StoreReadRawRequest(req.from_offset, max_bytes), on_read, timeout_s=STORE_TIMEOUT_S
        )

    def _serve_held(self) -> None:
        for link in self.links.values():
            call = link.held
            if call is None or call.done:
                link.held = None
                continue
            req = call.request
            assert isinstance(req, HaTransferRequest)
            if req.from_offset < self.log_end:
                link.held = None
                self._serve(link, call, req)

    # ---- SYNC_MASTER waits ----

    def in_sync(self, now: float) -> list[SlaveLink]:
        return [
            link
            for link in self.links.values()
            if now - link.last_seen <= self._alive_s and self.log_end - link.acked <= self._max_gap
        ]

    def wait_ack(self, req: HaWaitAckRequest, call: Call) -> HandlerResult:
        now = time.monotonic()
        if req.all_of is not None:
            return self._wait_all(req, call, now)
        # the put's end: the feed may not have told us yet (or is not followed yet); held
        # transfers can be served up to it
        self._grow(req.offset)
        slaves = self.in_sync(now)
        if not slaves:
            return HaWaitAckReply(SendStatus.SLAVE_NOT_AVAILABLE, self._best_ack())
        best = max(link.acked for link in slaves)
        if best >= req.offset:
            return HaWaitAckReply(SendStatus.SEND_OK, best)
        deadline = now + max(req.timeout_ms, 0) / 1000
        heapq.heappush(self._waiters, (req.offset, next(self._seq), deadline, call))
        return None

    def _wait_all(self, req: HaWaitAckRequest, call: Call, now: float) -> HandlerResult:
        assert req.all_of is not None
        if len(req.all_of) > MAX_REPLICAS or any(i < 1 for i in req.all_of):
            raise InvalidParameterError(
                f"all_of names {len(req.all_of)} slaves: at most {MAX_REPLICAS} ids of 1 or more"
            )
        all_of = frozenset(req.all_of)
        if all_of != self._all_of or req.any_one != self._any_one:
            if self._all_of is not None:
                log.info("in-sync set's slaves: %s -> %s", sorted(self._all_of), sorted(all_of))
            self._all_of, self._any_one = all_of, req.any_one
            self._release_waiters()  # a slave left the set: waits that only lacked it end
        if req.offset <= 0:  # a changed set, or remoting asking how far the set holds the log
            return HaWaitAckReply(SendStatus.SEND_OK, self._confirmed())
        self._grow(req.offset)
        if self._answered() >= req.offset:
            return HaWaitAckReply(SendStatus.SEND_OK, self._confirmed())
        live = {link.broker_id for link in self.in_sync(now)}
        if self._any_one and all_of and not live & all_of:
            # no slave of the set connected and in sync: as without controller mode, at once
            return HaWaitAckReply(SendStatus.SLAVE_NOT_AVAILABLE, self._confirmed())
        deadline = now + max(req.timeout_ms, 0) / 1000
        heapq.heappush(self._waiters, (req.offset, next(self._seq), deadline, call))
        return None

    def _transfer_reply(self, start: int, stop: int) -> HaTransferReply:
        confirmed = self._confirmed() if self._all_of is not None else 0
        return HaTransferReply(start, stop, self.log_end, confirmed)

    def _confirmed(self) -> int:
        """How far the log is safe: any one slave's ack, or with allAckInSyncStateSet the
        least ack of the set's slaves (a slave of the set not connected acked nothing; a set
        of the master alone holds the whole log, as RocketMQ's confirm offset)."""
        if self._all_of is None:
            return self._best_ack()
        if not self._all_of:
            return self.log_end
        acked = {link.broker_id: link.acked for link in self.links.values()}
        return min(acked.get(slave, 0) for slave in self._all_of)

    def _answered(self) -> int:
        """How far a wait is answered SEND_OK: the confirm offset, or without
        allAckInSyncStateSet the best ack of any one slave of the set."""
        if self._all_of is None or not self._any_one or not self._all_of:
            return self._confirmed()
        acked = {link.broker_id: link.acked for link in self.links.values()}
        return max(acked.get(slave, 0) for slave in self._all_of)

    def _best_ack(self) -> int:
        return max((link.acked for link in self.links.values()), default=0)

    def _release_waiters(self) -> None:
        best = self._answered()
        confirmed = self._confirmed()
        while self._waiters and self._waiters[0][0] <= best:
            _, _, _, call = heapq.heappop(self._waiters)
            call.reply(HaWaitAckReply(SendStatus.SEND_OK, confirmed))

    def sweep(self) -> None:
        """Expires held transfers (answered empty: the slave asks again, a heartbeat) and
        SYNC_MASTER waits (FLUSH_SLAVE_TIMEOUT); forgets slaves that went silent."""
        now = time.monotonic()
        for link in self.links.values():
            if link.held is not None and link.held_until <= now:
                call, link.held = link.held, None
                call.reply(self._transfer_reply(link.acked, link.acked))
        if self._waiters:
            expired = [w for w in self._waiters if w[2] <= now]
            if expired:
                self._waiters = [w for w in self._waiters if w[2] > now]
                heapq.heapify(self._waiters)
                best = self._best_ack()
                for _, _, _, call in expired:
                    call.reply(HaWaitAckReply(SendStatus.FLUSH_SLAVE_TIMEOUT, best))
        silent = [
            s
            for s, link in self.links.items()
            if link.held is None and not link.reading and now - link.last_seen > 4 * self._alive_s
        ]
        for session in silent:
            log.warning("slave %d went silent; its session ends", self.links[session].broker_id)
            self._drop(session, "silent")

    def status(self) -> list[HaSlaveStatus]:
        now = time.monotonic()
        in_sync = {link.session for link in self.in_sync(now)}
        return [
            HaSlaveStatus(
                broker_id=link.broker_id,
                addr=link.addr,
                acked_offset=link.acked,
                in_sync=link.session in in_sync,
                last_ack_ms=link.last_ack_ms,
            )
            for link in self.links.values()
        ]

    def close(self) -> None:
        for session in list(self.links):
            self._drop(session, "the master stops")
        for _, _, _, call in self._waiters:
            call.reply(HaWaitAckReply(SendStatus.FLUSH_SLAVE_TIMEOUT, self._best_ack()))
        self._waiters.clear()


def _as_error(body: AnyReply) -> ErrorReply:
    if isinstance(body, ErrorReply):
        return body
    return to_error_reply(IllegalStateError(f"the store answered {type(body).__name__}"))
