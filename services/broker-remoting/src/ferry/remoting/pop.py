"""POP_MESSAGE, ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME: pop consumption's broker side.

A pop reads from the group's consume offset of one queue at a time (the topic's queues in
turn, and the group's %RETRY% queue), hands what it found to the scheduler's revive service,
which stores the checkpoint that keeps those messages invisible, and only then advances the
group's offset past them and answers. One pop per (group, queue) is in flight at a time, so
consumers sharing a queue never get the same message while it is invisible. When no queue
has anything, the pop is tried again every POLL_RETRY_S until its poll time is up.

Where a group new to a queue starts (PopMessageRequest.init_mode): by from_first, at the
queue's first message or at its end; or, with POP_INIT_FRESH (the gRPC proxy's pops, as
RocketMQ 5's proxy pops with initMode MAX except where the queue's first message is still in
memory), at its end unless the queue is fresh. Ferry's store maps its CommitLog and has no
measure of what the page cache holds, so "in memory" is taken to mean recent: the queue's
min offset is 0 (retention deleted nothing) and its first message was stored less than
popInitFreshMillis ago (30 minutes by default). A group made just after a topic's first
sends gets them; one made on a topic with an old history starts at its end. The first pop of
a group on such a queue reads its first message once (a probe) to decide.

Acks and changes of invisible time are passed to the revive service, which holds what is in
flight and checks the receipt handle. docs/architecture.md (pop consumption) has the design.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

import msgspec

from ferry.protocol import record
from ferry.protocol.codes import Perm, PullStatus
from ferry.protocol.errors import (
    BrokerSystemError,
    FerryError,
    InvalidParameterError,
    NoPermissionError,
    ServiceNotAvailableError,
    TopicNotExistError,
)
from ferry.protocol.messages import (
    POP_INIT_FRESH,
    AckMessageRequest,
    AnyReply,
    BatchAckMessageReply,
    BatchAckMessageRequest,
    ChangeInvisibleTimeReply,
    ChangeInvisibleTimeRequest,
    ErrorReply,
    OkReply,
    PopCheckpoint,
    PopCheckpointReply,
    PopCheckpointRequest,
    PopMessageReply,
    PopMessageRequest,
    StoreGetReply,
    StoreGetRequest,
)
from ferry.protocol.names import check_group, check_topic
from ferry.remoting.calls import Caller
from ferry.remoting.consumer_offsets import ConsumerOffsetTable
from ferry.remoting.expression import store_filter
from ferry.remoting.group_topics import GroupTopics
from ferry.remoting.pop_order import OrderLeases, is_order_handle
from ferry.remoting.stats import BrokerStats
from ferry.remoting.subscription_groups import SubscriptionGroupTable
from ferry.remoting.topic_table import TopicTable
from ferry.runtime.config import BrokerConfig
from ferry.runtime.service import Peer, Service

MAX_POP_MSGS = 256
MAX_POLL_MS = 30_000
MIN_INVISIBLE_MS = 100
MAX_INVISIBLE_MS = 12 * 3600 * 1000  # as RocketMQ's proxy
POLL_RETRY_S = 0.05  # a pop that found nothing looks again after this, or at a send first
STORE_TIMEOUT_S = 10.0


def now_ms() -> int:
    return int(time.time() * 1000)


class PopProcessor:
    def __init__(
        self,
        broker_name: str,
        topics: TopicTable,
        groups: SubscriptionGroupTable,
        offsets: ConsumerOffsetTable,
        group_topics: GroupTopics,
        store: Peer,
        revive: Peer | None,
        service: Service,
        stats: BrokerStats,
    ) -> None:
        self._broker_name = broker_name
        self._topics = topics
        self._groups = groups
        self._offsets = offsets
        self._group_topics = group_topics
        self._store = store
        self._revive = revive
        self._service = service
        self._stats = stats
        self.busy: set[tuple[str, str, int]] = set()  # (group, topic, queue) being popped
        self.orders = OrderLeases(offsets)  # the queues FIFO groups hold
        self._waiting: list[Callable[[], None]] = []  # pops that found only busy queues
        # pops that found nothing, by topic, oldest first: a send to the topic wakes one of
        # each group (as RocketMQ's pop long polling), not every one to race for it
        self._sleeping: dict[str, dict[_PopScan, None]] = {}
        self._turn = itertools.count()
        self.broker_perm: int = Perm.READ_WRITE
        self.property_filter = False  # enablePropertyFilter: SQL92 pops
        self.init_fresh_ms = 30 * 60 * 1000  # popInitFreshMillis

    def apply_config(self, config: BrokerConfig) -> None:
        """The keys read here that updateBrokerConfig may change live."""
        self.broker_perm = config.broker_permission
        self.property_filter = config.enable_property_filter
        self.init_fresh_ms = config.pop_init_fresh_millis

    def release(self, key: tuple[str, str, int]) -> None:
        """A pop of the queue ended: pops that skipped it as busy look again now."""
        self.busy.discard(key)
        waiting, self._waiting = self._waiting, []
        for again in waiting:
            self._service.later(0, again)

    def wait_for_release(self, again: Callable[[], None]) -> None:
        self._waiting.append(again)

    def sleep(self, scan: _PopScan) -> None:
        """Looks again in POLL_RETRY_S, or at once when a send to its topic is stored.
        Messages that reach a queue another way (retries, delayed messages, transaction
        commits) are found by the timer."""
        token = scan.asleep = object()
        self._sleeping.setdefault(scan.req.topic, {})[scan] = None
        self._service.later(POLL_RETRY_S, lambda: self._wake(scan, token))

    def messages_arrived(self, topic: str) -> None:
        """A send to `topic` was stored: the longest sleeping pop of each group looks now."""
        sleeping = self._sleeping.get(topic)
        if not sleeping:
            return  # on every stored send: nothing made when no pop waits
        groups: set[str] = set()
        for scan in list(sleeping):
            group = scan.req.consumer_group
            if group in groups:
                continue
            if not scan.call.done:  # one answered already ends at once: wake the next too
                groups.add(group)
            self._wake(scan, scan.asleep)

    def _wake(self, scan: _PopScan, token: object) -> None:
        if token is None or scan.asleep is not token:
            return  # woken already (by a send, or by this sleep's timer)
        scan.asleep = None
        sleeping = self._sleeping.get(scan.req.topic)
        if sleeping is not None:
            sleeping.pop(scan, None)
            if not sleeping:
                del self._sleeping[scan.req.topic]
        scan.run()

    def _revive_peer(self) -> Peer:
        if self._revive is None:
            raise ServiceNotAvailableError(
                f"broker {self._broker_name} runs no scheduler (schedulerEndpoint): no pop"
            )
        return self._revive

    # ---- pop ----

    def pop(self, req: PopMessageRequest, call: Caller) -> None:
        revive = self._revive_peer()
        topic = self._topics.get(req.topic)
        if topic is None:
            check_topic(req.topic)
            raise TopicNotExistError(
                f"topic {req.topic!r} does not exist on broker {self._broker_name}"
            )
        if not topic.perm & Perm.READ or not self.broker_perm & Perm.READ:
            raise NoPermissionError(
                f"topic {req.topic!r} is not readable on broker {self._broker_name}"
            )
        if not 1 <= req.max_msgs <= MAX_POP_MSGS:
            raise InvalidParameterError(f"max_msgs must be within 1..{MAX_POP_MSGS}")
        if not MIN_INVISIBLE_MS <= req.invisible_ms <= MAX_INVISIBLE_MS:
            raise InvalidParameterError(
                f"invisible_ms must be within {MIN_INVISIBLE_MS}..{MAX_INVISIBLE_MS}"
            )
        group = self._groups.ensure(req.consumer_group)
        if not group.consume_enable:
            raise NoPermissionError(f"consumer group {req.consumer_group!r} may not consume")
        codes, sql = store_filter(
            req.expression_type,
            req.expression,
            sql_enabled=self.property_filter,
            broker=self._broker_name,
        )
        retry = self._group_topics.retry(req.consumer_group).topic_name
        self._group_topics.dlq(req.consumer_group)  # where revivals out of times go
        limit = req.max_reconsume_times
        if limit < 0:
            limit = group.retry_max_times
        queues = [(req.topic, i, list(codes), sql) for i in range(topic.read_queue_nums)]
        # copies keep their tags; any of them is for this group (RocketMQ's filterSupportRetry
        # is false by default: retries are not filtered). A FIFO group has no retry copies:
        # its messages come again from their queue.
        if group.consume_message_orderly and not req.order:
            req = msgspec.structs.replace(req, order=True)  # the group decides, as RocketMQ 5's
        if not req.order:
            queues.append((retry, 0, [], ""))
        deadline = time.monotonic() + min(max(req.poll_ms, 0), MAX_POLL_MS) / 1000
        _PopScan(self, revive, req, call, queues, next(self._turn), deadline, limit).run()


class _PopScan:
    """One pop: the queues in turn from `start`; each round that finds nothing waits
    POLL_RETRY_S and starts over, until the deadline."""

    def __init__(
        self,
        owner: PopProcessor,
        revive: Peer,
        req: PopMessageRequest,
        call: Caller,
        queues: list[tuple[str, int, list[int], str]],
        start: int,
        deadline: float,
        limit: int,
    ) -> None:
        self.o = owner
        self.revive = revive
        self.req = req
        self.call = call
        self.queues = queues
        self.start = start
        self.deadline = deadline
        self.limit = limit
        self.tried = 0
        self.skipped: set[tuple[str, str, int]] = set()  # queues held by other pops
        self.asleep: object | None = None  # while it waits to look again (PopProcessor.sleep)

    def run(self) -> None:
        if self.call.done:
            return
        if self.tried >= len(self.queues):
            self.tried = 0
            skipped, self.skipped = self.skipped, set()
            if skipped and time.monotonic() < self.deadline:
                # other pops held queues that may have more: look again when one ends (at
                # once if one ended during this round, as its wake-up came before this wait)
                if skipped & self.o.busy:
                    self.o.wait_for_release(self.run)
                else:
                    self.o._service.later(0, self.run)
            elif time.monotonic() + POLL_RETRY_S < self.deadline:
                self.o.sleep(self)
            else:
                self.call.reply(PopMessageReply(status=PullStatus.NO_NEW_MSG))
            return
        qtopic, qid, codes, sql = self.queues[(self.start + self.tried) % len(self.queues)]
        self.tried += 1
        group = self.req.consumer_group
        key = (group, qtopic, qid)
        if key in self.o.busy:
            self.skipped.add(key)
            self.run()
            return
        if self.req.order and self.o.orders.held(key):
            self.run()  # a batch of it is in flight to the group
            return
        offset = self.o._offsets.get(group, qtopic, qid)
        first = offset is None
        if offset is None:
            offset = 0
        self.o.busy.add(key)
        if first and self.req.init_mode == POP_INIT_FRESH and qtopic == self.req.topic:
            self._probe(key)
            return

        def on_get(body: AnyReply, frames: list[Any]) -> None:
            if not isinstance(body, StoreGetReply):
                self.o.release(key)
                self._fail(body)
                return
            if first and not self.req.from_first and qtopic == self.req.topic:
                # a group new to this queue starts at its end (ConsumeFromWhere LAST_OFFSET)
                self.o._offsets.commit(group, qtopic, qid, body.max_offset)
                self.o.release(key)
                self.run()
                return
            if body.status != PullStatus.FOUND or not frames:
                if body.next_begin_offset != offset:  # filtered out or moved: skip them
                    self.o._offsets.commit(group, qtopic, qid, body.next_begin_offset)
                self.o.release(key)
                self.run()
                return
            if self.req.order:
                self._lease(key, body, bytes(frames[0]))
            else:
                self._checkpoint(key, body, bytes(frames[0]))

        self.o._store.request(
            StoreGetRequest(
                topic=qtopic,
                queue_id=qid,
                queue_offset=offset,
                max_msgs=self.req.max_msgs,
                tag_codes=codes,
                sql=sql,
            ),
            on_get,
            timeout_s=STORE_TIMEOUT_S,
        )

    def _probe(self, key: tuple[str, str, int]) -> None:
        """A group's first pop of a queue in POP_INIT_FRESH: its start (0 when the queue is
        fresh, else its end) committed, then the same queue popped from there."""
        group, qtopic, qid = key

        def on_get(body: AnyReply, frames: list[Any]) -> None:
            if not isinstance(body, StoreGetReply):
                self.o.release(key)
                self._fail(body)
                return
            start = 0 if self._fresh(body, frames) else body.max_offset
            self.o._offsets.commit(group, qtopic, qid, start)
            self.o.release(key)
            self.tried -= 1  # the queue again, from its offset now
            self.run()

        self.o._store.request(
            StoreGetRequest(topic=qtopic, queue_id=qid, queue_offset=0, max_msgs=1),
            on_get,
            timeout_s=STORE_TIMEOUT_S,
        )

    def _fresh(self, body: StoreGetReply, frames: list[Any]) -> bool:
        if body.min_offset != 0:
            return False  # retention deleted its first messages: an old queue
        if body.status != PullStatus.FOUND or not frames:
            return body.max_offset == 0  # empty: its end is its start
        first = next(record.iter_records(bytes(frames[0])), None)
        return first is not None and now_ms() - first.store_timestamp < self.o.init_fresh_ms

    def _checkpoint(self, key: tuple[str, str, int], body: StoreGetReply, frame: bytes) -> None:
        group, qtopic, qid = key
        recs = [r for r in record.iter_records(frame) if r.topic == qtopic]
        now = now_ms()
        ck = PopCheckpoint(
            group=group,
            topic=self.req.topic,
            queue_topic=qtopic,
            queue_id=qid,
            pop_ms=now,
            revive_at_ms=now + self.req.invisible_ms,
            max_reconsume_times=self.limit,
            queue_offsets=[r.queue_offset for r in recs],
            phys_offsets=[r.phys_offset for r in recs],
        )

        def on_ck(reply: AnyReply, _frames: list[Any]) -> None:
            self.o.release(key)
            if not isinstance(reply, PopCheckpointReply):
                self._fail(reply)  # not advanced: the next pop reads them again
                return
            self.o._offsets.commit(group, qtopic, qid, body.next_begin_offset)
            self.o._stats.count_get(group, qtopic, len(recs), len(frame))
            self.call.reply(
                PopMessageReply(status=PullStatus.FOUND, count=len(recs), handles=reply.handles),
                [frame],
            )

        self.revive.request(PopCheckpointRequest(checkpoint=ck), on_ck, timeout_s=STORE_TIMEOUT_S)

    def _lease(self, key: tuple[str, str, int], body: StoreGetReply, frame: bytes) -> None:
        """A FIFO group's batch: leased in memory, the offset left before it (pop_order)."""
        group, qtopic, _ = key
        handles, frame = self.o.orders.lease(
            key, frame, body.next_begin_offset, self.req.invisible_ms
        )
        self.o.release(key)
        if not handles:  # the frame held only other topics' records
            self.o._offsets.commit(*key, body.next_begin_offset)
            self.run()
            return
        self.o._stats.count_get(group, qtopic, len(handles), len(frame))
        self.call.reply(
            PopMessageReply(status=PullStatus.FOUND, count=len(handles), handles=handles), [frame]
        )

    def _fail(self, body: AnyReply) -> None:
        if isinstance(body, ErrorReply):
            self.call.reply(body)
        else:
            self.call.fail(BrokerSystemError(f"unexpected {type(body).__name__} in a pop"))


class PopSettleProcessor:
    """Acks and changes of invisible time, passed to the revive service that checks them."""

    def __init__(self, owner: PopProcessor) -> None:
        self._owner = owner

    def ack(self, req: AckMessageRequest, call: Caller) -> None:
        check_group(req.consumer_group)
        if is_order_handle(req.receipt_handle):
            self._order_ack(req.consumer_group, req.receipt_handle)
            call.reply(OkReply())
            return
        self._forward(req, call)

    def batch_ack(self, req: BatchAckMessageRequest, call: Caller) -> None:
        check_group(req.consumer_group)
        ordered = [i for i, e in enumerate(req.entries) if is_order_handle(e.receipt_handle)]
        if not ordered:
            self._forward(req, call)
            return
        outcomes: dict[int, tuple[int, str]] = {}
        for i in ordered:
            try:
                self._order_ack(req.consumer_group, req.entries[i].receipt_handle)
                outcomes[i] = (0, "")
            except FerryError as err:
                outcomes[i] = (int(err.code), err.message)
        rest = [e for i, e in enumerate(req.entries) if i not in outcomes]
        if not rest:
            call.reply(_batch_reply(outcomes, len(req.entries)))
            return

        def on_reply(body: AnyReply, _frames: list[Any]) -> None:
            if not isinstance(body, BatchAckMessageReply):
                call.reply(body)
                return
            others = iter(zip(body.codes, body.messages, strict=True))
            for i in range(len(req.entries)):
                if i not in outcomes:
                    outcomes[i] = next(others)
            call.reply(_batch_reply(outcomes, len(req.entries)))

        self._forward_to(
            BatchAckMessageRequest(consumer_group=req.consumer_group, entries=rest), on_reply, call
        )

    def change(self, req: ChangeInvisibleTimeRequest, call: Caller) -> None:
        check_group(req.consumer_group)
        if not MIN_INVISIBLE_MS <= req.invisible_ms <= MAX_INVISIBLE_MS:
            raise InvalidParameterError(
                f"invisible_ms must be within {MIN_INVISIBLE_MS}..{MAX_INVISIBLE_MS}"
            )
        if is_order_handle(req.receipt_handle):
            orders = self._owner.orders
            handle = orders.change(req.consumer_group, req.receipt_handle, req.invisible_ms)
            call.reply(ChangeInvisibleTimeReply(receipt_handle=handle))
            return
        self._forward(req, call)

    def _order_ack(self, group: str, handle: str) -> None:
        ended = self._owner.orders.ack(group, handle)
        if ended is not None:  # the queue's next batch may go now
            self._owner.messages_arrived(ended[1])

    def _forward(
        self,
        req: AckMessageRequest | BatchAckMessageRequest | ChangeInvisibleTimeRequest,
        call: Caller,
    ) -> None:
        def on_reply(body: AnyReply, _frames: list[Any]) -> None:
            call.reply(body)

        self._forward_to(req, on_reply, call)

    def _forward_to(
        self,
        req: AckMessageRequest | BatchAckMessageRequest | ChangeInvisibleTimeRequest,
        on_reply: Callable[[AnyReply, list[Any]], None],
        call: Caller,
    ) -> None:
        revive = self._owner._revive_peer()
        try:
            revive.request(req, on_reply, timeout_s=STORE_TIMEOUT_S)
        except FerryError as err:
            call.fail(err)


def _batch_reply(outcomes: dict[int, tuple[int, str]], count: int) -> BatchAckMessageReply:
    return BatchAckMessageReply(
        codes=[outcomes[i][0] for i in range(count)],
        messages=[outcomes[i][1] for i in range(count)],
    )
