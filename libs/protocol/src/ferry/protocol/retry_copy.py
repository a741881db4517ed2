"""The copy of a stored message that goes back to its group: to %RETRY%<group> (reconsume
times plus one) or, out of reconsume times, to %DLQ%<group>. Remoting's send-back
(a consumer gives a message back) and the scheduler's revive service (a popped message not
acked in its invisible time) both make it here, so both copies look the same.
"""

from __future__ import annotations

from dataclasses import dataclass

from ferry.protocol import record
from ferry.protocol.names import RETRY_PREFIX, SCHEDULE_TOPIC, dlq_topic, retry_topic

PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
PROPERTY_DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"
FIRST_RETRY_DELAY_LEVEL = 3  # the n-th retry waits level 3 + n - 1 (10 s, 30 s, 1 min, ...)
MAX_LEVEL = 18  # levels of the default messageDelayLevel


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
    immediate: bool = False,
) -> SendBack:
    """The copy of a stored message that goes to the group's retry topic or DLQ; with `hold`,
    a retry copy is addressed to SCHEDULE_TOPIC_XXXX and waits there for its delay level."""
    props = dict(rec.properties)
    props.pop(record.PROPERTY_SCHEDULED_FROM, None)  # the copy is a new message for the scheduler
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
    elif immediate:  # a popped message: its invisible time was the wait
        topic = retry_topic(group)
        level = 0
        props.pop(record.PROPERTY_DELAY, None)
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
