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
from dataclasses import dataclass
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
from ferry.protocol.names import RETRY_PREFIX, SCHEDULE_TOPIC, check_group, retry_topic
from ferry.remoting.group_topics import GroupTopics, dlq_topic
from ferry.remoting.stats import BrokerStats
from ferry.remoting.subscription_groups import SubscriptionGroupTable
from ferry.runtime.service import Call, Peer

log = logging.getLogger("ferry.remoting.send_back")

PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
PROPERTY_DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"
FIRST_RETRY_DELAY_LEVEL = 3  # the n-th retry waits level 3 + n - 1 (10 s, 30 s, 1 min, ...)
MAX_LEVEL = 18  # levels of the default messageDelayLevel
PROPERTY_SCHEDULED_FROM = "SCHEDULED_FROM"  # set by the scheduler on what it delivers
STORE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class SendBack:
    topic: str  # where the copy ends up: %RETRY%group or %DLQ%group
    record: bytes  # the copy to store, in the layout of ferry.protocol.record
    to_dlq: bool
    delay_level: int  # 0 for the DLQ
    put_topic: str = ""  # where it is stored now, when not `topic` (held by the scheduler)
    put_queue: int = 0


def plan_send_back(
    rec: record.Record,
    group: str,
    *,
    delay_level: int,
    max_reconsume_times: int,
    origin_msg_id: str = "",
    origin_topic: str = "",
    max_level: int = MAX_LEVEL,
    hold: bool = False,
) -> SendBack:
    """The copy of a stored message that goes to the group's retry topic or DLQ; with `hold`,
    a retry copy is addressed to SCHEDULE_TOPIC_XXXX and waits there for its delay level."""
    props = dict(rec.properties)
    props.pop(PROPERTY_SCHEDULED_FROM, None)  # the copy is a new message for the scheduler
    reconsumed = rec.reconsume_times
    if record.PROPERTY_RETRY_TOPIC not in props:
        # a first failure: the stored topic is the original one (retry copies carry it)
        original = rec.topic
        if original.startswith(RETRY_PREFIX) and origin_topic:
            original = origin_topic
        props[record.PROPERTY_RETRY_TOPIC] = original
    origin_id = (
        props.get(PROPERTY_ORIGIN_MESSAGE_ID)
        or origin_msg_id
        or props.get(record.PROPERTY_UNIQ_KEY)
        or record.offset_msg_id(rec.store_host, rec.phys_offset)
    )
    props[PROPERTY_ORIGIN_MESSAGE_ID] = origin_id
    props[record.PROPERTY_RECONSUME_TIME] = str(reconsumed + 1)
    props[record.PROPERTY_MAX_RECONSUME_TIMES] = str(max_reconsume_times)
    to_dlq = delay_level < 0 or reconsumed >= max_reconsume_times
    if to_dlq:
        topic = dlq_topic(group)
        level = 0
        props.pop(record.PROPERTY_DELAY, None)
        props[PROPERTY_DLQ_ORIGIN_TOPIC] = props[record.PROPERTY_RETRY_TOPIC]
        props[PROPERTY_DLQ_ORIGIN_MESSAGE_ID] = origin_id
    else:
        topic = retry_topic(group)
        level = delay_level if delay_level > 0 else FIRST_RETRY_DELAY_LEVEL + reconsumed
        level = min(level, max_level)
        props[record.PROPERTY_DELAY] = str(level)
    put_topic, put_queue = topic, 0
    if hold and not to_dlq:
        props[record.PROPERTY_REAL_TOPIC] = topic
        props[record.PROPERTY_REAL_QID] = "0"
        put_topic, put_queue = SCHEDULE_TOPIC, level - 1
    raw = record.encode_record(
        put_topic.encode(),
        rec.body,  # as stored: a compressed body stays compressed, its sysflag says so
        record.encode_properties(props),
        flag=rec.flag,
        sysflag=rec.sysflag,
        born_timestamp=rec.born_timestamp,
        born_host=record.pack_host(rec.born_host),
        reconsume_times=reconsumed + 1,
        prepared_tx_offset=rec.prepared_tx_offset,
        queue_id=put_queue,
    )
    return SendBack(topic, raw, to_dlq, level, put_topic, put_queue)


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

    def handle(self, req: ConsumerSendMsgBackRequest, call: Call) -> None:
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
        call: Call,
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
