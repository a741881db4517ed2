"""The broker-store service: wires a MessageStore to the request loop, the dispatch feed,
long polling, flushing (commit_service.py) and retention."""

from __future__ import annotations

import logging
import resource
import time
from typing import Any

import msgspec
import zmq

from ferry import native
from ferry.protocol.codes import PullStatus, SendStatus
from ferry.protocol.errors import FerryError, InvalidParameterError, ServiceNotAvailableError
from ferry.protocol.frames import NOBLOCK, recv_ready, send_frames
from ferry.protocol.messages import (
    MAX_CQ_ENTRIES,
    CleanExpiredConsumeQueueRequest,
    ConsumeQueueReply,
    DeleteExpiredCommitLogRequest,
    DispatchNotice,
    GrantWriteLeaseRequest,
    OffsetReply,
    OkReply,
    QueryConsumeQueueRequest,
    SearchOffsetByTimestampRequest,
    StoreAppendRawRequest,
    StoreConfirmOffsetRequest,
    StoreDeleteTopicRequest,
    StoreGetReply,
    StoreGetRequest,
    StoreLogDigestRequest,
    StorePutReply,
    StorePutRequest,
    StoreQueueOffsetsReply,
    StoreQueueOffsetsRequest,
    StoreReadLogReply,
    StoreReadLogRequest,
    StoreReadRawRequest,
    StoreStatusReply,
    StoreStatusRequest,
    StoreUpdateConfigRequest,
    ViewMessageReply,
    ViewMessageRequest,
)
from ferry.protocol.names import check_topic
from ferry.runtime import metrics, telemetry
from ferry.runtime.config import BrokerConfig
from ferry.runtime.lease import Lease
from ferry.runtime.service import Call, HandlerResult, Service, announce_ready
from ferry.runtime.version import package_version
from ferry.store.admin_handlers import StoreAdminHandlers
from ferry.store.commit_service import CommitService
from ferry.store.long_poll import LongPollTable
from ferry.store.property_filter import warm_sql_filters
from ferry.store.replica_handlers import ReplicaHandlers
from ferry.store.store import GetResult, MessageStore
from ferry.store.store_metrics import StoreMetrics

log = logging.getLogger("ferry.store.app")

SERVICE_NAME = "broker-store"
TRACER = "ferry.store"
FEED_TOPIC = b"dispatch"  # [topic, notice, the records]
NOTICE_TOPIC = b"notice"  # [topic, notice]: for followers that read the log files themselves
FEED_HWM = 1000  # notices queued per subscriber before the feed drops them
POLL_SWEEP_S = 0.05  # how often held gets are checked for expiry
OPEN_FILES_WANTED = 65_536  # when the hard limit is unlimited
DISK_CHECK_S = 1.0  # how often the disk's used ratio is measured (the write guard)
# Notices alone (the index reads the log files, on a 20 ms timer) go out at most this often,
# adjacent ranges as one: a notice per put woke the index's I/O thread once per sync send,
# on the 2 cores the send path needs. Records (the HA feed) still go out at once.
NOTICE_DELAY_S = 0.005


def default_endpoints(config: BrokerConfig) -> tuple[str, str]:
    """storeEndpoint and storeFeedEndpoint, or ipc sockets under <root>/run by default."""
    return (
        config.store_endpoint or config.run_endpoint("store.sock"),
        config.store_feed_endpoint or config.run_endpoint("feed.sock"),
    )


class StoreApp:
    """Request handlers and background duties of the store; the store does the work."""

    def __init__(self, config: BrokerConfig, store: MessageStore, service: Service) -> None:
        self.config = config
        self.store = store
        self.service = service
        self._feed: zmq.Socket[Any] | None = None
        self._subscriptions: dict[bytes, int] = {}  # topic prefix -> subscribers
        self._send_records = self._send_notices = False
        self._notice_range: list[int] | None = None  # [start, stop) not announced yet
        self._polls: LongPollTable[Call] = LongPollTable()
        self._commit = CommitService(config, store, service)
        if metrics.enabled():
            StoreMetrics(store, self._commit.flusher)
        self._sync_flush = config.is_sync_flush
        self._slave = config.broker_role == "SLAVE"
        # controller mode: a master appends only under the agent's write lease (lease.py)
        self.lease = Lease(config.enable_controller_mode and not self._slave)
        if config.enable_property_filter:
            warm_sql_filters()
        # allAckInSyncStateSet: a put wakes no reader; remoting's confirm of it does
        self._gated = config.reads_gated
        if self._gated:
            store.gate_reads()
        self._closed = False
        self.lease_refused = 0  # puts refused for want of a lease
        service.on(StorePutRequest, self._put)
        service.on(StoreGetRequest, self._get)
        service.on(StoreQueueOffsetsRequest, self._queue_offsets)
        service.on(StoreReadLogRequest, self._read_log)
        service.on(StoreStatusRequest, self._status)
        service.on(SearchOffsetByTimestampRequest, self._search_offset)
        service.on(ViewMessageRequest, self._view_message)
        service.on(QueryConsumeQueueRequest, self._query_cq)
        service.on(DeleteExpiredCommitLogRequest, self._delete_expired)
        service.on(StoreConfirmOffsetRequest, self._confirm)
        service.on(GrantWriteLeaseRequest, self._grant)
        # mqadmin: deleteTopic, cleanExpiredCQ, live retention keys
        admin = StoreAdminHandlers(store, self._commit.quiesce, config)
        service.on(StoreDeleteTopicRequest, admin.delete_topic)
        service.on(CleanExpiredConsumeQueueRequest, admin.clean_expired)
        service.on(StoreUpdateConfigRequest, admin.update_config)
        # HA: raw log reads (master), raw appends (slave), digests
        replica = ReplicaHandlers(store, self._slave, self._publish, self._wake)
        service.on(StoreReadRawRequest, replica.read_raw)
        service.on(StoreAppendRawRequest, replica.append_raw)
        service.on(StoreLogDigestRequest, replica.digest)
        service.every(POLL_SWEEP_S, self._expire_polls)
        service.every(DISK_CHECK_S, self._check_disk)
        service.every(config.clean_resource_interval / 1000, self._clean)
        service.on_stop(self.close)

    def bind(self) -> tuple[str, str]:
        """Binds the request ROUTER and the feed PUB; returns the endpoints actually bound."""
        endpoint, feed_endpoint = default_endpoints(self.config)
        bound = self.service.bind_router(endpoint)
        # Notices carry whole batches: a stalled subscriber may pin FEED_HWM of them, no more
        # (it catches up with StoreReadLogRequest).
        self._feed, bound_feed = self.service.bind_pub(feed_endpoint, hwm=FEED_HWM, xpub=True)
        self.service.add_reader(self._feed, self._on_subscriptions)
        return bound, bound_feed

    def _on_subscriptions(self, sock: zmq.Socket[Any]) -> None:
        """The feed publishes a kind of message only while someone subscribes to it: copying
        every batch's records into a message nobody reads costs as much as sending it."""
        while (frames := recv_ready(sock)) is not None:
            msg = frames[0]
            if msg[:1] not in (b"\x00", b"\x01"):
                continue
            count = self._subscriptions.get(msg[1:], 0) + (1 if msg[0] else -1)
            self._subscriptions[msg[1:]] = max(count, 0)
        wanted = [t for t, n in self._subscriptions.items() if n]
        self._send_records = any(FEED_TOPIC.startswith(t) for t in wanted)
        self._send_notices = any(NOTICE_TOPIC.startswith(t) for t in wanted)

    # ---- puts ----

    def _put(self, req: StorePutRequest, call: Call) -> HandlerResult:
        if self._slave:  # its log is the master's, byte for byte (replica_handlers.py)
            raise ServiceNotAvailableError("a SLAVE's store takes only its master's log")
        if len(call.payload) != 1:
            raise InvalidParameterError(
                f"a put carries exactly one payload frame of records, not {len(call.payload)}"
            )
        if self.lease.lapsed():  # checked right before the append, whoever asks for it
            self.lease_refused += 1
            raise ServiceNotAvailableError(
                f"the store of {self.config.broker_name} holds no write lease (controller "
                "mode: not master, or not confirmed by the controller in time); nothing was "
                "stored",
                retriable=True,
            )
        frame = call.payload[0]
        buf = frame if isinstance(frame, bytes) else bytes(frame)
        # one span per batch, and only under a sampled parent: the hot path stays cheap
        attributes: dict[str, Any] = {
            "messaging.destination.name": req.topic,
            "messaging.batch.message_count": req.count,
        }
        span = telemetry.child_span(
            TRACER, "store append", call.traceparent, call.tracestate, **attributes
        )
        try:
            result = self.store.put(req.topic, req.queue_id, req.count, buf, req.store_host)
        except Exception as exc:
            telemetry.end_span(span, telemetry.error_type(exc))
            raise
        telemetry.end_span(span)
        reply = StorePutReply(
            status=SendStatus.SEND_OK,
            queue_offset=result.queue_offset,
            phys_offsets=result.phys_offsets,
            next_offset=result.next_offset,
        )
        if self._sync_flush:
            flush_span = None
            if span is not None:
                flush_span = telemetry.child_span(
                    TRACER, "store flush", call.traceparent, call.tracestate
                )
            self._commit.wait_for_flush(call, reply, result.next_offset, flush_span)
        else:
            # the reply first: the sender waits on it, while the feed only wakes followers
            # (index, scheduler) that would otherwise take the 2 cores ahead of it
            call.reply(reply)
        self._wake(req.topic, req.queue_id)
        self._publish(result.from_offset, result.next_offset, result.written)
        return None

    def _grant(self, req: GrantWriteLeaseRequest, _call: Call) -> OkReply:
        self.lease.grant(req.until_monotonic, req.epoch)
        return OkReply()

    def _publish(self, start: int, stop: int, written: bytearray | None = None) -> None:
        """Dispatch feed: a hint for subscribers, dropped rather than ever blocking the store.
        `written`: the bytes of [start, stop) as the append wrote them, if it has them."""
        if self._feed is None or stop <= start:
            return
        if self._send_notices:
            held = self._notice_range
            if held is None:
                self._notice_range = [start, stop]
                self.service.later(NOTICE_DELAY_S, self._send_notice)
            elif held[1] == start:
                held[1] = stop
            else:  # not adjacent (a truncated log): what was held goes first; the timer
                self._send_notice()  # already set sends this one
                self._notice_range = [start, stop]
        if not self._send_records:
            return
        notice = self.service.codec.encode(DispatchNotice(start, stop))
        self.service.used(self._feed)  # the XPUB's subscriptions come in on it too
        records = written if written is not None else self.store.log_slice(start, stop)
        try:
            send_frames(self._feed, [FEED_TOPIC, notice, records], NOBLOCK, False)
        except zmq.ZMQError as exc:
            log.debug("dispatch notice dropped: %s", exc)

    def _send_notice(self) -> None:
        held, self._notice_range = self._notice_range, None
        if held is None or self._feed is None:
            return
        self.service.used(self._feed)
        try:
            notice = self.service.codec.encode(DispatchNotice(held[0], held[1]))
            send_frames(self._feed, [NOTICE_TOPIC, notice], NOBLOCK)
        except zmq.ZMQError as exc:
            log.debug("dispatch notice dropped: %s", exc)

    # ---- gets and long polling ----

    def _get(self, req: StoreGetRequest, call: Call) -> HandlerResult:
        check_topic(req.topic)
        if req.queue_id < 0:
            raise InvalidParameterError(f"queue id {req.queue_id} is out of range")
        if req.max_msgs < 1:
            raise InvalidParameterError(f"max_msgs must be at least 1, not {req.max_msgs}")
        result = self._read(req)
        if result.status == PullStatus.NO_NEW_MSG and req.suspend_ms > 0:
            self._polls.hold(req.topic, req.queue_id, call, time.monotonic(), req.suspend_ms)
            return None
        return self._get_reply(result, req.ranges)

    def _read(self, req: StoreGetRequest) -> GetResult:
        return self.store.get(
            req.topic,
            req.queue_id,
            req.queue_offset,
            req.max_msgs,
            req.max_bytes,
            req.tag_codes,
            payload=not req.ranges,
            sql=req.sql,
        )

    @staticmethod
    def _get_reply(result: GetResult, ranges: bool) -> HandlerResult:
        reply = StoreGetReply(
            status=result.status,
            next_begin_offset=result.next_begin_offset,
            min_offset=result.min_offset,
            max_offset=result.max_offset,
            count=result.count,
            runs=result.runs if ranges and result.runs else [],
        )
        if result.status == PullStatus.FOUND and not ranges:
            return reply, [result.payload]
        return reply

    def _answer_held(self, calls: list[Call]) -> None:
        for call in calls:
            self._read_again(call)

    def _read_again(self, call: Call, deadline: float | None = None) -> None:
        """Answers a held get with what it reads now; with a deadline, one that still finds
        nothing new is held on until then."""
        req = call.request
        assert isinstance(req, StoreGetRequest)
        try:
            result = self._read(req)
        except FerryError as err:
            call.fail(err)
            return
        if deadline is not None and result.status == PullStatus.NO_NEW_MSG:
            self._polls.hold_until(req.topic, req.queue_id, call, deadline)
            return
        answer = self._get_reply(result, req.ranges)
        if isinstance(answer, tuple):
            call.reply(answer[0], answer[1])
        elif answer is not None:
            call.reply(answer)

    def _wake(self, topic: str, queue_id: int) -> None:
        if len(self._polls) and not self._gated:
            self._answer_held(self._polls.take(topic, queue_id))

    def _confirm(self, req: StoreConfirmOffsetRequest, _call: Call) -> OkReply:
        if req.offset < 0:
            raise InvalidParameterError(f"confirm offset {req.offset} is negative")
        if self.store.confirm(req.offset) and len(self._polls):
            # which queues the newly confirmed records belong to is not known here: every
            # held read looks again, and those still empty wait on until their deadline
            for held in self._polls.take_all_held():
                self._read_again(held.item, held.deadline)
        return OkReply()

    def _expire_polls(self) -> None:
        if len(self._polls):
            self._answer_held(self._polls.expired(time.monotonic()))

    # ---- the rest ----

    def _queue_offsets(self, req: StoreQueueOffsetsRequest, _call: Call) -> HandlerResult:
        return StoreQueueOffsetsReply(self.store.queue_stats(req.topic, req.queue_ids))

    def _read_log(self, req: StoreReadLogRequest, _call: Call) -> HandlerResult:
        result = self.store.read_log(req.from_offset, req.max_bytes)
        reply = StoreReadLogReply(
            from_offset=result.from_offset,
            next_offset=result.next_offset,
            min_offset=result.min_offset,
            max_offset=result.max_offset,
            recovered_offset=self.store.recovered_offset,
        )
        return reply, [result.payload]

    def _status(self, req: StoreStatusRequest, _call: Call) -> StoreStatusReply:
        total, free = self.store.retention.disk.capacity()
        return msgspec.structs.replace(
            self.store.status(),
            log_syncs=self._commit.flusher.log_syncs,
            disk_total_bytes=total,
            disk_free_bytes=free,
            held_queues=self.store.held_queues() if req.held_queues else {},
        )

    def _search_offset(self, req: SearchOffsetByTimestampRequest, _call: Call) -> OffsetReply:
        check_topic(req.topic)
        return OffsetReply(self.store.search_offset(req.topic, req.queue_id, req.timestamp_ms))

    def _query_cq(self, req: QueryConsumeQueueRequest, _call: Call) -> ConsumeQueueReply:
        check_topic(req.topic)
        if req.index < 0 or not 0 < req.count <= MAX_CQ_ENTRIES or req.queue_id < 0:
            raise InvalidParameterError(
                f"queue {req.queue_id}, index {req.index}, count {req.count}: want queue >= 0, "
                f"index >= 0 and count 1..{MAX_CQ_ENTRIES}"
            )
        return self.store.query_cq(req.topic, req.queue_id, req.index, req.count)

    def _view_message(self, req: ViewMessageRequest, _call: Call) -> HandlerResult:
        data = self.store.view(req.phys_offset)
        return ViewMessageReply(phys_offset=req.phys_offset, size=len(data)), [data]

    # ---- retention and the disk guard ----

    def _delete_expired(self, _req: DeleteExpiredCommitLogRequest, _call: Call) -> OkReply:
        self._commit.flush_now()  # segments not flushed yet are never deleted
        self._clean(manual=True)
        return OkReply()

    def _check_disk(self) -> None:
        if self.store.retention.check_disk():  # above diskMaxUsedSpaceRatio: clean at once
            self._clean()

    def _clean(self, manual: bool = False) -> None:
        # no file may be in the flush worker's hands while files are deleted
        report = self.store.run_retention(manual=manual, before_delete=self._commit.quiesce)
        if report.deleted_segments:
            log.info(
                "retention: %d segment(s) deleted, log starts at %d, %d queue entries dropped, "
                "disk %.1f%% used",
                report.deleted_segments,
                report.min_offset,
                report.dropped_entries,
                report.used_ratio * 100,
            )

    def close(self) -> None:
        """Clean stop: answer held gets and waiting puts, flush, close the store."""
        if self._closed:
            return
        self._closed = True
        self._answer_held(self._polls.take_all())
        try:
            self._commit.close()
        finally:
            self.store.close()


def run(config: BrokerConfig) -> None:
    """Opens the store (recovery), binds, prints READY and serves until stopped."""
    raise_open_files_limit()
    store = MessageStore.open(config)
    service = Service(
        SERVICE_NAME,
        max_deferred=config.max_pending_requests,
        version=package_version("ferry-broker-store"),
    )
    app = StoreApp(config, store, service)
    try:
        endpoint, feed = app.bind()
    except BaseException:
        app.close()
        service.ctx.destroy(linger=0)
        raise
    announce_ready(SERVICE_NAME, endpoint=endpoint, feed=feed)
    log.info("store serving on %s; per-record loops in %s", endpoint, native.describe())
    service.run()


def raise_open_files_limit() -> None:
    """Every ConsumeQueue file keeps a descriptor open: thousands of queues need more than the
    usual soft limit of 1024, so take what the hard limit allows."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = OPEN_FILES_WANTED if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open files limit from %d: %s", soft, exc)
