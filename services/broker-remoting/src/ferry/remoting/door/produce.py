"""The door's produce routes (see door/__init__.py): SEND_MESSAGE (10, long header names),
SEND_MESSAGE_V2 (310, the names a..m), SEND_BATCH_MESSAGE (320; also a 10 with batch=1, as
the C++ client sends batches) and END_TRANSACTION (37).

A send becomes a SendMessageRequest with its records frame (send_records.py) in the call's
payload, then takes the SDK's path through SendProcessor. Born host is the connection's peer;
born time, flag, reconsume times, queue and sysflag come from the header, the properties
string goes in as sent. What SendProcessor needs from the properties (DELAY, TIMER_DELIVER_MS,
TRAN_MSG) is found without splitting them.

The reply's msgId is RocketMQ's offset message id (store host + CommitLog offset; ids joined
by "," for a batch), as a RocketMQ broker answers: clients keep it as offsetMsgId (the msg_id
users see is their own UNIQ_KEY), and Java's transaction producer decodes the half message's
CommitLog offset from it for END_TRANSACTION. A SUCCESS always carries its ext fields (the C++
client crashes on a send answered without them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from ferry import native
from ferry.protocol import record
from ferry.protocol.errors import InvalidParameterError, MessageIllegalError
from ferry.protocol.messages import EndTransactionRequest, SendMessageReply, SendMessageRequest
from ferry.protocol.rocketmq.codes import RequestCode
from ferry.protocol.rocketmq.command import RemotingCommand
from ferry.protocol.rocketmq.fields import ext, ext_bool, ext_int, ok
from ferry.remoting.door.send_records import (
    batch_body,
    batch_records,
    born_host,
    prop_value,
    single_record,
)
from ferry.remoting.processors import BrokerProcessors
from ferry.runtime.call import Payload
from ferry.runtime.remoting_door import DoorCall, Route


class SendKeys(NamedTuple):
    """The header's field names, which differ between SEND_MESSAGE and SEND_MESSAGE_V2."""

    group: str
    topic: str
    default_topic: str
    default_queue_nums: str
    queue_id: str
    sysflag: str
    born_timestamp: str
    flag: str
    properties: str
    reconsume_times: str
    batch: str


V1 = SendKeys(
    "producerGroup",
    "topic",
    "defaultTopic",
    "defaultTopicQueueNums",
    "queueId",
    "sysFlag",
    "bornTimestamp",
    "flag",
    "properties",
    "reconsumeTimes",
    "batch",
)
V2 = SendKeys("a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "m")
# a compressed batch may inflate to what an uncompressed one could have been: the frame limit
MAX_INFLATED_BATCH = 16 * 1024 * 1024
_TRUE = ("1", "true")


def _transactional(sysflag: int, props: str) -> bool:
    return bool(sysflag & record.SYSFLAG_TX_PREPARED) or (
        record.PROPERTY_TRAN_MSG in props and prop_value(props, record.PROPERTY_TRAN_MSG) == "true"
    )


def _int_prop(props: str, key: str) -> int:
    if key not in props:  # the usual send has none of these: skip the search
        return 0
    value = prop_value(props, key)
    if not value:
        return 0
    try:
        return int(value)
    except ValueError:
        raise InvalidParameterError(f"property {key}={value!r} is not a whole number") from None


ToSend = Callable[[RemotingCommand, DoorCall], SendMessageRequest]


def _send_request(keys: SendKeys, always_batch: bool) -> ToSend:
    long_names: ToSend | None = _send_request(V1, True) if always_batch and keys is V2 else None

    def request(cmd: RemotingCommand, call: DoorCall) -> SendMessageRequest:
        fields = cmd.ext_fields
        if long_names is not None and V2.topic not in fields and V1.topic in fields:
            return long_names(cmd, call)  # a 320 with the long names
        topic = ext(cmd, keys.topic)
        group = ext(cmd, keys.group)
        queue_id = ext_int(cmd, keys.queue_id, -1)
        sysflag = ext_int(cmd, keys.sysflag, 0)
        born_timestamp = ext_int(cmd, keys.born_timestamp, 0)
        reconsume_times = ext_int(cmd, keys.reconsume_times, 0)
        props = fields.get(keys.properties) or ""
        host = born_host(call.conn.peer)
        if always_batch or fields.get(keys.batch) in _TRUE:
            if record.PROPERTY_DELAY in props and _int_prop(props, record.PROPERTY_DELAY) > 0:
                raise MessageIllegalError("a batch cannot be delayed (DELAY on the batch)")
            body, sysflag = batch_body(cmd.body, sysflag, MAX_INFLATED_BATCH)
            frame, count = batch_records(
                topic,
                body,
                queue_id=queue_id,
                sysflag=sysflag,
                born_timestamp=born_timestamp,
                host=host,
                reconsume_times=reconsume_times,
            )
            delay_level = deliver_at_ms = 0
            transactional = False
            if sysflag & record.SYSFLAG_TX_PREPARED:
                raise MessageIllegalError("a batch cannot be a transaction's half message")
        else:
            frame = single_record(
                topic,
                cmd.body,
                props.encode(),
                queue_id=queue_id,
                flag=ext_int(cmd, keys.flag, 0),
                sysflag=sysflag,
                born_timestamp=born_timestamp,
                host=host,
                reconsume_times=reconsume_times,
            )
            count = 1
            delay_level = _int_prop(props, record.PROPERTY_DELAY)
            deliver_at_ms = _int_prop(props, record.PROPERTY_TIMER_DELIVER_MS)
            transactional = _transactional(sysflag, props)
        call.payload = [frame]
        return SendMessageRequest(
            producer_group=group,
            topic=topic,
            queue_id=queue_id,
            count=count,
            default_topic=fields.get(keys.default_topic) or "",
            default_topic_queue_nums=ext_int(cmd, keys.default_queue_nums, 4),
            delay_level=delay_level,
            deliver_at_ms=deliver_at_ms,
            transactional=transactional,
        )

    return request


_PREFIXES: dict[str, str] = {}


def _offset_ids(store_host: str, phys_offsets: list[int]) -> str:
    """RocketMQ's offset message ids of stored records, joined by ","."""
    prefix = _PREFIXES.get(store_host)
    if prefix is None:
        prefix = _PREFIXES[store_host] = record.pack_host(store_host).hex().upper()
    if len(phys_offsets) == 1:
        return f"{prefix}{phys_offsets[0]:016X}"
    if native.ENABLED:
        joined = native.joined_offset_ids(prefix, phys_offsets)
        if joined is not None:
            return joined
    return ",".join(f"{prefix}{p:016X}" for p in phys_offsets)


def _send_response(keys: SendKeys) -> Any:
    def response(cmd: RemotingCommand, reply: Any, _payload: Payload) -> RemotingCommand:
        if not isinstance(reply, SendMessageReply):
            raise ValueError(f"a send answered with {type(reply).__name__}")
        names = keys
        if V2.topic not in cmd.ext_fields and V1.topic in cmd.ext_fields:
            names = V1  # a 320 with the long names
        fields = {
            "msgId": _offset_ids(reply.store_host, reply.phys_offsets),
            "queueId": str(reply.queue_id),
            "queueOffset": str(reply.queue_offset),
        }
        props = cmd.ext_fields.get(names.properties) or ""
        sysflag = cmd.ext_fields.get(names.sysflag) or "0"
        if _transactional(int(sysflag) if sysflag.isdigit() else 0, props):
            fields["transactionId"] = prop_value(props, record.PROPERTY_UNIQ_KEY) or ""
        return cmd.response(reply.status, ext_fields=fields)

    return response


def _end_request(cmd: RemotingCommand, _call: DoorCall) -> EndTransactionRequest:
    fields = cmd.ext_fields
    return EndTransactionRequest(
        producer_group=ext(cmd, "producerGroup"),
        commit_log_offset=ext_int(cmd, "commitLogOffset"),
        resolution=ext_int(cmd, "commitOrRollback"),
        tran_state_table_offset=ext_int(cmd, "tranStateTableOffset", 0),
        msg_id=fields.get("msgId") or "",
        transaction_id=fields.get("transactionId") or "",
        from_transaction_check=ext_bool(cmd, "fromTransactionCheck"),
        topic=fields.get("topic") or "",
    )


def _end_response(cmd: RemotingCommand, _reply: Any, _payload: Payload) -> RemotingCommand:
    return ok(cmd)


def routes(processors: BrokerProcessors) -> dict[int, Route]:
    del processors  # the routes reach SendProcessor and EndTransactionProcessor by Service.serve
    return {
        RequestCode.SEND_MESSAGE: Route(_send_request(V1, False), _send_response(V1)),
        RequestCode.SEND_MESSAGE_V2: Route(_send_request(V2, False), _send_response(V2)),
        RequestCode.SEND_BATCH_MESSAGE: Route(_send_request(V2, True), _send_response(V2)),
        RequestCode.END_TRANSACTION: Route(_end_request, _end_response),
    }
