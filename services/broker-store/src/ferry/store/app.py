"""The broker-store service: wires a MessageStore to the request loop, the dispatch feed,
long polling and the flush timers."""

from __future__ import annotations

import logging
import time
from importlib import metadata
from typing import Any

import msgspec
import zmq

from ferry.protocol.codes import PullStatus, SendStatus
from ferry.protocol.errors import FerryError, InvalidParameterError
from ferry.protocol.messages import (
    DispatchNotice,
    StoreGetReply,
    StoreGetRequest,
    StorePutReply,
    StorePutRequest,
    StoreQueueOffsetsReply,
    StoreQueueOffsetsRequest,
    StoreReadLogReply,
    StoreReadLogRequest,
    StoreStatusReply,
    StoreStatusRequest,
)
from ferry.protocol.names import check_topic
from ferry.runtime.config import BrokerConfig
from ferry.runtime.service import Call, HandlerResult, Service, announce_ready
from ferry.runtime.telemetry import server_span
from ferry.store.flush import Flusher
from ferry.store.long_poll import LongPollTable
from ferry.store.store import GetResult, MessageStore

log = logging.getLogger("ferry.store.app")

SERVICE_NAME = "broker-store"
FEED_TOPIC = b"dispatch"
FEED_HWM = 1000  # notices queued per subscriber before the feed drops them
POLL_SWEEP_S = 0.05  # how often held gets are checked for expiry
MAX_IPC_PATH = 100  # longer ipc:// paths do not fit in a unix socket address


def default_endpoints(config: BrokerConfig) -> tuple[str, str]:
    """storeEndpoint and storeFeedEndpoint, or ipc sockets under <root>/run by default."""
    run_dir = config.store_root.resolve() / "run"

    def ipc(name: str) -> str:
        path = str(run_dir / name)
        return f"ipc://{path}" if len(path) <= MAX_IPC_PATH else "tcp://127.0.0.1:0"

    return config.store_endpoint or ipc("store.sock"), config.store_feed_endpoint or ipc(
        "feed.sock"
    )


def package_version() -> str:
    try:
        return metadata.version("ferry-broker-store")
    except metadata.PackageNotFoundError:
        return ""


class StoreApp:
    """Request handlers and background duties of the store; the store does the work."""

    def __init__(self, config: BrokerConfig, store: MessageStore, service: Service) -> None:
        self.config = config
        self.store = store
        self.service = service
        self._feed: zmq.Socket[Any] | None = None
        self._polls: LongPollTable[Call] = LongPollTable()
        self._sync_flush = config.is_sync_flush
        self._sync_timeout_s = config.sync_flush_timeout / 1000
        self._waiting: list[tuple[Call, StorePutReply, float]] = []  # puts awaiting a flush
        self._flusher = Flusher(store)
        self._closed = False
        service.on(StorePutRequest, self._put)
        service.on(StoreGetRequest, self._get)
        service.on(StoreQueueOffsetsRequest, self._queue_offsets)
        service.on(StoreReadLogRequest, self._read_log)
        service.on(StoreStatusRequest, self._status)
        service.every(max(config.flush_interval_commit_log, 10) / 1000, self._flusher.tick)
        service.every(POLL_SWEEP_S, self._expire_polls)
        if self._sync_flush:
            service.after_poll(self._group_commit)
        service.on_stop(self.close)

    def bind(self) -> tuple[str, str]:
        """Binds the request ROUTER and the feed PUB; returns the endpoints actually bound."""
        endpoint, feed_endpoint = default_endpoints(self.config)
        bound = self.service.bind_router(endpoint)
        # Notices carry whole batches: a stalled subscriber may pin FEED_HWM of them, no more
        # (it catches up with StoreReadLogRequest).
        self._feed, bound_feed = self.service.bind_pub(feed_endpoint, hwm=FEED_HWM)
        return bound, bound_feed

    # ---- puts ----

    def _put(self, req: StorePutRequest, call: Call) -> HandlerResult:
        if len(call.payload) != 1:
            raise InvalidParameterError(
                f"a put carries exactly one payload frame of records, not {len(call.payload)}"
            )
        frame = call.payload[0]
        buf = frame if isinstance(frame, bytes) else bytes(frame)
        attributes: dict[str, Any] = {"messaging.batch.message_count": req.count}
        with server_span(
            "ferry.store", "store append", call.traceparent, call.tracestate, **attributes
        ):
            result = self.store.put(req.topic, req.queue_id, req.count, buf, req.store_host)
        self._publish(result.from_offset, result.next_offset)
        self._wake(req.topic, req.queue_id)
        reply = StorePutReply(
            status=SendStatus.SEND_OK,
            queue_offset=result.queue_offset,
            phys_offsets=result.phys_offsets,
        )
        if self._sync_flush:
            self._waiting.append((call, reply, time.monotonic()))
            return None
        return reply

    def _group_commit(self) -> None:
        """SYNC_FLUSH: one fdatasync for every put of this loop round, then their replies."""
        if not self._waiting:
            return
        waiting, self._waiting = self._waiting, []
        try:
            self.store.sync_log()
            ok = True
        except OSError:
            log.exception("sync flush failed")
            ok = False
        now = time.monotonic()
        for call, reply, since in waiting:
            if ok and now - since <= self._sync_timeout_s:
                call.reply(reply)
            else:
                call.reply(msgspec.structs.replace(reply, status=SendStatus.FLUSH_DISK_TIMEOUT))

    def _publish(self, start: int, stop: int) -> None:
        """Dispatch feed: a hint for subscribers, dropped rather than ever blocking the store."""
        if self._feed is None or stop <= start:
            return
        frames = [
            FEED_TOPIC,
            self.service.codec.encode(DispatchNotice(start, stop)),
            self.store.log_slice(start, stop),
        ]
        try:
            self._feed.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
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
        return self._get_reply(result)

    def _read(self, req: StoreGetRequest) -> GetResult:
        return self.store.get(
            req.topic, req.queue_id, req.queue_offset, req.max_msgs, req.max_bytes, req.tag_codes
        )

    @staticmethod
    def _get_reply(result: GetResult) -> HandlerResult:
        reply = StoreGetReply(
            status=result.status,
            next_begin_offset=result.next_begin_offset,
            min_offset=result.min_offset,
            max_offset=result.max_offset,
            count=result.count,
        )
        if result.status == PullStatus.FOUND:
            return reply, [result.payload]
        return reply

    def _answer_held(self, calls: list[Call]) -> None:
        for call in calls:
            req = call.request
            assert isinstance(req, StoreGetRequest)
            try:
                answer = self._get_reply(self._read(req))
            except FerryError as err:
                call.fail(err)
                continue
            if isinstance(answer, tuple):
                call.reply(answer[0], answer[1])
            elif answer is not None:
                call.reply(answer)

    def _wake(self, topic: str, queue_id: int) -> None:
        if len(self._polls):
            self._answer_held(self._polls.take(topic, queue_id))

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
        )
        return reply, [result.payload]

    def _status(self, _req: StoreStatusRequest, _call: Call) -> StoreStatusReply:
        return self.store.status()

    def close(self) -> None:
        """Clean stop: answer held gets and waiting puts, flush, close the store."""
        if self._closed:
            return
        self._closed = True
        self._answer_held(self._polls.take_all())
        self._group_commit()
        self._flusher.close()
        self.store.close()


def run(config: BrokerConfig) -> None:
    """Opens the store (recovery), binds, prints READY and serves until stopped."""
    store = MessageStore.open(config)
    service = Service(
        SERVICE_NAME, max_deferred=config.max_pending_requests, version=package_version()
    )
    app = StoreApp(config, store, service)
    try:
        endpoint, feed = app.bind()
    except BaseException:
        app.close()
        service.ctx.destroy(linger=0)
        raise
    announce_ready(SERVICE_NAME, endpoint=endpoint, feed=feed)
    service.run()
