"""What the broker sends a RocketMQ client unasked, as the requests RocketMQ uses for them:
oneway, so the client answers nothing (a transaction check is answered by an END_TRANSACTION
of its own).

A check's body is the half message as its producer sent it, as a RocketMQ broker sends it:
its real topic and queue id (REAL_TOPIC / REAL_QID), not the half topic's; its offsets, store
stamp and properties as stored (the header's offsets are the half topic's)."""

from __future__ import annotations

import struct

from ferry.protocol import record
from ferry.protocol.messages import (
    AnyReply,
    CheckTransactionStateNotice,
    ConsumerIdsChangedNotice,
    ResetOffsetNotice,
)
from ferry.protocol.rocketmq.codes import ONEWAY_FLAG, LanguageCode, RequestCode
from ferry.protocol.rocketmq.command import RemotingCommand
from ferry.protocol.rocketmq.fields import json_body
from ferry.remoting.door import admin_json as shapes
from ferry.runtime.tcp_door import Connection

LANGUAGE = "language"  # conn.state key: the language of the client's heartbeats


def to_notice(body: AnyReply, conn: Connection | None = None) -> RemotingCommand | None:
    if isinstance(body, ConsumerIdsChangedNotice):
        return RemotingCommand(
            code=RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
            flag=ONEWAY_FLAG,
            ext_fields={"consumerGroup": body.consumer_group},
        )
    if isinstance(body, ResetOffsetNotice):
        if conn is not None and conn.state.get(LANGUAGE) == LanguageCode.CPP:
            # the C++ client reads a list of queues with their offsets (RocketMQ's ForC body)
            table = json_body(
                [
                    {**shapes.queue_key(e.topic, body.broker_name, e.queue_id), "offset": e.offset}
                    for e in body.offsets
                ]
            )
        else:
            table = shapes.table_with_queue_keys(
                (shapes.queue_key(e.topic, body.broker_name, e.queue_id), e.offset)
                for e in body.offsets
            )
        return RemotingCommand(
            code=RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
            flag=ONEWAY_FLAG,
            ext_fields={
                "topic": body.topic,
                "group": body.consumer_group,
                "timestamp": "0",
                "isForce": "true",
            },
            body=b'{"offsetTable":' + table + b"}",
        )
    if isinstance(body, CheckTransactionStateNotice):
        fields = {
            "tranStateTableOffset": str(body.tran_state_table_offset),
            "commitLogOffset": str(body.commit_log_offset),
            "msgId": body.msg_id,
            "transactionId": body.transaction_id or body.msg_id,
        }
        raw = body.record
        try:
            half = next(record.iter_records(raw))
            fields["offsetMsgId"] = record.offset_msg_id(half.store_host, half.phys_offset)
            raw = _as_sent(raw, half)
        except (record.RecordError, StopIteration, struct.error):
            pass
        return RemotingCommand(
            code=RequestCode.CHECK_TRANSACTION_STATE,
            flag=ONEWAY_FLAG,
            ext_fields=fields,
            body=raw,  # in the layout clients decode
        )
    return None


_INT = struct.Struct(">i")


def _as_sent(raw: bytes, half: record.Record) -> bytes:
    """The stored half message with its real topic and queue id; the CRC made again (Ferry's
    covers the whole record). Unchanged when it names no real topic."""
    topic = half.properties.get(record.PROPERTY_REAL_TOPIC, "").encode()
    if not topic or len(topic) > record.MAX_TOPIC_BYTES:
        return raw
    qid = half.properties.get(record.PROPERTY_REAL_QID, "")
    queue_id = int(qid) if qid.isdigit() and int(qid) < 1 << 31 else half.queue_id
    tail = record.OFF_BODY + _INT.unpack_from(raw, record.OFF_BODYLEN)[0]  # the topic's length
    rest = raw[tail + record.TOPIC_LEN_SIZE + raw[tail] : half.total_size]  # properties
    out = bytearray(raw[:tail])
    out += bytes((len(topic),)) + topic + rest
    _INT.pack_into(out, 0, len(out))
    record.QUEUE_ID.pack_into(out, record.OFF_QUEUE_ID, queue_id)
    record.CRC.pack_into(out, record.OFF_CRC, record.record_crc(out, 0, len(out)))
    return bytes(out)
