"""Client bookkeeping requests: heartbeats, consumer lists, offsets (RocketMQ's
ClientManageProcessor and ConsumerManageProcessor).

When a consumer group gains or loses a member (a heartbeat, an unregistration, a client gone
silent), its members are told at once (member_notices). A departed client's queue locks are
released. A clustering consumer's first heartbeat creates its group's retry topic.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from ferry.protocol.errors import (
    BrokerSystemError,
    FerryError,
    InvalidParameterError,
    QueryNotFoundError,
)
from ferry.protocol.messages import (
    AnyReply,
    ConsumerData,
    ConsumerListReply,
    ErrorReply,
    GetConsumerListByGroupRequest,
    GetMaxOffsetRequest,
    GetMinOffsetRequest,
    GroupListReply,
    HeartbeatRequest,
    OffsetReply,
    OkReply,
    QueryConsumerOffsetRequest,
    QueryTopicConsumeByWhoRequest,
    QueueStat,
    StoreQueueOffsetsReply,
    StoreQueueOffsetsRequest,
    SubscriptionData,
    UnregisterClientRequest,
    UpdateConsumerOffsetRequest,
)
from ferry.protocol.names import check_group, check_topic
from ferry.remoting.calls import Caller
from ferry.remoting.client_table import ClientTable
from ferry.remoting.consumer_offsets import ConsumerOffsetTable
from ferry.remoting.group_topics import GroupTopics
from ferry.remoting.member_notices import MemberNotifier
from ferry.remoting.queue_locks import QueueLockTable
from ferry.remoting.stats import now_ms
from ferry.remoting.subscription_groups import SubscriptionGroupTable
from ferry.runtime.service import Peer

log = logging.getLogger("ferry.remoting.clients")

STORE_QUERY_TIMEOUT_S = 5.0


class GroupCoordination:
    """What reacts to membership: notices to members, lock releases, retry topics."""

    def __init__(
        self, notifier: MemberNotifier, locks: QueueLockTable, group_topics: GroupTopics
    ) -> None:
        self.notifier = notifier
        self.locks = locks
        self.group_topics = group_topics


class ConsumerManager:
    def __init__(
        self,
        clients: ClientTable,
        groups: SubscriptionGroupTable,
        offsets: ConsumerOffsetTable,
        store: Peer,
        coordination: GroupCoordination | None = None,
        check_subscription: Callable[[SubscriptionData], None] | None = None,
    ) -> None:
        """check_subscription refuses a subscription (raises) the broker cannot filter by:
        the heartbeat carrying it is refused and nothing of it is registered."""
        self._check_subscription = check_subscription
        self._clients = clients
        self._groups = groups
        self._offsets = offsets
        self._store = store
        self._coordination = coordination

    # ---- clients ----

    def heartbeat(self, req: HeartbeatRequest, call: Caller) -> None:
        if self._check_subscription is not None:
            for consumer in req.consumers:
                for sub in consumer.subscriptions:
                    self._check_subscription(sub)
        changed = self._clients.heartbeat(
            req.client_id,
            req.producer_groups,
            req.consumers,
            now_ms(),
            client_addr=req.client_addr,
            language=req.language,
            version=req.version,
        )
        if self._groups.auto_create:
            for consumer in req.consumers:
                self._groups.ensure(consumer.group)
        coordination = self._coordination
        if coordination is not None:
            coordination.notifier.remember(req.client_id, call)
            for consumer in req.consumers:
                self._ensure_retry_topic(coordination, consumer)
        call.reply(OkReply())
        self._members_changed(changed)

    def unregister(self, req: UnregisterClientRequest, call: Caller) -> None:
        left = self._clients.unregister(req.client_id, req.producer_group, req.consumer_group)
        coordination = self._coordination
        if coordination is not None:
            if self._clients.get(req.client_id) is None:
                coordination.notifier.forget(req.client_id)
                coordination.locks.release_client(req.client_id)
            else:
                coordination.locks.release_client(req.client_id, left)
        call.reply(OkReply())
        self._members_changed(left)

    def expire_clients(self, at_ms: int) -> list[str]:
        """Drops clients silent for too long; their groups' members are told."""
        gone = self._clients.drop_silent(at_ms)
        for info in gone:
            if self._coordination is not None:
                self._coordination.notifier.forget(info.client_id)
                self._coordination.locks.release_client(info.client_id)
            self._members_changed(info.consumers)
        return [info.client_id for info in gone]

    def _members_changed(self, groups: Iterable[str]) -> None:
        """Tells the members of each group (a new member too: it rebalances as well)."""
        if self._coordination is None:
            return
        for group in sorted(groups):
            self._coordination.notifier.notify(group, self._clients.consumer_ids(group))

    def _ensure_retry_topic(self, coordination: GroupCoordination, consumer: ConsumerData) -> None:
        if consumer.message_model != "CLUSTERING":
            return
        try:
            coordination.group_topics.retry(consumer.group)
        except FerryError as err:
            log.warning("no retry topic for group %s: %s", consumer.group, err)

    def consumer_list(self, req: GetConsumerListByGroupRequest, _call: Caller) -> ConsumerListReply:
        check_group(req.consumer_group)
        return ConsumerListReply(client_ids=self._clients.consumer_ids(req.consumer_group))

    def groups_of_topic(self, req: QueryTopicConsumeByWhoRequest, _call: Caller) -> GroupListReply:
        check_topic(req.topic)
        groups = self._clients.groups_consuming(req.topic)
        groups.update(g for g in self._offsets.groups() if self._offsets.queues(g, req.topic))
        return GroupListReply(groups=sorted(groups))

    # ---- offsets ----

    def query_offset(self, req: QueryConsumerOffsetRequest, _call: Caller) -> OffsetReply:
        check_group(req.consumer_group)
        check_topic(req.topic)
        offset = self._offsets.get(req.consumer_group, req.topic, req.queue_id)
        if offset is None:
            raise QueryNotFoundError(
                f"group {req.consumer_group!r} has no offset for {req.topic}:{req.queue_id}"
            )
        return OffsetReply(offset=offset)

    def update_offset(self, req: UpdateConsumerOffsetRequest, call: Caller) -> None:
        """Commits the entries, each clamped to its queue's max offset as the store has it:
        an offset past the end would hide the messages stored up to it and show a negative
        lag. When the store cannot tell (down, slow), the entries are committed as given."""
        check_group(req.consumer_group)
        for entry in req.entries:  # all checked before any is applied
            check_topic(entry.topic)
            if entry.queue_id < 0 or entry.offset < 0:
                raise InvalidParameterError(
                    f"bad offset entry {entry.topic}:{entry.queue_id} -> {entry.offset}"
                )
        self._groups.ensure(req.consumer_group)
        by_topic: dict[str, set[int]] = {}
        for entry in req.entries:
            by_topic.setdefault(entry.topic, set()).add(entry.queue_id)
        tops: dict[tuple[str, int], int] = {}
        waiting = [len(by_topic)]

        def commit_all() -> None:
            for entry in req.entries:
                offset = entry.offset
                top = tops.get((entry.topic, entry.queue_id))
                if top is not None and offset > top:
                    log.info(
                        "group %s committed %d on %s:%d past its max offset %d: kept %d",
                        req.consumer_group,
                        offset,
                        entry.topic,
                        entry.queue_id,
                        top,
                        top,
                    )
                    offset = top
                self._offsets.commit(req.consumer_group, entry.topic, entry.queue_id, offset)
            call.reply(OkReply())

        def answered(topic: str, queue_ids: set[int]) -> Callable[[AnyReply, list[Any]], None]:
            def on_reply(body: AnyReply, _frames: list[Any]) -> None:
                if isinstance(body, StoreQueueOffsetsReply):
                    found = {q.queue_id: q.max_offset for q in body.queues}
                    for queue_id in queue_ids:  # a queue the store never saw is empty
                        tops[(topic, queue_id)] = found.get(queue_id, 0)
                else:
                    log.debug("no max offsets of %s to clamp commits with: %s", topic, body)
                waiting[0] -= 1
                if waiting[0] == 0:
                    commit_all()

            return on_reply

        if not by_topic:
            call.reply(OkReply())
            return
        for topic, queue_ids in sorted(by_topic.items()):
            self._store.request(
                StoreQueueOffsetsRequest(topic=topic, queue_ids=sorted(queue_ids)),
                answered(topic, queue_ids),
                timeout_s=STORE_QUERY_TIMEOUT_S,
            )

    def max_offset(self, req: GetMaxOffsetRequest, call: Caller) -> None:
        self._queue_offset(req.topic, req.queue_id, call, lambda q: q.max_offset)

    def min_offset(self, req: GetMinOffsetRequest, call: Caller) -> None:
        self._queue_offset(req.topic, req.queue_id, call, lambda q: q.min_offset)

    def _queue_offset(
        self, topic: str, queue_id: int, call: Caller, pick: Callable[[QueueStat], int]
    ) -> None:
        check_topic(topic)
        if queue_id < 0:
            raise InvalidParameterError(f"queue id {queue_id} is negative")

        def on_reply(body: AnyReply, _frames: list[Any]) -> None:
            if isinstance(body, StoreQueueOffsetsReply):
                # a queue the store has never seen has no messages: offset 0
                stat = next((q for q in body.queues if q.queue_id == queue_id), None)
                call.reply(OffsetReply(offset=0 if stat is None else pick(stat)))
            elif isinstance(body, ErrorReply):
                call.reply(body)
            else:
                call.fail(BrokerSystemError(f"store answered with {type(body).__name__}"))

        self._store.request(
            StoreQueueOffsetsRequest(topic=topic, queue_ids=[queue_id]),
            on_reply,
            timeout_s=STORE_QUERY_TIMEOUT_S,
        )
