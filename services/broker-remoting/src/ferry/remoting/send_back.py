"""CONSUMER_SEND_MSG_BACK: a consumer gives back a message it failed to consume.

The broker reads the stored message (by its CommitLog offset) and stores a copy, its reconsume
times plus one, in %RETRY%<group>, where the group's members find it again; or, once the
message is out of reconsume times (or the consumer asks, delay level < 0), in %DLQ%<group>,
which nobody consumes by default. The copy keeps body, flags, tags, keys and the message id, and
records where it came from: RETRY_TOPIC (the original topic), ORIGIN_MESSAGE_ID,
RECONSUME_TIME; DLQ copies also DLQ_ORIGIN_TOPIC and DLQ_ORIGIN_MESSAGE_ID.

The retry delay: a retry copy is stored aside in SCHEDULE_TOPIC_XXXX (queue level - 1, its
real topic %RETRY%<group> and queue 0 in REAL_TOPIC / REAL_QID), and the scheduler puts it in
the retry topic once its level's time has passed (10 s for the first retry by default). A
broker without a scheduler (schedulerEndpoint empty) stores it straight in the retry topic.
"""

from __future__ import annotations

import logging
from typing import Any

from ferry.protocol import record
from ferry.protocol.errors import (
    BrokerSystemError,
    FerryError,
    InvalidParameterError,
    SubscriptionGroupNotExistError,
)
from ferry.protocol.messages import (
    AnyReply,
    ConsumerSendMsgBackRequest,
    ErrorReply,
    OkReply,
    StorePutReply,
    StorePutRequest,
    ViewMessageReply,
    ViewMessageRequest,
)
from ferry.protocol.names import check_group
from ferry.protocol.retry_copy import MAX_LEVEL, plan_send_back
from ferry.remoting.calls import Caller
from ferry.remoting.group_topics import GroupTopics
from ferry.remoting.stats import BrokerStats
from ferry.remoting.subscription_groups import SubscriptionGroupTable
from ferry.runtime.service import Peer

log = logging.getLogger("ferry.remoting.send_back")

STORE_TIMEOUT_S = 10.0


class SendBackProcessor:
    def __init__(
        self,
        groups: SubscriptionGroupTable,
        group_topics: GroupTopics,
        store: Peer,
        store_host: str,
        stats: BrokerStats,
        *,
        max_level: int = MAX_LEVEL,
        hold: bool = False,
    ) -> None:
        self._max_level = max_level
        self._hold = hold  # a scheduler runs: retries wait for their delay level
        self._groups = groups
        self._group_topics = group_topics
        self._store = store
        self._store_host = store_host
        self._stats = stats

    def handle(self, req: ConsumerSendMsgBackRequest, call: Caller) -> None:
        check_group(req.consumer_group)
        if req.phys_offset < 0:
            raise InvalidParameterError(f"CommitLog offset {req.phys_offset} is negative")
        config = self._groups.find(req.consumer_group)
        if config is None:
            if not self._groups.auto_create:
                raise SubscriptionGroupNotExistError(
                    f"subscription group {req.consumer_group!r} does not exist"
                )
            config = self._groups.ensure(req.consumer_group)
        limit = req.max_reconsume_times if req.max_reconsume_times >= 0 else config.retry_max_times

        def on_view(body: AnyReply, frames: list[Any]) -> None:
            try:
                self._store_copy(req, limit, body, frames, call)
            except FerryError as err:
                call.fail(err)

        self._store.request(
            ViewMessageRequest(phys_offset=req.phys_offset), on_view, timeout_s=STORE_TIMEOUT_S
        )

    def _store_copy(
        self,
        req: ConsumerSendMsgBackRequest,
        limit: int,
        body: AnyReply,
        frames: list[Any],
        call: Caller,
    ) -> None:
        if isinstance(body, ErrorReply):
            call.reply(body)  # QUERY_NOT_FOUND: the message is gone (retention)
            return
        if not isinstance(body, ViewMessageReply) or not frames:
            raise BrokerSystemError(f"store answered a view with {type(body).__name__}")
        try:
            rec = next(record.iter_records(bytes(frames[0])))
        except (record.RecordError, StopIteration) as exc:
            raise BrokerSystemError(f"record at {req.phys_offset} unreadable: {exc}") from None
        plan = plan_send_back(
            rec,
            req.consumer_group,
            delay_level=req.delay_level,
            max_reconsume_times=limit,
            origin_msg_id=req.origin_msg_id,
            origin_topic=req.origin_topic,
            max_level=self._max_level,
            hold=self._hold,
        )
        if plan.to_dlq:
            self._group_topics.dlq(req.consumer_group)
            log.info(
                "%s of %s to %s after %d attempt(s)",
                rec.properties.get(record.PROPERTY_UNIQ_KEY, req.phys_offset),
                req.consumer_group,
                plan.topic,
                rec.reconsume_times + 1,
            )
        else:
            self._group_topics.retry(req.consumer_group)

        def on_put(reply: AnyReply, _frames: list[Any]) -> None:
            if isinstance(reply, StorePutReply):
                self._stats.put_messages += 1
                if plan.to_dlq:
                    self._stats.count_dlq(req.consumer_group, plan.topic)
                call.reply(OkReply())
            elif isinstance(reply, ErrorReply):
                call.reply(reply)
            else:
                call.fail(BrokerSystemError(f"store answered a put with {type(reply).__name__}"))

        self._store.request(
            StorePutRequest(
                topic=plan.put_topic or plan.topic,
                queue_id=plan.put_queue,
                count=1,
                store_host=self._store_host,
            ),
            on_put,
            [plan.record],
            timeout_s=STORE_TIMEOUT_S,
        )
