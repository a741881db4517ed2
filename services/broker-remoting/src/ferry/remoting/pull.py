"""PULL_MESSAGE: check, record the piggybacked commit, and forward to the store.

Long polling lives in the store (it sees arrivals first); remoting passes the suspend time
through and waits for the store's answer a little longer than that. The store's records come
back to the client in the frame they arrived in, never decoded here.

A store killed while holding pulls takes them with it. When the connection to the store drops,
remoting answers every pull still held there as "no new message" at the offset it asked for,
so that the client pulls again at once (that pull waits for the restarted store) instead of
waiting out the hold time and the grace (25 s by default) for an answer that will not come.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

import msgspec
from opentelemetry.trace import Span

from ferry.protocol.codes import Perm, PullStatus
from ferry.protocol.errors import (
    BrokerSystemError,
    InvalidParameterError,
    NoPermissionError,
    TopicNotExistError,
)
from ferry.protocol.messages import (
    AnyReply,
    ErrorReply,
    PullMessageReply,
    PullMessageRequest,
    StoreGetReply,
    StoreGetRequest,
    SubscriptionData,
)
from ferry.protocol.names import check_topic
from ferry.protocol.span_attributes import messaging
from ferry.protocol.sql_filter import check_sql
from ferry.remoting.calls import Caller
from ferry.remoting.consumer_offsets import ConsumerOffsetTable
from ferry.remoting.expression import check_heartbeat_subscription, store_filter
from ferry.remoting.stats import BrokerStats, elapsed_ms
from ferry.remoting.subscription_groups import SubscriptionGroupTable
from ferry.remoting.topic_table import TopicTable
from ferry.runtime import telemetry
from ferry.runtime.config import BrokerConfig
from ferry.runtime.log_reader import LogReader
from ferry.runtime.service import Peer

TRACER = "ferry.remoting"
MAX_SUSPEND_MS = 30_000
# how much longer than the hold time remoting waits for the store's answer
STORE_REPLY_GRACE_S = 5.0


def effective_suspend_ms(requested_ms: int, long_polling: bool) -> int:
    """How long the store may hold this pull: none without longPollingEnable, else capped."""
    if not long_polling:
        return 0
    return min(max(requested_ms, 0), MAX_SUSPEND_MS)


class PullProcessor:
    def __init__(
        self,
        config: BrokerConfig,
        topics: TopicTable,
        groups: SubscriptionGroupTable,
        offsets: ConsumerOffsetTable,
        store: Peer,
        stats: BrokerStats,
    ) -> None:
        self._topics = topics
        self._groups = groups
        self._offsets = offsets
        self._store = store
        self._stats = stats
        self._broker_name = config.broker_name
        self._broker_perm = config.broker_permission
        self._long_polling = config.long_polling_enable
        self._property_filter = config.enable_property_filter
        if self._property_filter:
            check_sql("TRUE")  # loads the SQL92 parser now, not on the first SQL92 pull
        self.reader = LogReader(
            config.store_root / "commitlog", enabled=config.remoting_reads_commit_log
        )
        # pulls the store holds now: token -> how to answer it if the store goes away
        self._held: dict[int, Callable[[], None]] = {}
        self._tokens = itertools.count()

    def store_lost(self) -> None:
        """The connection to the store dropped: answers every pull it held (see above)."""
        held, self._held = self._held, {}
        for answer in held.values():
            answer()

    def apply_config(self, config: BrokerConfig) -> None:
        """updateBrokerConfig: takes the keys this processor reads that may change live."""
        self._broker_perm = config.broker_permission
        self._long_polling = config.long_polling_enable
        self._property_filter = config.enable_property_filter

    def filter_of(self, expression_type: str, expression: str) -> tuple[tuple[int, ...], str]:
        """(tag codes, SQL92 text) to pull by; typed errors for what this broker refuses."""
        return store_filter(
            expression_type,
            expression,
            sql_enabled=self._property_filter,
            broker=self._broker_name,
        )

    def check_subscription(self, sub: SubscriptionData) -> None:
        """A heartbeat's subscription, refused as its pulls would be (SQL92 ones only)."""
        check_heartbeat_subscription(
            sub.expression_type,
            sub.expression,
            served=self._topics.get(sub.topic) is not None,
            sql_enabled=self._property_filter,
            broker=self._broker_name,
        )

    def handle(self, req: PullMessageRequest, call: Caller) -> None:
        if not telemetry.traced(call.traceparent):
            self._pull(req, call, None)
            return
        attributes = messaging(
            "pull",
            operation_type="receive",
            destination=req.topic,
            partition=req.queue_id,
            consumer_group=req.consumer_group,
        )
        with telemetry.server_span(
            TRACER, f"pull {req.topic}", call.traceparent, call.tracestate, **attributes
        ) as span:
            self._pull(req, call, span)

    def _pull(self, req: PullMessageRequest, call: Caller, span: Span | None) -> None:
        codes, sql = self._checked_filter(req)
        if req.commit_offset >= 0:
            self._offsets.commit(req.consumer_group, req.topic, req.queue_id, req.commit_offset)
        if span is not None:
            traceparent, tracestate = telemetry.current_traceparent()
        else:
            traceparent, tracestate = call.traceparent, call.tracestate
        get = StoreGetRequest(
            topic=req.topic,
            queue_id=req.queue_id,
            queue_offset=req.queue_offset,
            max_msgs=req.max_msgs,
            max_bytes=req.max_bytes,
            tag_codes=list(codes),
            sql=sql,
            suspend_ms=effective_suspend_ms(req.suspend_ms, self._long_polling),
            ranges=self.reader.active,
        )
        self._get(req, call, get, traceparent, tracestate)

    def _checked_filter(self, req: PullMessageRequest) -> tuple[tuple[int, ...], str]:
        """The pull's (tag codes, SQL92 text), after the checks of its topic, queue, offsets
        and group."""
        topic = self._topics.get(req.topic)
        if topic is None:
            check_topic(req.topic)
            raise TopicNotExistError(
                f"topic {req.topic!r} does not exist on broker {self._broker_name}"
            )
        if not topic.perm & Perm.READ or not self._broker_perm & Perm.READ:
            raise NoPermissionError(
                f"topic {req.topic!r} is not readable on broker {self._broker_name}"
            )
        if not 0 <= req.queue_id < topic.read_queue_nums:
            raise InvalidParameterError(
                f"queue id {req.queue_id} is not within 0..{topic.read_queue_nums - 1} "
                f"of topic {req.topic!r}"
            )
        if req.queue_offset < 0:
            raise InvalidParameterError(f"queue offset {req.queue_offset} is negative")
        if req.max_msgs < 1 or req.max_bytes < 1:
            raise InvalidParameterError("max_msgs and max_bytes must be at least 1")
        group = self._groups.ensure(req.consumer_group)
        if not group.consume_enable:
            raise NoPermissionError(f"consumer group {req.consumer_group!r} may not consume")
        return self.filter_of(req.expression_type, req.expression)

    def _get(
        self,
        req: PullMessageRequest,
        call: Caller,
        get: StoreGetRequest,
        traceparent: str,
        tracestate: str,
    ) -> None:
        """Asks the store; reads the records it names from the CommitLog files here when it
        answers with ranges, or asks again for the records themselves when they cannot be."""
        started = time.monotonic()

        def on_reply(body: AnyReply, frames: list[Any]) -> None:
            if isinstance(body, StoreGetReply) and body.runs:  # records in files seen here
                data = self.reader.read(body.runs)
                if data is None:  # not readable here after all: the store sends them
                    self._stats.pull_log_read_misses += 1
                    self._store.request(
                        msgspec.structs.replace(get, ranges=False, suspend_ms=0),
                        on_reply,
                        timeout_s=STORE_REPLY_GRACE_S,
                        traceparent=traceparent,
                        tracestate=tracestate,
                    )
                    return
                frames = [data]
                self._stats.pull_log_reads += 1
            self._answer(req, call, body, frames, started)

        suspend_ms = get.suspend_ms
        if suspend_ms:
            token = next(self._tokens)

            def answer_empty() -> None:
                on_reply(store_gone_reply(req.queue_offset), [])

            def on_held_reply(body: AnyReply, frames: list[Any]) -> None:
                if self._held.pop(token, None) is not None:  # else answered by store_lost
                    on_reply(body, frames)

            self._held[token] = answer_empty
        self._store.request(
            get,
            on_held_reply if suspend_ms else on_reply,
            timeout_s=suspend_ms / 1000 + STORE_REPLY_GRACE_S,
            traceparent=traceparent,
            tracestate=tracestate,
        )

    def _answer(
        self,
        req: PullMessageRequest,
        call: Caller,
        body: AnyReply,
        frames: list[Any],
        started: float,
    ) -> None:
        stats = self._stats
        if stats.on_latency is not None:
            outcome = "error" if isinstance(body, ErrorReply) else "success"
            stats.on_latency("pull_message", outcome, elapsed_ms(started))
        if isinstance(body, StoreGetReply):
            stats.pull_requests += 1
            if body.status == PullStatus.FOUND:
                stats.pulled_messages += body.count
                size = sum(len(f) for f in frames)
                stats.count_get(req.consumer_group, req.topic, body.count, size)
            call.reply(
                PullMessageReply(
                    status=body.status,
                    next_begin_offset=body.next_begin_offset,
                    min_offset=body.min_offset,
                    max_offset=body.max_offset,
                    count=body.count,
                ),
                frames,
            )
        elif isinstance(body, ErrorReply):
            call.reply(body)
        else:
            call.fail(BrokerSystemError(f"store answered a pull with {type(body).__name__}"))


def store_gone_reply(offset: int) -> StoreGetReply:
    """What a held pull gets when the store holding it went away: nothing new at its offset
    (the offsets of the queue are unknown here; clients read them only from found pulls)."""
    return StoreGetReply(
        status=PullStatus.NO_NEW_MSG, next_begin_offset=offset, min_offset=0, max_offset=0
    )
