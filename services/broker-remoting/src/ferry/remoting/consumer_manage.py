"""Client bookkeeping requests: heartbeats, consumer lists, offsets (RocketMQ's
ClientManageProcessor and ConsumerManageProcessor)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ferry.protocol.errors import BrokerSystemError, InvalidParameterError, QueryNotFoundError
from ferry.protocol.messages import (
    AnyReply,
    ConsumerListReply,
    ErrorReply,
    GetConsumerListByGroupRequest,
    GetMaxOffsetRequest,
    GetMinOffsetRequest,
    HeartbeatRequest,
    OffsetReply,
    OkReply,
    QueryConsumerOffsetRequest,
    QueueStat,
    StoreQueueOffsetsReply,
    StoreQueueOffsetsRequest,
    UnregisterClientRequest,
    UpdateConsumerOffsetRequest,
)
from ferry.protocol.names import check_group, check_topic
from ferry.remoting.client_table import ClientTable
from ferry.remoting.consumer_offsets import ConsumerOffsetTable
from ferry.remoting.stats import now_ms
from ferry.remoting.subscription_groups import SubscriptionGroupTable
from ferry.runtime.service import Call, Peer

STORE_QUERY_TIMEOUT_S = 5.0


class ConsumerManager:
    def __init__(
        self,
        clients: ClientTable,
        groups: SubscriptionGroupTable,
        offsets: ConsumerOffsetTable,
        store: Peer,
    ) -> None:
        self._clients = clients
        self._groups = groups
        self._offsets = offsets
        self._store = store

    # ---- clients ----

    def heartbeat(self, req: HeartbeatRequest, _call: Call) -> OkReply:
        self._clients.heartbeat(req.client_id, req.producer_groups, req.consumers, now_ms())
        if self._groups.auto_create:
            for consumer in req.consumers:
                self._groups.ensure(consumer.group)
        return OkReply()

    def unregister(self, req: UnregisterClientRequest, _call: Call) -> OkReply:
        self._clients.unregister(req.client_id, req.producer_group, req.consumer_group)
        return OkReply()

    def consumer_list(self, req: GetConsumerListByGroupRequest, _call: Call) -> ConsumerListReply:
        check_group(req.consumer_group)
        return ConsumerListReply(client_ids=self._clients.consumer_ids(req.consumer_group))

    # ---- offsets ----

    def query_offset(self, req: QueryConsumerOffsetRequest, _call: Call) -> OffsetReply:
        check_group(req.consumer_group)
        check_topic(req.topic)
        offset = self._offsets.get(req.consumer_group, req.topic, req.queue_id)
        if offset is None:
            raise QueryNotFoundError(
                f"group {req.consumer_group!r} has no offset for {req.topic}:{req.queue_id}"
            )
        return OffsetReply(offset=offset)

    def update_offset(self, req: UpdateConsumerOffsetRequest, _call: Call) -> OkReply:
        check_group(req.consumer_group)
        for entry in req.entries:  # all checked before any is applied
            check_topic(entry.topic)
            if entry.queue_id < 0 or entry.offset < 0:
                raise InvalidParameterError(
                    f"bad offset entry {entry.topic}:{entry.queue_id} -> {entry.offset}"
                )
        self._groups.ensure(req.consumer_group)
        for entry in req.entries:
            self._offsets.commit(req.consumer_group, entry.topic, entry.queue_id, entry.offset)
        return OkReply()

    def max_offset(self, req: GetMaxOffsetRequest, call: Call) -> None:
        self._queue_offset(req.topic, req.queue_id, call, lambda q: q.max_offset)

    def min_offset(self, req: GetMinOffsetRequest, call: Call) -> None:
        self._queue_offset(req.topic, req.queue_id, call, lambda q: q.min_offset)

    def _queue_offset(
        self, topic: str, queue_id: int, call: Call, pick: Callable[[QueueStat], int]
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
