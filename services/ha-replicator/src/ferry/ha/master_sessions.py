"""The slaves' sessions on a master (RocketMQ's HAService on a master), and the master's log
bounds they are served from.

Slaves say hello with where their log ends and a CRC32 of their last bytes; the master checks
those bytes against its own log and refuses a slave whose log diverged (HA_LOG_DIVERGED). A
slave then asks for the log from its end, again and again (HaTransferRequest); each request
acks what lies below its offset (recorded for the SYNC_MASTER waits, master_acks.py). A
request for bytes the master does not have yet is held until the store's dispatch feed
announces them, and answered from the feed's own payload when it starts there (no store round
trip), else with a raw read from the store.
"""

from __future__ import annotations

import itertools
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ferry.ha.config import HaConfig
from ferry.ha.feed_cache import FeedCache
from ferry.ha.master_acks import AckWaits
from ferry.protocol.errors import HaLogDivergedError, IllegalStateError
from ferry.protocol.messages import (
    AnyReply,
    ErrorReply,
    HaHelloReply,
    HaHelloRequest,
    HaSlaveStatus,
    HaTransferReply,
    HaTransferRequest,
    StoreLogDigestReply,
    StoreLogDigestRequest,
    StoreReadRawReply,
    StoreReadRawRequest,
    StoreStatusReply,
    StoreStatusRequest,
)
from ferry.runtime.service import Call, HandlerResult, Peer
from ferry.runtime.service import error_reply as to_error_reply
from ferry.runtime.throttled_log import ThrottledLog

log = logging.getLogger("ferry.ha.master")

STORE_TIMEOUT_S = 10.0
MAX_SUSPEND_MS = 60_000


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


class SlaveSessions:
    def __init__(
        self,
        config: HaConfig,
        store: Peer,
        links: dict[int, SlaveLink],
        acks: AckWaits,
        follow_feed: Callable[[bool], None],
    ) -> None:
        self.config = config
        # the store's feed costs both processes CPU per message: followed only while a
        # slave is attached (the PUB then filters it out at the store)
        self._follow_feed = follow_feed
        self.store = store
        self.log_min = 0
        self.log_end = 0
        self.links = links
        self.acks = acks
        self.cache = FeedCache()
        self._sessions = itertools.count(random.randrange(1, 1 << 30))
        self._max_gap = config.ha_max_gap_not_in_sync
        # a slave asks again at least every heartbeat interval; twice that is silence
        self._alive_s = 2 * config.ha_send_heartbeat_interval / 1000 + 1.0
        self._refusals = ThrottledLog(log)

    # ---- the store's log bounds ----

    def refresh(self) -> None:
        self.store.request(StoreStatusRequest(), self._on_status, timeout_s=STORE_TIMEOUT_S)

    def _on_status(self, body: AnyReply, _frames: list[Any]) -> None:
        if isinstance(body, StoreStatusReply):
            self.log_min = body.min_offset
            self.grow(body.max_offset)

    def on_feed(self, start: int, stop: int, data: bytes) -> None:
        self.cache.add(start, stop, data)
        self.log_end = max(self.log_end, stop)

    def feed_drained(self) -> None:
        self._serve_held()

    def grow(self, end: int) -> None:
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
            self.grow(body.max_offset)
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
            self.acks.release(self.log_end)
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

    # ---- what the slaves hold ----

    def in_sync(self, now: float) -> list[SlaveLink]:
        return [
            link
            for link in self.links.values()
            if now - link.last_seen <= self._alive_s and self.log_end - link.acked <= self._max_gap
        ]

    def _transfer_reply(self, start: int, stop: int) -> HaTransferReply:
        acks = self.acks
        confirmed = acks.confirmed(self.log_end) if acks.all_of is not None else 0
        return HaTransferReply(start, stop, self.log_end, confirmed)

    def expire_held(self, now: float) -> None:
        """Held transfers past their time are answered empty: the slave asks again (a
        heartbeat)."""
        for link in self.links.values():
            if link.held is not None and link.held_until <= now:
                call, link.held = link.held, None
                call.reply(self._transfer_reply(link.acked, link.acked))

    def drop_silent(self, now: float) -> None:
        """Forgets slaves that went silent."""
        silent = [
            s
            for s, link in self.links.items()
            if link.held is None and not link.reading and now - link.last_seen > 4 * self._alive_s
        ]
        for session in silent:
            log.warning("slave %d went silent; its session ends", self.links[session].broker_id)
            self._drop(session, "silent")

    def close(self) -> None:
        for session in list(self.links):
            self._drop(session, "the master stops")

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


def _as_error(body: AnyReply) -> ErrorReply:
    if isinstance(body, ErrorReply):
        return body
    return to_error_reply(IllegalStateError(f"the store answered {type(body).__name__}"))
