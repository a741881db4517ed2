"""mqadmin's metadata requests: deleteTopic, updateSubGroup / deleteSubGroup and the group
list, cleanExpiredCQ (RocketMQ's AdminBrokerProcessor, for these operations).

Deleting a topic drops its config, its committed offsets and, through the store, its
ConsumeQueues; its records stay in the CommitLog until retention deletes their segments.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ferry.protocol.errors import BrokerSystemError, InvalidParameterError
from ferry.protocol.messages import (
    AnyReply,
    CleanExpiredConsumeQueueRequest,
    DeleteSubscriptionGroupRequest,
    DeleteTopicRequest,
    ErrorReply,
    GetAllSubscriptionGroupRequest,
    OkReply,
    QueuesCleanedReply,
    StoreDeleteTopicRequest,
    SubscriptionGroupListReply,
    UpdateSubscriptionGroupRequest,
)
from ferry.protocol.names import check_group, check_topic, is_system_topic
from ferry.remoting.calls import Caller
from ferry.remoting.consumer_offsets import ConsumerOffsetTable
from ferry.remoting.subscription_groups import SubscriptionGroupTable
from ferry.remoting.topic_table import TopicTable
from ferry.runtime.service import Peer

log = logging.getLogger("ferry.remoting.admin")

STORE_TIMEOUT_S = 10.0
MAX_RETRY_TIMES = 1000


def relay(call: Caller, what: str) -> Callable[[AnyReply, list[Any]], None]:
    """A store reply passed on to the caller as it is."""

    def on_reply(body: AnyReply, _frames: list[Any]) -> None:
        if isinstance(body, QueuesCleanedReply | ErrorReply):
            call.reply(body)
        else:
            call.fail(BrokerSystemError(f"store answered {what} with {type(body).__name__}"))

    return on_reply


class MetadataAdmin:
    def __init__(
        self,
        store: Peer,
        topics: TopicTable,
        groups: SubscriptionGroupTable,
        offsets: ConsumerOffsetTable,
        on_topics_changed: Callable[[], None],
    ) -> None:
        self._store = store
        self._topics = topics
        self._groups = groups
        self._offsets = offsets
        self._on_topics_changed = on_topics_changed

    # ---- topics ----

    def delete_topic(self, req: DeleteTopicRequest, call: Caller) -> None:
        check_topic(req.topic)
        if is_system_topic(req.topic):
            raise InvalidParameterError(f"topic {req.topic!r} is a system topic")
        existed = self._topics.remove(req.topic)
        offsets = self._offsets.remove(topic=req.topic)
        if existed:
            self._on_topics_changed()  # the name servers hear of it at once
        log.info("topic %s deleted (%d group offsets dropped)", req.topic, offsets)
        self._store.request(
            StoreDeleteTopicRequest(topic=req.topic),
            relay(call, "delete topic"),
            timeout_s=STORE_TIMEOUT_S,
        )

    def clean_expired(self, req: CleanExpiredConsumeQueueRequest, call: Caller) -> None:
        self._store.request(req, relay(call, "cleanExpiredCQ"), timeout_s=STORE_TIMEOUT_S)

    # ---- subscription groups ----

    def update_group(self, req: UpdateSubscriptionGroupRequest, _call: Caller) -> OkReply:
        config = req.config
        check_group(config.group_name)
        if not 0 <= config.retry_max_times <= MAX_RETRY_TIMES:
            raise InvalidParameterError(f"retryMaxTimes must be within 0..{MAX_RETRY_TIMES}")
        if config.retry_queue_nums < 0:
            raise InvalidParameterError("retryQueueNums must be 0 or more")
        self._groups.put(config)
        log.info("subscription group set: %s", config)
        return OkReply()

    def delete_group(self, req: DeleteSubscriptionGroupRequest, _call: Caller) -> OkReply:
        check_group(req.group_name)
        removed = self._groups.remove(req.group_name)
        offsets = self._offsets.remove(group=req.group_name) if req.clean_offset else 0
        log.info(
            "subscription group %s %s (%d topic offsets dropped)",
            req.group_name,
            "deleted" if removed else "was not there",
            offsets,
        )
        return OkReply()

    def all_groups(
        self, _req: GetAllSubscriptionGroupRequest, _call: Caller
    ) -> SubscriptionGroupListReply:
        return SubscriptionGroupListReply(groups=self._groups.all())
