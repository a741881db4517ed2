"""Composition root of the index service: the index files, the feed subscription, the log
follower, the query handlers and the periodic check of the store's log bounds."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import msgspec
import zmq

from ferry import native
from ferry.index.config import IndexConfig
from ferry.index.follower import LogFollower, connect_store
from ferry.index.index_store import IndexStore
from ferry.index.keys import key_hash
from ferry.index.rebuild import Rebuild, discard_abandoned
from ferry.protocol.frames import recv_ready
from ferry.protocol.framing import DECODE_FAILURES
from ferry.protocol.messages import (
    AnyReply,
    DispatchNotice,
    IndexHit,
    IndexQueryReply,
    IndexQueryRequest,
    IndexRebuildRequest,
    IndexStatusReply,
    IndexStatusRequest,
    OkReply,
    StoreStatusReply,
    StoreStatusRequest,
)
from ferry.protocol.messages.index import check_query
from ferry.protocol.span_attributes import messaging
from ferry.runtime import telemetry
from ferry.runtime.dir_lock import DirLock, LastStop
from ferry.runtime.log_reader import LogReader
from ferry.runtime.service import DRAIN_BATCH, Call, Service, announce_ready
from ferry.runtime.version import package_version

log = logging.getLogger("ferry.index")

SERVICE_NAME = "index"
TRACER = "ferry.index"
DISPATCH_ATTRS = messaging("dispatch")
FEED_TOPIC = b"dispatch"  # notices with the records
NOTICE_TOPIC = b"notice"  # notices alone: the records are read from the log files
FEED_HWM = 1000  # notices queued in the subscription
FEED_RCVBUF = 1024 * 1024  # kernel receive buffer of the feed connection
FEED_DRAIN_S = 0.02  # how often the feed is read
STATUS_INTERVAL_S = 1.0  # how often the store's log bounds are checked (gaps, retention)
STATUS_TIMEOUT_S = 5.0


class IndexApp:
    def __init__(self, config: IndexConfig) -> None:
        self.config = config
        self.root = Path(config.index_dir)
        self.root.mkdir(parents=True, exist_ok=True)
        self.lock = DirLock(self.root, "index process")
        try:
            last_stop = self.lock.last_stop()
            discard_abandoned(self.root)
            self.index = IndexStore.open(
                self.root, config.geometry, drop_newest=last_stop is LastStop.MACHINE_CRASH
            )
            self.lock.mark_running()
        except BaseException:
            self.lock.release()
            raise
        stats = self.index.stats()
        (log.info if last_stop is LastStop.CLEAN else log.warning)(
            "index opened after a %s: %d files, %d entries, resuming at CommitLog offset %d",
            last_stop.value,
            stats.files,
            stats.entries,
            stats.applied,
        )
        self.service = Service(
            SERVICE_NAME,
            max_deferred=config.max_pending_requests,
            version=package_version("ferry-index"),
        )
        self.store = connect_store(self.service, config.store_endpoint)
        self.follower = LogFollower(self.service, self.store, self.index)
        self.rebuild: Rebuild | None = None
        self._notices = msgspec.msgpack.Decoder(DispatchNotice)
        self._closed = False
        feed = self.service.ctx.socket(zmq.SUB)
        feed.linger = 0
        self.service.secure_client(feed)
        # bounded buffers: a stalled index loses notices (and reads the log) rather than
        # letting the kernel hold tens of MB of them
        feed.rcvhwm = FEED_HWM
        feed.rcvbuf = FEED_RCVBUF
        log_dir = config.store_root / "commitlog"
        self._reader = LogReader(log_dir)
        self._use_files = config.index_reads_commit_log and log_dir.is_dir()
        feed.setsockopt(zmq.SUBSCRIBE, NOTICE_TOPIC if self._use_files else FEED_TOPIC)
        feed.connect(config.store_feed_endpoint)
        self._feed = feed
        # read on a timer, not on arrival: one wake-up takes every notice of the last few ms,
        # instead of a wake-up per send competing with the send path for the CPU
        self.service.every(FEED_DRAIN_S, self._drain_feed)
        self.service.on(IndexQueryRequest, self._query)
        self.service.on(IndexStatusRequest, self._status)
        self.service.on(IndexRebuildRequest, self._rebuild)
        self.service.every(STATUS_INTERVAL_S, self._check_store)
        self.service.on_stop(self.close)

    def run(self) -> None:
        endpoint = self.service.bind_router(self.config.listen_endpoint())
        announce_ready(SERVICE_NAME, endpoint=endpoint)
        log.info(
            "index serving on %s, following %s; per-record loops in %s",
            endpoint,
            self.config.store_feed_endpoint,
            native.describe(),
        )
        self.follower.catch_up()
        self.service.run()

    # ---- the feed ----

    def _drain_feed(self) -> None:
        # Notices of back-to-back puts name adjacent ranges: read and applied as one (one
        # read, one commit) instead of one each, which at a few thousand single sends a
        # second cost more than the indexing itself (bench/handoffs.py).
        merged: DispatchNotice | None = None
        for _ in range(DRAIN_BATCH):
            frames = recv_ready(self._feed)
            if frames is None:
                break
            if len(frames) == 3 and frames[0] == FEED_TOPIC:
                raw_notice, records = frames[1], frames[2]
            elif len(frames) == 2 and frames[0] == NOTICE_TOPIC and self._use_files:
                raw_notice, records = frames[1], None
            else:
                log.debug("feed message of %d frames ignored", len(frames))
                continue
            try:
                notice = self._notices.decode(raw_notice)
            except DECODE_FAILURES as exc:
                self.service.bad_input.warning("undecodable dispatch notice ignored: %s", exc)
                continue
            if merged is not None:
                if records is None and merged.next_offset == notice.from_offset:
                    merged = DispatchNotice(merged.from_offset, notice.next_offset)
                    continue
                self._apply(merged, None)  # in order: what was merged goes first
                merged = None
            if records is None:
                merged = notice
            else:
                self._apply(notice, records)
        if merged is not None:
            self._apply(merged, None)

    def _apply(self, notice: DispatchNotice, records: Any) -> None:
        """One notice's records (None: read from the log files) to the follower."""
        if records is None and (records := self._read_log(notice)) is None:
            return
        # traced messages in the batch: one span, under the first one's send
        span = telemetry.feed_span(TRACER, "index dispatch", records, **DISPATCH_ATTRS)
        try:
            self.follower.on_notice(notice.from_offset, notice.next_offset, records)
        except Exception as exc:
            # the index rolled back to its last commit; a later read applies these again
            log.exception("dispatch notice not applied")
            telemetry.end_span(span, telemetry.error_type(exc))
        else:
            telemetry.end_span(span)

    def _read_log(self, notice: DispatchNotice) -> Any:
        """A notice's records from the log files; b"" where the follower will not use them
        (seen already, or a gap it reads from the store); None, after switching to the
        records on the feed, when the files cannot be read here."""
        applied = self.follower.index.applied
        if self.follower.reading or not notice.from_offset <= applied < notice.next_offset:
            return b""
        records = self._reader.read([(notice.from_offset, notice.next_offset)], blank_ok=True)
        if records is None:
            log.warning("the store's log files cannot be read here: records come on the feed")
            self._use_files = False
            self._feed.setsockopt(zmq.UNSUBSCRIBE, NOTICE_TOPIC)
            self._feed.setsockopt(zmq.SUBSCRIBE, FEED_TOPIC)
            self.follower.catch_up()
        return records

    # ---- requests ----

    def _query(self, req: IndexQueryRequest, call: Call) -> IndexQueryReply:
        check_query(req)
        attributes = messaging(destination=req.topic)
        with telemetry.server_span(
            "ferry.index", "index query", call.traceparent, call.tracestate, **attributes
        ):
            hits = self.index.query(
                key_hash(req.topic, req.key, unique=req.unique),
                req.begin_ms,
                req.end_ms,
                req.max_num,
            )
        return IndexQueryReply(
            hits=[IndexHit(h.phys_offset, h.store_ms) for h in hits],
            applied_offset=self.index.applied,
            last_store_ms=self.index.stats().last_store_ms,
        )

    def _status(self, _req: IndexStatusRequest, _call: Call) -> IndexStatusReply:
        stats = self.index.stats()
        follower = self.follower
        return IndexStatusReply(
            applied_offset=stats.applied,
            files=stats.files,
            entries=stats.entries,
            first_phys=stats.first_phys,
            last_store_ms=stats.last_store_ms,
            store_min_offset=follower.store_min,
            store_max_offset=follower.store_max,
            caught_up=follower.caught_up and not follower.reading,
            rebuilding=self.rebuild is not None,
            rebuild_offset=self.rebuild.index.applied if self.rebuild is not None else 0,
            log_file_reads=self._reader.reads,
            log_file_misses=self._reader.misses,
        )

    def _rebuild(self, _req: IndexRebuildRequest, _call: Call) -> OkReply:
        if self.rebuild is None:
            log.info("rebuilding the index from the CommitLog")
            self.rebuild = Rebuild(
                self.service, self.store, self.root, self.config.geometry, self._install
            )
        return OkReply()

    def _install(self, rebuild: Rebuild) -> None:
        if rebuild is not self.rebuild:
            return
        self.rebuild = None
        self.index = rebuild.install(self.index)
        self.follower.index = self.index
        self.follower.restart()

    # ---- the store's log bounds ----

    def _check_store(self) -> None:
        self.store.request(StoreStatusRequest(), self._on_store_status, timeout_s=STATUS_TIMEOUT_S)

    def _on_store_status(self, body: AnyReply, _frames: list[Any]) -> None:
        if not isinstance(body, StoreStatusReply) or self._closed:
            return
        if not self.follower.on_store_status(body.min_offset, body.max_offset):
            log.error(
                "the CommitLog ends at %d, below the indexed %d (the store lost data): "
                "indexing again from its start",
                body.max_offset,
                self.index.applied,
            )
            self.index.reset()
            self.follower.restart()
        for index in (self.index, self.rebuild.index if self.rebuild else None):
            if index is not None and index.delete_below(body.min_offset):
                log.info("index files below CommitLog offset %d deleted", body.min_offset)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.follower.stopped = True
        if self.rebuild is not None:
            self.rebuild.abandon()
        try:
            self.index.close()
            self.lock.mark_clean_stop()
        finally:
            self.lock.release()
